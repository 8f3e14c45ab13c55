#!/usr/bin/env bash
# How long a turn takes when its tool server stops answering (issue 46: "within its timeout
# plus one second"; docs/performance.md). The test upstream asks for `hostile__hang`, a tool
# of testing/hostile-mcp.py (over stdio) that never answers; the server's `timeout_secs` is
# TIMEOUT (default 2). Each run is a new conversation, timed from the request to the end of
# its stream with curl; the runs follow one another, so later ones meet a server Parlor
# restarted after repeated timeouts. Prints one JSON line a run and the median over the timed
# runs.
# Timing lives here, not in a test: these machines are shared and noisy.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-8}
TIMEOUT=${TIMEOUT:-2}
# Seconds between runs: a server down after three timeouts is started again after 1 s.
PAUSE=${PAUSE:-1.5}
[ -n "${PARLOR_SKIP_BUILD:-}" ] || {
  cargo leptos build --release --precompress --split
  mkdir -p target/bench-bin && cp target/release/parlor target/bench-bin/parlor
}
cargo build --release -p fake-llm --bin fake-llm

# shellcheck source=scripts/lib.sh
source scripts/lib.sh

fake_port=$(free_port)
target/release/fake-llm "$fake_port" >/dev/null & pids+=($!)
wait_for "http://127.0.0.1:$fake_port/v1/models"

cat > "$data/parlor.toml" <<TOML
[[mcp_servers]]
id = "hostile"
command = "python3"
args = ["$PWD/testing/hostile-mcp.py"]
timeout_secs = $TIMEOUT
TOML
mkdir -p "$data/agents/hung"
cat > "$data/agents/hung/template.json" <<'JSON'
{"agentId": "hung", "name": "Hung tool", "chatSettings": {"tools": ["hostile"], "historyPolicy": "none"}}
JSON

port=$(free_port)
env LEPTOS_SITE_ADDR="127.0.0.1:$port" PARLOR_DATA_DIR="$data/run" PARLOR_CONFIG="$data/parlor.toml" \
  PARLOR_AGENTS_DIR="$data/agents" OPENAI_BASE_URL="http://127.0.0.1:$fake_port/v1" PARLOR_MODEL=fake \
  PARLOR_ADMIN_TOKEN=bench RUST_LOG=warn "$parlor_bin" & pids+=($!)
wait_for "http://127.0.0.1:$port/healthz"
until curl -sf -H 'x-parlor-admin-token: bench' "http://127.0.0.1:$port/readyz" \
  | grep -q '"hostile":"ready'; do sleep 0.2; done

times=()
for run in $(seq "$RUNS"); do
  [ "$run" = 1 ] || sleep "$PAUSE"
  out="$data/run-$run.sse"
  seconds=$(curl -sN -o "$out" -w '%{time_total}' "http://127.0.0.1:$port/api/chat/hung" \
    -H 'content-type: application/json' \
    -d '{"message": "[call:hostile__hang {}] run '"$run"'"}')
  # The turn must have ended with a reply, the tool's failure given to the model.
  grep -q '"type":"done"' "$out" || { echo "run $run: no done event" >&2; cat "$out" >&2; exit 1; }
  # A run that met the server down (after three timeouts in a row, until it has started
  # again) is answered without its tools, at once, and says so; it is listed, not timed.
  if grep -q '"type":"unavailable"' "$out"; then
    echo "{\"run\": $run, \"turn_s\": $seconds, \"server\": \"down: the turn went on without its tools\"}"
    continue
  fi
  grep -q 'did not answer within' "$out" || { echo "run $run: no timeout in the stream" >&2; cat "$out" >&2; exit 1; }
  over=$(python3 -c "print(round($seconds - $TIMEOUT, 3))")
  echo "{\"run\": $run, \"timeout_s\": $TIMEOUT, \"turn_s\": $seconds, \"over_timeout_s\": $over}"
  times+=("$over")
done
python3 -c "import statistics,sys; print('{\"median_over_timeout_s\": %.3f}' % statistics.median(map(float, sys.argv[1:])))" "${times[@]}"
