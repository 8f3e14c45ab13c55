#!/usr/bin/env python3
"""A scripted MCP tool server that misbehaves on purpose, for Parlor's tests.

Standard library only. Over stdio by default (other arguments are ignored: tests pass one
to tell their processes apart); `--http PORT` serves streamable HTTP at `/mcp` instead. Every message it receives is appended, one JSON line each, to the file named
by HOSTILE_LOG (when set), so a test can see what Parlor sent (cancellations included).

Tools (what `tools/call` does):
  echo {text}            answers the text
  huge {mb}              answers one message of `mb` megabytes of words (one stdio line, one
                         HTTP body)
  endless {json}         starts an answer that never ends (a line with no newline; over HTTP,
                         one SSE event that never ends, or with `json` a JSON body)
  items {count}          answers `count` empty text items
  items_sse {count}      the same, over HTTP as one event of an event stream
  hang                   never answers (and goes on reading its input)
  busy                   works for ten minutes without reading its input (a server busy in
                         a call does not notice its input closing)
  grow                   adds a tool `extra` and says the list changed
  env {name}             answers the environment variable `name` of its process (or
                         `(unset)`) and the process id
  header {name}          over HTTP: answers the request header `name` the call came with

HOSTILE_TOOLS changes the list: `bad` adds tools whose schemas providers refuse and 200
more tools; `clash` adds two tools the model would see under one name; `pages` lists one
tool a page and always names a next page.
"""

import json
import os
import sys
import threading
import time

LOG = os.environ.get("HOSTILE_LOG")
LOCK = threading.Lock()
EXTRA = []
# The headers of the HTTP request being answered.
HEADERS = {}


def log(message):
    if LOG:
        with LOCK, open(LOG, "a") as f:
            f.write(json.dumps(message) + "\n")


def tool(name, properties=None):
    return {
        "name": name,
        "description": f"{name} (hostile)",
        "inputSchema": {"type": "object", "properties": properties or {}},
    }


def tools():
    listed = [
        tool("echo", {"text": {"type": "string"}}),
        tool("huge", {"mb": {"type": "number"}}),
        tool("endless"),
        tool("items", {"count": {"type": "integer"}}),
        tool("items_sse", {"count": {"type": "integer"}}),
        tool("hang"),
        tool("busy"),
        tool("grow"),
        tool("env", {"name": {"type": "string"}}),
        tool("header", {"name": {"type": "string"}}),
    ] + EXTRA
    kind = os.environ.get("HOSTILE_TOOLS", "")
    if kind == "bad":
        listed.append(tool("no_items", {"urls": {"type": "array"}}))
        listed.append({"name": "not_object", "inputSchema": {"type": "string"}})
        listed += [tool(f"many_{i}") for i in range(200)]
    if kind == "clash":
        listed += [tool("read.file"), tool("read_file")]
    return listed


def result(id, value):
    return {"jsonrpc": "2.0", "id": id, "result": value}


def text(value):
    return {"content": [{"type": "text", "text": value}]}


def answer(message):
    """The reply to one request (None: no reply), and what to stream instead if anything."""
    method = message.get("method")
    id = message.get("id")
    if method == "initialize":
        return result(id, {
            "protocolVersion": message["params"].get("protocolVersion", "2025-03-26"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "hostile", "version": "1"},
        })
    if method == "tools/list":
        if os.environ.get("HOSTILE_TOOLS") == "pages":
            page = int((message.get("params") or {}).get("cursor") or 0)
            return result(id, {"tools": [tool(f"page_{page}")], "nextCursor": str(page + 1)})
        return result(id, {"tools": tools()})
    if method == "ping":
        return result(id, {})
    if method == "tools/call":
        name = message["params"]["name"]
        args = message["params"].get("arguments") or {}
        if name == "echo":
            return result(id, text(args.get("text", "")))
        if name == "huge":
            size = int(float(args.get("mb", 40)) * 1024 * 1024)
            return result(id, text(("lorem " * (size // 6 + 1))[:size]))
        if name in ("items", "items_sse"):
            items = [{"type": "text", "text": ""}] * int(args.get("count", 1000))
            reply = result(id, {"content": items})
            return ("sse", reply) if name == "items_sse" else reply
        if name == "endless" and args.get("json"):
            return "endless_json"
        if name in ("endless", "hang", "busy"):
            return name
        if name == "env":
            value = os.environ.get(args.get("name", ""), "(unset)")
            return result(id, text(f"{value} pid={os.getpid()}"))
        if name == "header":
            return result(id, text(HEADERS.get(args.get("name", "").lower(), "(none)")))
        if name == "grow":
            if not EXTRA:
                EXTRA.append(tool("extra"))
            return "grow", result(id, text("grown"))
        return {"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "no such tool"}}
    if id is not None:
        return {"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no method"}}
    return None


CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def stdio():
    out = sys.stdout.buffer

    def send(message):
        try:
            out.write(json.dumps(message).encode() + b"\n")
            out.flush()
        except BrokenPipeError:
            sys.exit(0)  # Parlor closed the connection (an answer too large)

    for line in sys.stdin.buffer:
        message = json.loads(line)
        log(message)
        reply = answer(message)
        if reply in ("endless", "endless_json"):
            try:
                while True:
                    out.write(b"x" * 65536)
                    out.flush()
            except BrokenPipeError:
                return
        elif reply == "hang":
            continue
        elif reply == "busy":
            time.sleep(600)
        elif isinstance(reply, tuple) and reply[0] == "sse":
            send(reply[1])
        elif isinstance(reply, tuple):
            send(reply[1])
            send(CHANGED)
        elif reply is not None:
            send(reply)


def http(port):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_DELETE(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            message = json.loads(self.rfile.read(length))
            log(message)
            HEADERS.clear()
            HEADERS.update({k.lower(): v for k, v in self.headers.items()})
            reply = answer(message)
            if reply is None:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if reply == "hang":
                time.sleep(3600)
                return
            if reply == "endless_json":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                start = {"jsonrpc": "2.0", "id": message.get("id")}
                head = json.dumps(start)[:-1] + ', "result": {"content": [{"type": "text", "text": "'
                try:
                    self.wfile.write(head.encode())
                    while True:
                        self.wfile.write(b"x" * 65536)
                except (BrokenPipeError, ConnectionResetError):
                    return
            if reply == "endless":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    self.wfile.write(b"event: message\ndata: ")
                    while True:
                        self.wfile.write(b"x" * 65536)
                except (BrokenPipeError, ConnectionResetError):
                    return
            if isinstance(reply, tuple) and reply[0] == "sse":
                data = json.dumps(reply[1]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    self.wfile.write(b"event: message\ndata: " + data + b"\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                return
            if isinstance(reply, tuple):
                reply = reply[1]
            body = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Mcp-Session-Id", "hostile-session")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        http(int(sys.argv[2]))
    else:
        stdio()
