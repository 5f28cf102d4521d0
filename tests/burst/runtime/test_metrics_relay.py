"""The metrics relay on a cluster's head (``burst.runtime.metrics_relay``): a forward proxy for its
nodes' metrics pages and nothing else. Run here against a real HTTP server standing for a node's
metrics agent; the end-to-end scrape through a port-forward is in test_kubernetes.py."""

import urllib.error
import urllib.request

import pytest

from burst.runtime import metrics_relay
from tests.support.http_stub import Answering, serve


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


def test_a_prometheus_or_tunnel_that_exits_at_once_is_one_line_with_its_last_words(tmp_path, monkeypatch):
    """What `burst monitor` starts here (Prometheus, the tunnel to the relay) and that dies before it
    answers: killed, and said in one line with the last line it logged; nothing left running."""
    from burst import monitor
    from burst.errors import BurstError
    from burst.home.state import ClusterHandle

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "prometheus").write_text("#!/bin/sh\necho 'err=\"opening storage failed: lock DB directory: resource temporarily unavailable\"'\nexit 1\n")
    (bin_dir / "prometheus").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    discovery = tmp_path / "nodes.json"
    discovery.write_text('[{"labels": {"job": "ray"}, "targets": ["127.0.0.1:9"]}]')
    handle = ClusterHandle(name="c", provider="local", cluster_id="x", state="running", storage_uri=str(tmp_path))
    with pytest.raises(BurstError) as err:
        monitor.start(handle, discovery)
    assert "Prometheus did not start for cluster 'c': err=\"opening storage failed: lock DB directory" in str(err.value)
    assert monitor.running("c") is None
