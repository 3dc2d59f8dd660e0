"""A local OpenAI-compatible chat endpoint for the generator tests: it replies from a script.

`server.script` holds (status, reply, delay_s) entries, popped one per request (an empty
script replies 200 with empty content); every request is kept in `server.requests` (path,
JSON body, Authorization header). Binds 127.0.0.1 on a free port.
"""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "body": body,
                                     "auth": self.headers.get("Authorization")})
        status, reply, delay = self.server.script.pop(0) if self.server.script else (200, "", 0)
        time.sleep(delay)
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}
                          if status == 200 else {"error": reply}).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            pass

    def log_message(self, *args):
        pass


class ChatServer(ThreadingHTTPServer):
    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[tuple[int, str, float]] = []
        self.requests: list[dict] = []

    @property
    def auth(self) -> list:
        return [r["auth"] for r in self.requests]


@contextmanager
def serving(server):
    """An HTTP server answering on a daemon thread for the block, then shut down and closed."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def chat_server():
    with serving(ChatServer()) as server:
        yield server
