#!/usr/bin/env bash
# `make bench` (`make bench RUNS=5` for the medians the targets ask for): every benchmark,
# RUNS times, each run's output kept in target/bench/run-<UTC time>/, then the report over
# every run kept there (scripts/bench_report.py): target/bench.json holds each figure with
# its target, every run's value and their median, and a short table is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1}
case "$runs" in '' | *[!0-9]* | 0) echo "RUNS must be a positive number, not '$runs'" >&2; exit 2 ;; esac

# The runs' files are kept until every run is over (scripts/lib.sh, `forget`): deleting
# tens of thousands of files slows the next run's new ones on some disks.
PARLOR_BENCH_KEEP=$(mktemp -d)
export PARLOR_BENCH_KEEP
finish() {
  echo "removing the runs' files" >&2
  rm -rf "$PARLOR_BENCH_KEEP"
  date +%s > "${TMPDIR:-/tmp}/parlor-bench-deleted-at"
}
trap finish EXIT

for n in $(seq "$runs"); do
  echo "run $n of $runs" >&2
  run="target/bench/run-$(date -u +%Y%m%dT%H%M%SZ)"
  mkdir -p "$run"
  # The release is built once, by the first run (bench.sh).
  skip=1
  [ "$n" -gt 1 ] || skip=
  PARLOR_SKIP_BUILD=$skip scripts/bench.sh | tee "$run/page.out"
  PARLOR_SKIP_BUILD=1 scripts/load.sh | tee "$run/load.out"
  PARLOR_SKIP_BUILD=1 scripts/load-tools.sh | tee "$run/tools-load.out"
  # The benches that measure targets (turn growth, tool rounds, authentication) run every
  # time; the criterion benches of earlier issues, which no target reads, only in the first
  # run, so that five runs fit in a working session.
  benches=(--bench turns --bench tools --bench auth --bench cache)
  if [ "$n" -eq 1 ]; then
    cargo bench -p parlor-domain --bench plan --bench context | tee "$run/domain.out"
    benches+=(--bench stores --bench chain --bench mcp --bench search --bench handover)
  fi
  cargo bench -p parlor-server "${benches[@]}" | tee "$run/cargo.out"
done
python3 scripts/bench_report.py target/bench
