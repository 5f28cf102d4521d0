"""A relay on a cluster's head for its nodes' Ray metrics pages, so that a Prometheus on the user's
machine can scrape a cluster it reaches only through one tunnel (a port-forward to a Kubernetes
head, ssh to a TPU host or a Slurm node).

Every Ray node serves its metrics on its own address; from outside the cluster only the head is
reachable, through the tunnel burst opens to it. The relay is an HTTP forward proxy (RFC 9112
absolute-form requests, what Prometheus sends to its scrape config's ``proxy_url``) listening on
the head's loopback at ``RELAY_PORT``: it answers ``GET http://NODE:PORT/metrics`` for the live
nodes' metrics endpoints only (Ray's node table, re-read when an address is not in it) and
refuses anything else, so it opens nothing beyond what Prometheus is meant to scrape. It runs as a
detached Ray actor pinned to the head's node: started once (``burst monitor``), it lives as long
as the cluster. ``python -m burst.runtime.metrics_relay`` (a Ray job) starts it or finds it.
"""

from __future__ import annotations

import http.server
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable

RELAY_PORT = 8266  # the head's port the tunnel forwards; declared on the Kubernetes heads' containers
ACTOR_NAME = "burst-metrics-relay"
NAMESPACE = "burst"
REFRESH_S = 30.0


class RelayHandler(http.server.BaseHTTPRequestHandler):
    """GET of an allowed node's ``/metrics`` (absolute-form), ``/healthz``; 403 for anything else."""

    allowed: Callable[[str], bool]  # "host:port" -> may be relayed

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/healthz":
            self._answer(200, b"ok\n", "text/plain")
            return
        url = urllib.parse.urlsplit(self.path)
        if url.scheme != "http" or url.path != "/metrics" or not url.netloc or not type(self).allowed(url.netloc):
            self._answer(403, f"not a metrics page of this cluster's nodes: {self.path}\n".encode(), "text/plain")
            return
        try:
            with urllib.request.urlopen(f"http://{url.netloc}/metrics", timeout=10) as page:
                body, kind = page.read(), page.headers.get("Content-Type", "text/plain; version=0.0.4")
        except (urllib.error.URLError, OSError) as exc:
            self._answer(502, f"node {url.netloc} did not answer: {exc}\n".encode(), "text/plain")
            return
        self._answer(200, body, kind)

    def _answer(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def serve(allowed: Callable[[str], bool], port: int = RELAY_PORT, host: str = "127.0.0.1") -> http.server.ThreadingHTTPServer:
    """Start the relay in a thread; the caller keeps the server (``shutdown()`` stops it)."""
    handler = type("Relay", (RelayHandler,), {"allowed": staticmethod(allowed)})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-relay", daemon=True).start()
    return server


def node_endpoints() -> set[str]:
    """Every live Ray node's metrics endpoint, "address:port"."""
    import ray

    return {f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}" for n in ray.nodes() if n.get("Alive") and n.get("MetricsExportPort")}


class NodeTable:
    """The live nodes' endpoints, re-read from Ray when asked for one it does not hold (a node that
    joined), at most every few seconds (a refused address must not make every scrape ask Ray)."""

    def __init__(self, read: Callable[[], set[str]] = node_endpoints):
        self._read, self._known, self._at, self._lock = read, set(), 0.0, threading.Lock()

    def __call__(self, endpoint: str) -> bool:
        with self._lock:
            age = time.monotonic() - self._at
            if (endpoint not in self._known and age > 5.0) or age > REFRESH_S:
                self._known, self._at = self._read(), time.monotonic()
            return endpoint in self._known


def _actor_class():
    import ray

    @ray.remote(num_cpus=0)
    class MetricsRelay:
        def __init__(self, port: int):
            self.server = serve(NodeTable(), port)

        def port(self) -> int:
            return self.server.server_address[1]

    return MetricsRelay


def main() -> None:
    """Start the relay on the head (the node this job's driver runs on), or find it running."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False)
    head = ray.get_runtime_context().get_node_id()
    relay = _actor_class().options(name=ACTOR_NAME, lifetime="detached", get_if_exists=True,
                                   scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote(RELAY_PORT)
    print(f"BURST_METRICS_RELAY {ray.get(relay.port.remote(), timeout=60)}", flush=True)


if __name__ == "__main__":
    main()
