#!/usr/bin/env python3
"""Parlor's performance benchmark: measures a running release build on loopback.

Reports (see docs/performance.md for the targets):
  1. the chat page's total transfer (HTML + JS + WASM + CSS, compressed as served; the split
     module fetched on the first action beside it),
  2. server time to first byte for a chat page holding a 50-message conversation, and its
     ratio to `/healthz`'s in the same run; the host's atomic write (with its two fsyncs),
     and the host's floor for a new conversation (a new dialog folder made atomically),
  3. the time Parlor adds to time-to-first-token versus calling the upstream directly, for a
     new conversation and for a continued one,
  4. time to first token on a 1,000-message conversation with and without the `summary`
     processor (agents `recall` and `forget` of SUMMARY_URL, see scripts/bench.sh),
  5. the time a new conversation adds on a Parlor whose history is in memory (NO_WRITE_URL):
     the same path with no durable write, the floor of 3 on this machine.

Usage: bench.py PARLOR_URL UPSTREAM_URL [PROXY_URL [SUMMARY_URL [NO_WRITE_URL]]]
(UPSTREAM_URL is the fake's /v1 base)
Only the standard library is used, so the numbers do not depend on a client package.
"""
import base64
import http.client
import os
import json
import statistics
import sys
import threading
import time
import urllib.parse

PARLOR, UPSTREAM = sys.argv[1], sys.argv[2]
RUNS = 200


def conn(base):
    u = urllib.parse.urlparse(base)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=30), u.path.rstrip("/")


def get(base, path, headers=None):
    c, prefix = conn(base)
    c.request("GET", prefix + path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


def post_stream(base, path, body, headers=None):
    c, prefix = conn(base)
    c.request("POST", prefix + path, body=json.dumps(body),
              headers={"content-type": "application/json", **(headers or {})})
    return c, c.getresponse()


# 1. Transfer size of the chat page as a browser downloads it (brotli accepted).
r, html = get(PARLOR, "/chat?agent=general", {"accept-encoding": "br, gzip"})
cookie = r.getheader("set-cookie").split(";")[0]
sizes = {"HTML": len(html)}
# The page loads parlor.js, which imports the split modules' loader, then the WASM; the code
# behind the page's buttons is a split module fetched on the first action (not counted in
# the page's total, reported beside it).
LOADER = "/pkg/__wasm_split.______________________.js"
for name, path in [("JS", "/pkg/parlor.js"), ("split loader JS", LOADER), ("WASM", "/pkg/parlor.wasm"),
                   ("CSS", "/pkg/parlor.css")]:
    r, body = get(PARLOR, path, {"accept-encoding": "br, gzip"})
    assert r.status == 200, (path, r.status)
    sizes[name] = len(body)
    sizes[name + " encoding"] = r.getheader("content-encoding") or "identity"
total = sum(v for k, v in sizes.items() if not k.endswith("encoding"))
r, manifest = get(PARLOR, "/pkg/__wasm_split_manifest.json")
assert r.status == 200, ("split manifest", r.status)
# Each split point's modules (a module shared by two split points is listed under both); the
# first message fetches those of `run_turn` (app/src/actions.rs), the other actions the rest.
split_points = json.loads(manifest)
split_modules = {}
for module in sorted({f for files in split_points.values() for f in files}):
    r, body = get(PARLOR, f"/pkg/{module}.wasm", {"accept-encoding": "br, gzip"})
    assert r.status == 200, (module, r.status)
    split_modules[module] = len(body)
on_first_action = {m: split_modules[m] for m in split_points.get("parlor_turns", split_modules)}

# 2. A conversation of 50 messages (25 turns), then the page's time to first byte.
session = None
for i in range(25):
    c, r = post_stream(PARLOR, "/api/chat/general",
                       {"session_id": session, "message": f"message number {i} " + "lorem ipsum " * 20},
                       {"cookie": cookie})
    for line in r.read().decode().splitlines():
        if line.startswith("data:") and '"type":"meta"' in line:
            session = json.loads(line[5:])["session_id"]
    c.close()
page = f"/chat?agent=general&session={session}"
r, body = get(PARLOR, page, {"cookie": cookie})
# The page shows the latest 40 messages (20 questions); older ones load on scroll.
assert r.status == 200 and body.count(b'data-role="user"') == 20, "conversation not rendered"

# A conversation of 500 messages (imported), whose page also shows only its latest 40.
c, prefix = conn(PARLOR)
long = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "lorem ipsum " * 20}
        for i in range(500)]
