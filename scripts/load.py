#!/usr/bin/env python3
"""The abuse run of Parlor's load runs (see docs/performance.md): 1,000 cookie-less
requests from one address, then a browser from another that must get in.

Usage:
  load.py abuse URL [--no-browser]

Prints one JSON object; only the standard library is used. The streams of the load runs are
driven by `load-streams` (testing/fake-llm), which costs the shared CPU far less.
"""
import asyncio
import json
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
    mode = sys.argv[1] if len(sys.argv) > 2 else None
    if mode == "abuse":
        result = asyncio.run(abuse(sys.argv[2], "--no-browser" not in sys.argv[3:]))
    else:
        sys.exit(__doc__)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
