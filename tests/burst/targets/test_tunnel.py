"""The tunnel burst holds to a head (``burst.targets.tunnel``), with a real process in place of
``kubectl port-forward``: a small HTTP server on the tunnel's port that logs as port-forward does."""

import sys
import urllib.request

import pytest

from burst.errors import BurstError
from burst.targets.tunnel import tunnel

# Answers every request, and first writes 100 KiB to stderr, as a port-forward writes a line for
# each connection it could not forward ("E1126 ... error copying from local connection ...").
CHATTY = r"""
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        sys.stderr.write(("E1126 portforward.go:413] error copying from local connection to remote stream\n" * 1300))
        sys.stderr.flush()
        self.send_response(200); self.end_headers(); self.wfile.write(b'{"version": "fake"}')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_a_port_forward_that_logs_a_lot_never_blocks_on_its_stderr():
    """Before, stderr was a pipe nobody read: once 64 KiB piled up the port-forward blocked and the
    head stopped answering through it. Here 20 requests make 2 MiB of log lines and all are answered."""
    with tunnel(lambda port: [sys.executable, "-c", CHATTY, str(port)], "chatty", "hint") as url:
        for _ in range(20):
            with urllib.request.urlopen(url + "/api/version", timeout=10) as response:
                assert response.status == 200


def test_a_tunnel_that_closes_says_its_last_line():
    command = [sys.executable, "-c", "import sys; sys.stderr.write('a line of noise\\nerror: services \"raycluster-head-svc\" not found\\n'); sys.exit(1)"]
    with pytest.raises(BurstError, match=r"the tunnel to cluster 'gone' closed: error: services \"raycluster-head-svc\" not found"):
        with tunnel(lambda port: command, "gone", "hint"):
            pass
