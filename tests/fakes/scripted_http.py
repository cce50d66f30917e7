"""A real local HTTP/1.1 server that answers from a script: `handler(path, body) -> Reply`.

It stands in for an engine's OpenAI-compatible endpoint in the client's tests: real sockets and
real HTTP, with every byte of each reply decided by the test (SSE bodies included).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple


class Reply(NamedTuple):
    status: int = 200
    content: bytes = b""
    content_type: str = "text/event-stream"


Handler = Callable[[str, dict[str, Any]], Reply]


@contextmanager
def scripted_server(handler: Handler) -> Iterator[str]:
    """Serves `handler` on 127.0.0.1 for the block; yields the base URL."""

    class Answer(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            reply = handler(self.path, body)
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.content)))
            self.end_headers()
            self.wfile.write(reply.content)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
