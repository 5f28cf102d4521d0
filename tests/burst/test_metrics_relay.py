"""The metrics relay on a cluster's head (``burst.runtime.metrics_relay``): a forward proxy for its
nodes' metrics pages and nothing else. Run here against a real HTTP server standing for a node's
metrics agent; the end-to-end scrape through a port-forward is in test_kubernetes.py."""

import urllib.error
import urllib.request

import pytest

from burst.runtime import metrics_relay
from tests.http_stub import Answering, serve


class _Node(Answering):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = b'# TYPE ray_node_cpu_utilization gauge\nray_node_cpu_utilization{instance="n"} 42.0\n'
        self.reply(200 if self.path == "/metrics" else 404, body, "text/plain; version=0.0.4")


@pytest.fixture
def relay():
    node = serve(_Node)
    endpoint = f"127.0.0.1:{node.server_address[1]}"
    reads = []

    def table():
        reads.append(1)
        return {endpoint}

    server = metrics_relay.serve(metrics_relay.NodeTable(table), port=0)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{server.server_address[1]}"}))
    yield opener, endpoint, reads, server
    server.shutdown()
    node.shutdown()


def test_the_relay_serves_a_node_s_metrics_page_and_refuses_everything_else(relay):
    opener, endpoint, reads, server = relay
    with opener.open(f"http://{endpoint}/metrics", timeout=10) as page:  # absolute-form, as Prometheus sends through proxy_url
        assert b"ray_node_cpu_utilization" in page.read() and page.headers["Content-Type"].startswith("text/plain")
    for refused in (f"http://{endpoint}/", f"http://{endpoint}/api/jobs/", "http://127.0.0.1:9/metrics", "http://10.0.0.1:8080/metrics"):
        with pytest.raises(urllib.error.HTTPError) as err:
            opener.open(refused, timeout=10)
        assert err.value.code == 403, refused
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/healthz", timeout=10) as ok:
        assert ok.read() == b"ok\n"
    assert server.server_address[0] == "127.0.0.1"  # the head's loopback: reached through the tunnel only
    assert len(reads) <= 2  # the node table is not asked again for every refused address


def test_a_node_that_does_not_answer_is_a_bad_gateway_not_a_hang(relay):
    opener, endpoint, _, _ = relay
    import socket

    with socket.socket() as s:  # a port nothing listens on, made a node of the table
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    server = metrics_relay.serve(lambda e: e == dead, port=0)
    try:
        via = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{server.server_address[1]}"}))
        with pytest.raises(urllib.error.HTTPError) as err:
            via.open(f"http://{dead}/metrics", timeout=20)
        assert err.value.code == 502
    finally:
        server.shutdown()
