#!/usr/bin/env bash
# `make bench`: every benchmark, each tool's output kept in target/bench/run-<UTC time>/,
# then the report over every run kept there (scripts/bench_report.py): target/bench.json
# holds each figure with its target, every run's value and their median, and a short table
# is printed. Run it five times for the medians the targets ask for.
set -euo pipefail
cd "$(dirname "$0")/.."
run="target/bench/run-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$run"
scripts/bench.sh | tee "$run/page.out"
PARLOR_SKIP_BUILD=1 scripts/load.sh | tee "$run/load.out"
PARLOR_SKIP_BUILD=1 scripts/load-tools.sh | tee "$run/tools-load.out"
cargo bench -p parlor-domain --bench plan --bench context | tee "$run/domain.out"
cargo bench -p parlor-server --bench stores --bench chain --bench mcp --bench search --bench turns \
  --bench tools --bench auth | tee "$run/cargo.out"
python3 scripts/bench_report.py target/bench
