"""A local HTTP server standing for a remote API in tests: a handler base that answers with a body,
and a server started on a free loopback port in a thread."""

from __future__ import annotations

import http.server
import threading


class Answering(http.server.BaseHTTPRequestHandler):
    """Subclasses implement ``do_GET`` and answer with ``reply``; nothing is logged."""

    def reply(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def serve(handler: type) -> http.server.ThreadingHTTPServer:
    """``handler`` serving on 127.0.0.1 (a free port) in a daemon thread; ``shutdown()`` stops it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
