#!/usr/bin/env bash
# The tool loop against a real model that calls tools (not in CI): llama.cpp's
# OpenAI-compatible server from PyPI `llama-cpp-python[server]`, with its function-calling
# chat format, in front of Parlor with the time server from PyPI `mcp-server-time`.
#
#   PARLOR_GGUF=/path/to/model.gguf scripts/real-model-tools.sh ["your question"]
#
# Any small instruction-tuned GGUF model works with `chatml-function-calling` (e.g. a
# Qwen2.5-Instruct 0.5B–1.5B Q4 file). Installing llama-cpp-python builds llama.cpp (a C++
# compiler and a few minutes). The script prints the chat's events: the model's tool_call,
# the tool_result, and its answer.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PARLOR_GGUF:?set PARLOR_GGUF to a .gguf model file}"
question=${1:-"What time is it in Tokyo right now? Use the clock tool."}

venv=.tools/llama
if ! "$venv/bin/python" -c "import llama_cpp.server" >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'llama-cpp-python[server]'
fi
scripts/setup.sh test >/dev/null   # mcp-server-time in .tools/venv
cargo build --quiet --bin parlor

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
llama_port=$(free_port)
parlor_port=$(free_port)
work=$(mktemp -d)
cleanup() { kill "${llama_pid:-}" "${parlor_pid:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$venv/bin/python" -m llama_cpp.server --model "$PARLOR_GGUF" \
  --chat_format chatml-function-calling --host 127.0.0.1 --port "$llama_port" \
  >"$work/llama.log" 2>&1 &
llama_pid=$!
until curl -sf "http://127.0.0.1:$llama_port/v1/models" >/dev/null; do
  kill -0 "$llama_pid" 2>/dev/null || { cat "$work/llama.log"; exit 1; }
  sleep 1
done

mkdir -p "$work/agents/timekeeper"
cat >"$work/parlor.toml" <<TOML
[[mcp_servers]]
id = "clock"
command = "$PWD/.tools/venv/bin/python"
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
TOML
cat >"$work/agents/timekeeper/template.json" <<'JSON'
{"agentId": "timekeeper", "name": "Timekeeper",
 "personality": "You answer questions about time. Call the clock tools to know the time.",
 "chatSettings": {"tools": ["clock"]}}
JSON

LEPTOS_SITE_ADDR="127.0.0.1:$parlor_port" PARLOR_CONFIG="$work/parlor.toml" \
  PARLOR_AGENTS_DIR="$work/agents" PARLOR_DATA_DIR="$work/data" \
  OPENAI_BASE_URL="http://127.0.0.1:$llama_port/v1" PARLOR_MODEL=local PARLOR_ADMIN_TOKEN=local \
  target/debug/parlor >"$work/parlor.log" 2>&1 &
parlor_pid=$!
until curl -sf -H 'x-parlor-admin-token: local' "http://127.0.0.1:$parlor_port/readyz" \
  | grep -q 'ready ('; do
  kill -0 "$parlor_pid" 2>/dev/null || { cat "$work/parlor.log"; exit 1; }
  sleep 0.5
done

body=$(python3 -c 'import json,sys; print(json.dumps({"message": sys.argv[1]}))' "$question")
curl -sN "http://127.0.0.1:$parlor_port/api/chat/timekeeper" \
  -H 'content-type: application/json' -d "$body" | tee "$work/events.txt"
grep -q '^event: tool_call' "$work/events.txt" \
  && echo "ok: the model called a tool and answered with its result" \
  || { echo "the model did not call a tool"; exit 1; }
