#!/usr/bin/env bash
# The tool loop under load (docs/performance.md): 200 concurrent conversations for 60 s, each
# turn running 3 tool rounds (the test upstream asks for an echo call in every reply;
# `max_rounds = 3` ends the loop with a last call without tools) against npm server-everything
# over stdio, one process that Parlor starts. Prints JSON: turns, errors, time to the first
# delta (after the 3 rounds), peak RSS, descriptors and child processes before and after
# (descriptors also once the upstream's idle pooled connections have closed, up to 120 s).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${SECONDS_PER_RUN:-60}
CONCURRENCY=${CONCURRENCY:-200}
[ -n "${PARLOR_SKIP_BUILD:-}" ] || {
  cargo leptos build --release --precompress --split
}
cargo build --release -p fake-llm --bin fake-llm --bin load-streams
scripts/setup.sh test >/dev/null

# shellcheck source=scripts/lib.sh
source scripts/lib.sh
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

fake_port=$(free_port)
target/release/fake-llm "$fake_port" >/dev/null & pids+=($!)
wait_for "http://127.0.0.1:$fake_port/v1/models"

cat > "$data/parlor.toml" <<TOML
max_users = 0

[tools]
max_rounds = 3

[[mcp_servers]]
id = "echo"
command = "$PWD/end2end/node_modules/.bin/mcp-server-everything"
args = ["stdio"]
allow = ["echo"]
TOML
mkdir -p "$data/agents/toolbench"
cat > "$data/agents/toolbench/template.json" <<'JSON'
{"agentId": "toolbench", "name": "Tool bench", "chatSettings": {"tools": ["echo"], "historyPolicy": "none"}}
JSON

port=$(free_port)
env LEPTOS_SITE_ADDR="127.0.0.1:$port" PARLOR_DATA_DIR="$data/run" PARLOR_CONFIG="$data/parlor.toml" \
  PARLOR_AGENTS_DIR="$data/agents" OPENAI_BASE_URL="http://127.0.0.1:$fake_port/v1" PARLOR_MODEL=fake \
  PARLOR_RATE_LIMIT_CHAT=0 PARLOR_RATE_LIMIT_PAGES=0 PARLOR_ADMIN_TOKEN=bench RUST_LOG=warn \
  "$parlor_bin" & pids+=($!)
parlor_pid=${pids[-1]}
wait_for "http://127.0.0.1:$port/healthz"
until curl -sf -H 'x-parlor-admin-token: bench' "http://127.0.0.1:$port/readyz" \
  | grep -q '"echo":"ready'; do sleep 0.2; done

SETTLE_SECONDS=${SETTLE_SECONDS:-120} LOAD_AGENT=toolbench LOAD_MESSAGE='[call-forever:echo__echo {"message":"hello"}] {id}' \
  PARLOR_PIDS="$parlor_pid" target/release/load-streams "$SECONDS_PER_RUN" "$CONCURRENCY" \
  "http://127.0.0.1:$port"
