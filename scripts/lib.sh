# Shared by scripts/bench.sh and scripts/load.sh (sourced): a scratch folder and the
# processes started, both cleaned up on exit, a free port, and waiting for a URL to answer.
data=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$data"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 100); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "$1 never answered" >&2; exit 1; }
