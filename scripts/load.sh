#!/usr/bin/env bash
# The load runs of docs/performance.md: 1,000 concurrent chat streams for 60 s against the
# mirror model (25 ms between words, its default: about a second per reply, the pace of a
# real model), on one process and on two processes sharing one Redis,
# then the abuse run (1,000 cookie-less requests from one address, then a real browser).
# Prints JSON results; needs redis-server (scripts/setup.sh test installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${SECONDS_PER_RUN:-60}
CONCURRENCY=${CONCURRENCY:-1000}
MIRROR_DELAY_MS=${MIRROR_DELAY_MS:-25}
# The same build as `make run` and scripts/bench.sh (precompressed). `make bench` builds it
# once, in bench.sh, and sets PARLOR_SKIP_BUILD (cargo-leptos would write the site again
# and so relink the server, which embeds it: three minutes for nothing).
[ -n "${PARLOR_SKIP_BUILD:-}" ] || cargo leptos build --release --precompress --split
# The client (testing/fake-llm/src/bin/load-streams.rs): Rust, so it takes little of the two
# cores the server is measured on.
cargo build --release -p fake-llm --bin load-streams

# shellcheck source=scripts/lib.sh
source scripts/lib.sh
# Enough file descriptors for the streams and their stores.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

parlor() { # port data-dir [extra variables...]
  local port=$1 dir=$2; shift 2
  env LEPTOS_SITE_ADDR="127.0.0.1:$port" PARLOR_DATA_DIR="$dir" PARLOR_MIRROR_DELAY_MS="$MIRROR_DELAY_MS" \
    PARLOR_RATE_LIMIT_CHAT=0 PARLOR_RATE_LIMIT_PAGES=0 RUST_LOG=warn "$@" "$parlor_bin" &
  pids+=($!)
  wait_for "http://127.0.0.1:$port/healthz"
}

# The streams are browsers (each opens the chat page for its cookie, then chats with it:
# every conversation is its own, in the sidebar's index), as many as the run has workers.
export LOAD_BROWSERS=1
printf 'max_users = 0\n' > "$data/browsers.toml"
settle_disk
echo '{"one_process_files":'
port=$(free_port); parlor "$port" "$data/one" PARLOR_CONFIG="$data/browsers.toml"
PARLOR_PIDS=${pids[-1]} target/release/load-streams "$SECONDS_PER_RUN" "$CONCURRENCY" "http://127.0.0.1:$port"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
# Its tens of thousands of files go now, not at the end: the next run is a minute further.
forget "$data/one"

echo ',"two_processes_redis":'
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null & pids+=($!)
sleep 0.5
printf 'max_users = 0\n\n[[histories]]\nid = "default"\nbackend = { type = "redis", url = "redis://127.0.0.1:%s" }\n' "$redis_port" > "$data/redis.toml"
a=$(free_port); parlor "$a" "$data/a" PARLOR_CONFIG="$data/redis.toml"; pid_a=${pids[-1]}
b=$(free_port); parlor "$b" "$data/b" PARLOR_CONFIG="$data/redis.toml"; pid_b=${pids[-1]}
PARLOR_PIDS="$pid_a,$pid_b" target/release/load-streams "$SECONDS_PER_RUN" "$CONCURRENCY" \
  "http://127.0.0.1:$a" "http://127.0.0.1:$b"
kill "$pid_a" "$pid_b"

# The abuse runs, with one session slot: with the default rate limits (what is refused), and
# without them (every abusive request is answered, and still takes no slot), each followed
# by a browser that must get in: emulated from another address, then real Chromium.
abuse() { # name [extra variables...]
  local name=$1; shift
  local port; port=$(free_port)
  printf 'max_users = 1\n' > "$data/one-user.toml"
  env LEPTOS_SITE_ADDR="127.0.0.1:$port" PARLOR_DATA_DIR="$data/$name" PARLOR_CONFIG="$data/one-user.toml" \
    PARLOR_MIRROR_DELAY_MS=0 RUST_LOG=warn "$@" "$parlor_bin" & pids+=($!)
  wait_for "http://127.0.0.1:$port/healthz"
  echo ",\"$name\":"
  if [ "$name" = abuse_without_rate_limits ]; then
    # The one slot is left for the real browser below.
    python3 scripts/load.py abuse "http://127.0.0.1:$port" --no-browser
    echo ',"real_browser":'
    (cd end2end && node scripts/browser-gets-in.mjs "http://127.0.0.1:$port")
  else
    python3 scripts/load.py abuse "http://127.0.0.1:$port"
  fi
}
abuse abuse_with_rate_limits
abuse abuse_without_rate_limits PARLOR_RATE_LIMIT_CHAT=0 PARLOR_RATE_LIMIT_PAGES=0
echo '}'
