#!/usr/bin/env python3
"""Parlor's load runs (see docs/performance.md): many concurrent chat streams for a while,
then the same against two processes sharing one Redis, then an abuse run.

Usage:
  load.py streams SECONDS CONCURRENCY URL [URL ...]   chat streams spread over the URLs
  load.py abuse URL [--no-browser]                     1,000 cookie-less requests, then a browser

Prints one JSON object. Only the standard library is used (asyncio streams), so the client
costs little and the numbers do not depend on a client package.
"""
import asyncio
import json
import os
import statistics
import sys
import time
import urllib.parse


async def chat_once(base, agent, message, cookie=None, local_addr=None):
    """One chat turn over a fresh connection: (time to first delta, ok, status)."""
    u = urllib.parse.urlparse(base)
    reader, writer = await asyncio.open_connection(u.hostname, u.port, local_addr=local_addr)
    body = json.dumps({"message": message}).encode()
    headers = [
        f"POST /api/chat/{agent} HTTP/1.1",
        f"Host: {u.hostname}:{u.port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if cookie:
        headers.append(f"Cookie: {cookie}")
    started = time.perf_counter()
    writer.write(("\r\n".join(headers) + "\r\n\r\n").encode() + body)
    await writer.drain()
    status_line = await reader.readline()
    status = int(status_line.split()[1]) if status_line else 0
    first = None
    ok = False
    buffer = b""
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            break
        buffer += chunk
        if first is None and b"event: delta" in buffer:
            first = time.perf_counter() - started
        if b"event: done" in buffer:
            ok = True
        if b"event: error" in buffer:
            break
        # Keep only the tail: the markers span at most a few bytes across reads.
        buffer = buffer[-64:]
    writer.close()
    return first, ok and status == 200, status


# The agent and message of each turn (`{id}`: the worker and its turn), for the tool runs.
AGENT = os.environ.get("LOAD_AGENT", "general")
MESSAGE = os.environ.get("LOAD_MESSAGE", "load {id}")
# With LOAD_BROWSERS=1 each worker is a browser: it opens the chat page first and chats with
# the session cookie it got, so every conversation it starts is its own (in the sidebar's
# index), as a person's are.
BROWSERS = os.environ.get("LOAD_BROWSERS") == "1"


async def get(base, path, cookie=None, local_addr=None):
    """One GET over a fresh connection: (status, the cookies it sets as `name=value`)."""
    u = urllib.parse.urlparse(base)
    reader, writer = await asyncio.open_connection(u.hostname, u.port, local_addr=local_addr)
    lines = [f"GET {path} HTTP/1.1", f"Host: {u.hostname}", "Connection: close"]
    if cookie:
        lines.append(f"Cookie: {cookie}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    head = response.split(b"\r\n\r\n", 1)[0].decode(errors="replace")
    status = int(head.split()[1])
    cookies = [l.split(":", 1)[1].strip().split(";")[0] for l in head.split("\r\n")
               if l.lower().startswith("set-cookie:")]
    return status, cookies


async def browser_cookie(base):
    """The session cookie a browser gets with its first page."""
    _, cookies = await get(base, f"/chat?agent={AGENT}")
    return next(c for c in cookies if c.startswith("parlor_session="))


def children(pid):
    """How many processes `pid` started that are still running."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            count += 1
    return count


def process_stats(pid):
    """(RSS peak in KiB, open file descriptors) of a local process."""
    peak = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1])
    return peak, len(os.listdir(f"/proc/{pid}/fd"))


async def streams(seconds, concurrency, urls, pids):
    baseline = {pid: process_stats(pid)[1] for pid in pids}
    children_before = {pid: children(pid) for pid in pids}
    deadline = time.perf_counter() + seconds
    firsts, completed, errors, statuses = [], 0, 0, {}

    async def worker(i):
        nonlocal completed, errors
        base = urls[i % len(urls)]
        n = 0
        cookie = None
        while time.perf_counter() < deadline:
            n += 1
            try:
                if BROWSERS and cookie is None:
                    cookie = await browser_cookie(base)
                message = MESSAGE.replace("{id}", f"{i}-{n}")
                first, ok, status = await chat_once(base, AGENT, message, cookie=cookie)
            except OSError as e:
                errors += 1
                statuses[str(e)] = statuses.get(str(e), 0) + 1
                continue
            statuses[status] = statuses.get(status, 0) + 1
            if ok:
                completed += 1
                firsts.append(first)
            else:
                errors += 1

    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    await asyncio.sleep(2)  # replies stored, connections closed
    after = {pid: process_stats(pid) for pid in pids}
    # Connections to an upstream stay pooled while idle (reqwest's 90 s): with SETTLE_SECONDS,
    # wait (up to that) until every process is back to its descriptors before the run.
    settled = 2
    while settled < int(os.environ.get("SETTLE_SECONDS", "0")):
        if all(process_stats(pid)[1] <= baseline[pid] for pid in pids):
            break
        await asyncio.sleep(1)
        settled += 1
    firsts.sort()
    return {
        "seconds": seconds,
        "concurrency": concurrency,
        "browsers": BROWSERS,
        "processes": len(pids),
        "completed": completed,
        "errors": errors,
        "statuses": {str(k): v for k, v in statuses.items()},
        "first_delta_ms_p50": round(statistics.median(firsts) * 1000, 1) if firsts else None,
        "first_delta_ms_p99": round(firsts[int(len(firsts) * 0.99) - 1] * 1000, 1) if firsts else None,
        "rss_peak_mib": {pid: round(s[0] / 1024, 1) for pid, s in after.items()},
        "fds_before": baseline,
        "fds_after": {pid: s[1] for pid, s in after.items()},
        "fds_settled": {pid: process_stats(pid)[1] for pid in pids},
        "settled_after_s": settled,
        "children_before": children_before,
        "children_after": {pid: children(pid) for pid in pids},
    }


async def abuse(url, browser_too=True):
    """1,000 requests without cookies from 127.0.0.1 (page visits and new API conversations),
    then (unless a real browser follows) a browser from 127.0.0.2 that comes back with its
    cookie and chats."""
    statuses = {}
    for i in range(1000):
        if i % 2 == 0:
            status, _ = await get(url, "/" if i % 4 == 0 else "/chat?agent=general")
        else:
            _, _, status = await chat_once(url, "general", f"script {i}")
        statuses[status] = statuses.get(status, 0) + 1
    if not browser_too:
        return {"abusive_requests": 1000, "abusive_statuses": {str(k): v for k, v in statuses.items()}}
    browser = ("127.0.0.2", 0)
    first, cookies = await get(url, "/chat?agent=general", local_addr=browser)
    cookie = next(c for c in cookies if c.startswith("parlor_session="))
    back, _ = await get(url, "/chat?agent=general", cookie=cookie, local_addr=browser)
    _, ok, chat_status = await chat_once(url, "general", "a real user", cookie=cookie, local_addr=browser)
    return {
        "abusive_requests": 1000,
        "abusive_statuses": {str(k): v for k, v in statuses.items()},
        "browser_first_visit": first,
        "browser_return_visit": back,
        "browser_chat_status": chat_status,
        "browser_chat_completed": ok,
    }


def main():
    mode = sys.argv[1]
    if mode == "streams":
        seconds, concurrency = int(sys.argv[2]), int(sys.argv[3])
        urls = sys.argv[4:]
        pids = [int(p) for p in os.environ.get("PARLOR_PIDS", "").split(",") if p]
        result = asyncio.run(streams(seconds, concurrency, urls, pids))
    elif mode == "abuse":
        result = asyncio.run(abuse(sys.argv[2], "--no-browser" not in sys.argv[3:]))
    else:
        sys.exit(__doc__)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