c.request("POST", prefix + "/api/chat/general/sessions/import", body=json.dumps(long),
          headers={"content-type": "application/json", "cookie": cookie})
r = c.getresponse()
long_session = json.loads(r.read())["session_id"]
c.close()
long_page = f"/chat?agent=general&session={long_session}"
ttfb, healthz, ttfb_long = [], [], []
c, _ = conn(PARLOR)
h, _ = conn(PARLOR)


def first_byte(connection, path, headers):
    start = time.perf_counter()
    connection.request("GET", path, headers=headers)
    r = connection.getresponse()
    r.read(1)
    elapsed = (time.perf_counter() - start) * 1000
    r.read()
    return elapsed


# The page and `/healthz` (the server's floor: routing, middleware, a tiny body) alternate,
# each on its own keep-alive connection, so both see the same moment of the machine.
for _ in range(RUNS):
    ttfb.append(first_byte(c, page, {"cookie": cookie, "accept-encoding": "br, gzip"}))
    healthz.append(first_byte(h, "/healthz", {}))
    ttfb_long.append(first_byte(c, long_page, {"cookie": cookie, "accept-encoding": "br, gzip"}))
c.close()
h.close()


# The host's durable write: what Parlor's atomic writes cost here (write a temporary file,
# fsync it, rename it over the old one, fsync the folder), next to the numbers it explains.
def atomic_write(folder, data):
    tmp = os.path.join(folder, "file.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(folder, "file"))
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = os.environ.get("PARLOR_BENCH_DIR") or "."
fsyncs = []
for _ in range(RUNS):
    start = time.perf_counter()
    atomic_write(fsync_dir, b"x" * 2048)
    fsyncs.append((time.perf_counter() - start) * 1000)


def sync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_dialog(root, name, info, messages):
    """A new dialog as the MCP History Store's rules make it (every write atomic and synced,
    no half-made dialog ever visible): a staged folder with its two files, the files and the
    folder synced at once (three threads, as Parlor does), renamed into place, the root
    synced. Two sync rounds, one after the other: the floor of Parlor's new conversation."""
    staged = os.path.join(root, f".{name}.tmp")
    os.mkdir(staged)
    paths = [os.path.join(staged, "conversation.json"), os.path.join(staged, "messages.json")]
    for path, data in zip(paths, (info, messages)):
        with open(path, "wb") as f:
            f.write(data)
    syncs = [threading.Thread(target=sync_path, args=(p,)) for p in paths[:1] + [staged]]
    for t in syncs:
        t.start()
    sync_path(paths[1])
    for t in syncs:
        t.join()
    os.rename(staged, os.path.join(root, name))
    sync_path(root)


new_dialogs = []
floor_root = os.path.join(fsync_dir, "new-dialogs")
os.makedirs(floor_root, exist_ok=True)
for i in range(RUNS):
    start = time.perf_counter()
    new_dialog(floor_root, f"d{i}", b"{" + b"x" * 400 + b"}", b"[" + b"x" * 300 + b"]")
    new_dialogs.append((time.perf_counter() - start) * 1000)


# What a new conversation waits for now: its record appended to the journal of new dialogs
# and the log synced (`fdatasync`); the folder above is made after, under the dialog's locks.
appends = []
log_path = os.path.join(fsync_dir, "journal.log")
log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
try:
    for _ in range(RUNS):
        start = time.perf_counter()
        os.write(log_fd, b"x" * 720)
        os.fdatasync(log_fd)
        appends.append((time.perf_counter() - start) * 1000)
    # The same append as a turn meets it: one at a time, after a pause like the one between
    # the turns below (about a millisecond: the direct call, then Parlor's turn). An append
    # that follows another at once finds the disk and the CPUs awake and takes about half
    # as long here as one after a pause (`cargo bench --bench handover` shows it for the
    # same file, the same bytes and the same system calls), and a turn's write is never
    # the second of a pair. The ratio the target names compares Parlor's added time with
    # this one; the back-to-back figure above is reported beside it.
    spaced = []
    for _ in range(RUNS):
        time.sleep(0.001)
        start = time.perf_counter()
        os.write(log_fd, b"x" * 720)
        os.fdatasync(log_fd)
        spaced.append((time.perf_counter() - start) * 1000)
finally:
    os.close(log_fd)
    os.remove(log_path)


# 3. Time to first token: directly from the upstream, and through Parlor.
def first_token_direct():
    start = time.perf_counter()
    c, r = post_stream(UPSTREAM, "/chat/completions",
                       {"model": "fake", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    while True:
        line = r.fp.readline()
        if line.startswith(b"data:") and b'"content"' in line:
            elapsed = (time.perf_counter() - start) * 1000
            break
    c.close()
    return elapsed


def first_token_parlor(context=None, base=None, agent="concise", session=None, cookie=None):
    body = {"message": "hi"}
    if context is not None:
        body["context"] = context
    if session is not None:
        body["session_id"] = session
    headers = {"cookie": cookie} if cookie else {}
    start = time.perf_counter()
    c, r = post_stream(base or PARLOR_UPSTREAM, f"/api/chat/{agent}", body, headers)
    elapsed = None
    meta = None
    while True:
        line = r.fp.readline()
        if line.startswith(b"event: delta") and elapsed is None:
            elapsed = (time.perf_counter() - start) * 1000
        if line.startswith(b"data:") and b'"type":"meta"' in line:
            meta = json.loads(line[5:])
        # A continued conversation is read to its end, so the next turn starts after it.
        if elapsed is not None and (session is None or line.startswith((b"event: done", b"event: error"))):
            break
    c.close()
    if session is not None:
        return elapsed, meta
    return elapsed


PARLOR_UPSTREAM = sys.argv[3] if len(sys.argv) > 3 else PARLOR
median = statistics.median
# A browser's new conversation (with its cookie, so it joins the browser's list), read to its
# end so that the next turn starts after it, alternating with direct calls.
r, _ = get(PARLOR_UPSTREAM, "/chat?agent=concise")
browser_cookie = r.getheader("set-cookie").split(";")[0]
direct, through = [], []
for _ in range(RUNS // 2):
    direct.append(first_token_direct())
    through.append(first_token_parlor(session="", cookie=browser_cookie)[0])

# The way this was measured before 2026-11-26: an API conversation (no cookie), the stream
# closed at its first delta and the next turn sent at once, so each turn's first token also
# waits behind the previous turn's reply and files, still being written.
direct_b2b, back_to_back = [], []
for _ in range(RUNS // 2):
    direct_b2b.append(first_token_direct())
    back_to_back.append(first_token_parlor())

# The same for a continued conversation (its owner is stored already; only the message is
# written before the model call), alternating with direct calls too.
r, _ = get(PARLOR_UPSTREAM, "/chat?agent=concise")
continued_cookie = r.getheader("set-cookie").split(";")[0]
_, first_meta = first_token_parlor(session="", cookie=continued_cookie)
continued_session = first_meta["session_id"]
direct_again, continued = [], []
for _ in range(RUNS // 2):
    direct_again.append(first_token_direct())
    continued.append(first_token_parlor(session=continued_session, cookie=continued_cookie)[0])

# The same new conversations on a Parlor whose history is in memory (NO_WRITE_URL, the fifth
# argument, in front of the same upstream): the turn's path with no durable write, the floor
# of the figure above on this machine (its p90 too), measured in the same run.
no_write = {}
if len(sys.argv) > 5:
    NO_WRITE = sys.argv[5]
    r, _ = get(NO_WRITE, "/chat?agent=concise")
    no_write_cookie = r.getheader("set-cookie").split(";")[0]
    direct_nw, through_nw = [], []
    for _ in range(RUNS // 2):
        direct_nw.append(first_token_direct())
        through_nw.append(first_token_parlor(base=NO_WRITE, session="", cookie=no_write_cookie)[0])
    no_write = {
        "ttft_added_no_write_ms_median": round(median(through_nw) - median(direct_nw), 3),
        "ttft_added_no_write_ms_p90": round(statistics.quantiles(through_nw, n=10)[-1] - median(direct_nw), 3),
    }

# A turn with a 1 MB image attached, side by side with a plain turn: what reading,
# checking, storing and forwarding the image adds before the first token.
PNG_HEAD = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ")
IMAGE_URL = "data:image/png;base64," + base64.b64encode(PNG_HEAD + os.urandom(1_000_000)).decode()
IMAGE_CONTEXT = [{"source": "screen", "blocks": [{"type": "image", "url": IMAGE_URL}]}]
plain, with_image = [], []
for _ in range(RUNS // 2):
    plain.append(first_token_parlor())
    with_image.append(first_token_parlor(IMAGE_CONTEXT))

# 4. A conversation of 1,000 messages per agent, then turns on each, alternating: `recall`
# sends the rolling summary of what its window leaves out, `forget` does not. Each turn is read
# to its end so the next starts after the previous reply (the summary is kept current in the
# background after each reply).
summary_ttft = {}
if len(sys.argv) > 4:
    SUMMARY = sys.argv[4]
    r, _ = get(SUMMARY, "/chat?agent=recall")
    summary_cookie = r.getheader("set-cookie").split(";")[0]
    sessions = {}
    for agent in ["recall", "forget"]:
        session = None
        for i in range(500):
            c, r = post_stream(SUMMARY, f"/api/chat/{agent}",
                               {"session_id": session, "message": f"Fact number {i}. " + "lorem ipsum " * 8},
                               {"cookie": summary_cookie})
            for line in r.read().decode().splitlines():
                if line.startswith("data:") and '"type":"meta"' in line:
                    session = json.loads(line[5:])["session_id"]
            c.close()
        sessions[agent] = session
    times = {"recall": [], "forget": []}
    metas = {}
    for _ in range(RUNS // 2):
        for agent in ["recall", "forget"]:
            elapsed, meta = first_token_parlor(base=SUMMARY, agent=agent, session=sessions[agent],
                                               cookie=summary_cookie)
            times[agent].append(elapsed)
            metas[agent] = meta["history"]
    sent = metas["recall"].get("summary") or {}
    assert sent.get("sent"), f"no summary sent: {metas['recall']}"
    assert not (metas["forget"].get("summary") or {}).get("sent")
    summary_ttft = {
        "summary_conversation_messages": metas["recall"]["messages_stored"],
        "summary_covers_messages": sent.get("covers"),
        "summary_tokens": sent.get("tokens"),
        "ttft_with_summary_ms_median": round(median(times["recall"]), 3),
        "ttft_without_summary_ms_median": round(median(times["forget"]), 3),
        "ttft_summary_added_ms_median": round(median(times["recall"]) - median(times["forget"]), 3),
    }

result = {
    "transfer_bytes": sizes,
    "transfer_total_kb": round(total / 1000, 1),
    "fetched_on_first_action_bytes": on_first_action,
    "split_modules_bytes": split_modules,
    "ttfb_ms_median": round(median(ttfb), 3),
    "ttfb_ms_p90": round(statistics.quantiles(ttfb, n=10)[-1], 3),
    "ttfb_healthz_ms_median": round(median(healthz), 3),
    "ttfb_page_over_healthz": round(median(ttfb) / median(healthz), 2),
    "ttfb_500_messages_ms_median": round(median(ttfb_long), 3),
    "fsync_atomic_write_ms_median": round(median(fsyncs), 3),
    "fsync_atomic_write_ms_p90": round(statistics.quantiles(fsyncs, n=10)[-1], 3),
    "new_dialog_floor_ms_median": round(median(new_dialogs), 3),
    "new_dialog_floor_ms_p90": round(statistics.quantiles(new_dialogs, n=10)[-1], 3),
    "journal_append_ms_median": round(median(appends), 3),
    "journal_append_ms_p90": round(statistics.quantiles(appends, n=10)[-1], 3),
    "journal_append_spaced_ms_median": round(median(spaced), 3),
    "journal_append_spaced_ms_p90": round(statistics.quantiles(spaced, n=10)[-1], 3),
    "ttft_direct_ms_median": round(median(direct), 3),
    "ttft_parlor_ms_median": round(median(through), 3),
    "ttft_added_ms_median": round(median(through) - median(direct), 3),
    "ttft_added_ms_p90": round(statistics.quantiles(through, n=10)[-1] - median(direct), 3),
    "ttft_added_back_to_back_ms_median": round(median(back_to_back) - median(direct_b2b), 3),
    "ttft_added_back_to_back_ms_p90": round(
        statistics.quantiles(back_to_back, n=10)[-1] - median(direct_b2b), 3),
    "ttft_added_continued_ms_median": round(median(continued) - median(direct_again), 3),
    "ttft_added_continued_ms_p90": round(
        statistics.quantiles(continued, n=10)[-1] - median(direct_again), 3),
    "ttft_plain_turn_ms_median": round(median(plain), 3),
    "ttft_1mb_image_turn_ms_median": round(median(with_image), 3),
    "ttft_1mb_image_added_ms_median": round(median(with_image) - median(plain), 3),
    **summary_ttft,
    **no_write,
}
print(json.dumps(result, indent=2))
