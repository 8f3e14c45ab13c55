#!/usr/bin/env bash
# Builds a release and runs scripts/bench.py against it on loopback; prints JSON results.
# The numbers are recorded in docs/performance.md (with the machine they came from).
set -euo pipefail
cd "$(dirname "$0")/.."
# PARLOR_SKIP_BUILD=1 measures the release build already there (as load.sh does): building
# again writes the site anew and so relinks the server, which embeds it.
if [ -z "${PARLOR_SKIP_BUILD:-}" ]; then
  cargo leptos build --release --precompress --split
  cargo build --release -p fake-llm --bin fake-llm --bin load-streams
  # What every run measures (see `parlor_bin` in scripts/lib.sh).
  mkdir -p target/bench-bin
  cp target/release/parlor target/bench-bin/parlor
fi

# shellcheck source=scripts/lib.sh
source scripts/lib.sh

# The load runs start many conversations from one client: no session limit, no rate limits.
# Summaries are written by the offline mirror model, so a summary exists without an API key.
cat > "$data/parlor.toml" <<'TOML'
max_users = 0

[history]
summary_model = "mirror"

[[models]]
name = "mirror"
provider = "mirror"
TOML
export PARLOR_CONFIG="$data/parlor.toml" PARLOR_RATE_LIMIT_CHAT=0 PARLOR_RATE_LIMIT_PAGES=0

fake_port=$(free_port)
target/release/fake-llm "$fake_port" >/dev/null & pids+=($!)
wait_for "http://127.0.0.1:$fake_port/v1/models"

# One Parlor with the mirror model (page size and TTFB), one in front of the fake upstream.
mirror_port=$(free_port)
LEPTOS_SITE_ADDR="127.0.0.1:$mirror_port" PARLOR_DATA_DIR="$data/mirror" PARLOR_MIRROR_DELAY_MS=0 RUST_LOG=warn \
  "$parlor_bin" >&2 & pids+=($!)
proxy_port=$(free_port)
LEPTOS_SITE_ADDR="127.0.0.1:$proxy_port" PARLOR_DATA_DIR="$data/proxy" OPENAI_BASE_URL="http://127.0.0.1:$fake_port/v1" \
  DEFAULT_HISTORY_POLICY=none RUST_LOG=warn "$parlor_bin" >&2 & pids+=($!)
# One with two agents that send the last 10 turns of long conversations, one of them with the
# rolling summary in its chain: what the `summary` processor adds to time to first token.
mkdir -p "$data/agents/recall" "$data/agents/forget"
for agent in recall forget; do
  chain='["sliding_window", "token_budget"]'
  [ "$agent" = recall ] && chain='["sliding_window", "summary", "token_budget"]'
  cat > "$data/agents/$agent/template.json" <<JSON
{"agentId": "$agent", "name": "$agent", "nodeConfigurations": {"llm.openai": {"model": "gpt-4o-mini"}},
 "chatSettings": {"historyPolicy": "lastN", "historyLength": 10, "historyProcessors": $chain}}
JSON
done
summary_port=$(free_port)
LEPTOS_SITE_ADDR="127.0.0.1:$summary_port" PARLOR_DATA_DIR="$data/summary" PARLOR_AGENTS_DIR="$data/agents" \
  OPENAI_BASE_URL="http://127.0.0.1:$fake_port/v1" RUST_LOG=warn "$parlor_bin" >&2 & pids+=($!)
# One with its history in memory, in front of the same upstream: a turn with no durable write.
printf 'max_users = 0\n\n[[histories]]\nid = "default"\nbackend = { type = "memory" }\n' > "$data/memory.toml"
no_write_port=$(free_port)
LEPTOS_SITE_ADDR="127.0.0.1:$no_write_port" PARLOR_DATA_DIR="$data/no-write" PARLOR_CONFIG="$data/memory.toml" \
  OPENAI_BASE_URL="http://127.0.0.1:$fake_port/v1" DEFAULT_HISTORY_POLICY=none RUST_LOG=warn \
  "$parlor_bin" >&2 & pids+=($!)
wait_for "http://127.0.0.1:$no_write_port/healthz"
wait_for "http://127.0.0.1:$mirror_port/healthz"
wait_for "http://127.0.0.1:$proxy_port/healthz"
wait_for "http://127.0.0.1:$summary_port/healthz"

settle_disk
PARLOR_BENCH_DIR="$data" python3 scripts/bench.py "http://127.0.0.1:$mirror_port" "http://127.0.0.1:$fake_port/v1" \
  "http://127.0.0.1:$proxy_port" "http://127.0.0.1:$summary_port" "http://127.0.0.1:$no_write_port"
