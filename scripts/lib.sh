# Shared by scripts/bench.sh and scripts/load.sh (sourced): a scratch folder and the
# processes started, both cleaned up on exit, a free port, and waiting for a URL to answer.
data=$(mktemp -d)
pids=()
# When the harness last deleted a run's files (seconds since the epoch): see settle_disk.
deleted_at_file="${TMPDIR:-/tmp}/parlor-bench-deleted-at"
# Under `make bench` (PARLOR_BENCH_KEEP names a folder), a run's files are moved there
# instead, and deleted once every run is over: no run then waits for the deletions of the one
# before (see settle_disk).
forget() {
  if [ -n "${PARLOR_BENCH_KEEP:-}" ]; then
    local path
    for path in "$@"; do
      [ -e "$path" ] && mv "$path" "$(mktemp -d -p "$PARLOR_BENCH_KEEP")/"
    done
    return 0
  fi
  rm -rf "$@"
  date +%s > "$deleted_at_file"
}
cleanup() { kill "${pids[@]}" 2>/dev/null || true; forget "$data"; }
trap cleanup EXIT

# The server the runs measure: the release cargo-leptos built (with the site embedded and
# precompressed), copied aside when it is built. `cargo bench` relinks target/release/parlor
# without the site (it builds the package's binaries with default features), so a later run
# must never measure that one.
parlor_bin=target/bench-bin/parlor
if [ ! -x "$parlor_bin" ]; then
  echo "no $parlor_bin: run scripts/bench.sh without PARLOR_SKIP_BUILD first" >&2
  exit 2
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Lets the disk forget what earlier runs deleted before a run that measures new files. On a
# file system without a journal (this machine's ext4), a new inode is never one deleted in
# the last 60 s, or 360 s while its block of the inode table is unwritten (which the new
# run's own files make it again), and finding a free one reads past each such inode, for
# every new file: after a run removed the tens of thousands of files it made, the next
# run's new conversations spent about a sixth of Parlor's CPU there (docs/performance.md,
# "The disk's memory of deletions"). So wait until 365 s after the harness last deleted a
# run's files (PARLOR_BENCH_SETTLE_S sets the 365; 0 skips the wait).
settle_disk() {
  sync
  local last left
  last=$(cat "$deleted_at_file" 2>/dev/null || echo 0)
  left=$(( last + ${PARLOR_BENCH_SETTLE_S:-365} - $(date +%s) ))
  if [ "$left" -gt 0 ]; then sleep "$left"; fi
}
wait_for() { for _ in $(seq 100); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "$1 never answered" >&2; exit 1; }
