#!/usr/bin/env bash
# Builds a release and runs scripts/bench.py against it on loopback; prints JSON results.
# The numbers are recorded in docs/performance.md (with the machine they came from).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo leptos build --release --precompress
cargo build --release -p fake-llm --bin fake-llm

# shellcheck source=scripts/lib.sh
source scripts/lib.sh

# The load runs start many conversations from one client: no session limit, no rate limits.
printf 'max_users = 0\n' > "$data/parlor.toml"
export PARLOR_CONFIG="$data/parlor.toml" PARLOR_RATE_LIMIT_CHAT=0 PARLOR_RATE_LIMIT_PAGES=0

fake_port=$(free_port)
target/release/fake-llm "$fake_port" >/dev/null & pids+=($!)
wait_for "http://127.0.0.1:$fake_port/v1/models"

# One Parlor with the mirror model (page size and TTFB), one in front of the fake upstream.
mirror_port=$(free_port)
LEPTOS_SITE_ADDR="127.0.0.1:$mirror_port" PARLOR_DATA_DIR="$data/mirror" PARLOR_MIRROR_DELAY_MS=0 RUST_LOG=warn \
  target/release/parlor & pids+=($!)
proxy_port=$(free_port)
LEPTOS_SITE_ADDR="127.0.0.1:$proxy_port" PARLOR_DATA_DIR="$data/proxy" OPENAI_BASE_URL="http://127.0.0.1:$fake_port/v1" \
  DEFAULT_HISTORY_POLICY=none RUST_LOG=warn target/release/parlor & pids+=($!)
wait_for "http://127.0.0.1:$mirror_port/healthz"
wait_for "http://127.0.0.1:$proxy_port/healthz"

python3 scripts/bench.py "http://127.0.0.1:$mirror_port" "http://127.0.0.1:$fake_port/v1" "http://127.0.0.1:$proxy_port"
