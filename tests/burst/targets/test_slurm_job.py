"""What runs inside a Slurm allocation, without Slurm: how it starts its Ray head.

Ray's `ray start` is stood in for by a process that fails as Ray does when its raylet misses the
fixed 30 s to register (``ray/_private/node.py``: an exception, exit 1), or that answers the Jobs
API on the dashboard port it was given, as a started head does."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

from burst.runtime import ray_head
from burst.targets import slurm_job

TIMED_OUT = [sys.executable, "-c", "import sys; sys.exit('Exception: The current node timed out during startup.')"]
ANSWERING = """
import http.server, sys
class Jobs(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"[]" if self.path == "/api/jobs/" else b"{}"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Jobs).serve_forever()
"""


@pytest.fixture
def starts(monkeypatch):
    """Every `ray start --head` asked for, as its ports; ``outcomes``: how each ends, in order; the
    clean-ups after a start that ended."""
    asked, stopped, outcomes = [], [], []

    def head_command(ports, cpus, gpus, temp_dir, node_ip="127.0.0.1", block=False):
        assert block  # the allocation's script waits on the head
        asked.append(ports)
        return TIMED_OUT if outcomes.pop(0) == "times out" else [sys.executable, "-c", ANSWERING, str(ports["dashboard"])]

    monkeypatch.setattr(ray_head, "head_command", head_command)
    monkeypatch.setattr(ray_head, "stop_processes", lambda cluster_id, temp_dir=None, **kw: stopped.append((cluster_id, temp_dir)) or [])
    return asked, stopped, outcomes


def test_a_head_start_that_times_out_is_cleaned_up_and_tried_once_more_on_new_ports(tmp_path, starts):
    asked, stopped, outcomes = starts
    outcomes += ["times out", "answers"]
    token = tmp_path / "auth_token"
    token.write_text("t")
    head, ports, env = slurm_job.start_head("cid", token, tmp_path / "ray", 2, 0, "127.0.0.1", multi=False)
    try:
        assert head.poll() is None  # the second head, answering
        assert len(asked) == 2 and asked[1] == ports and asked[0]["dashboard"] != ports["dashboard"]
        assert env["RAY_ADDRESS"] == f"127.0.0.1:{ports['GCS server']}"  # the environment of the head that answered
        assert stopped == [("cid", str(tmp_path / "ray"))]  # what the first start left, stopped before the second
    finally:
        head.kill()
        head.wait()


def test_an_allocation_removes_what_cancelled_ones_left_and_without_a_head_ends_without_telling_burst_up_one(tmp_path, starts, monkeypatch):
    asked, stopped, outcomes = starts
    outcomes += ["times out", "times out"]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-tmp"))  # the node's TMPDIR
    root = tmp_path / "node-tmp" / f"burst-{os.getuid()}"
    root.mkdir(mode=0o700, parents=True)
    left = root / "checkpoints" / "cancelled-run"  # its driver SIGKILLed with its allocation
    left.mkdir(mode=0o700, parents=True)
    monkeypatch.setattr(ray_head, "runtime_root", lambda: tmp_path / "ray")
    (tmp_path / "ray" / "0123456789ab" / "session_latest").mkdir(parents=True)  # the cancelled allocation's Ray directory ...
    (tmp_path / "ray" / "0123456789ab.allocation").touch()  # ... and its lock, which no process holds any more
    (tmp_path / "ray" / "ba9876543210").mkdir()  # a local cluster's: not an allocation's
    (tmp_path / "cl").mkdir()
    (tmp_path / "cl" / "auth_token").write_text("t")
    assert slurm_job.main(tmp_path / "cl", "cid") == 1
    assert len(asked) == 2 and len(stopped) == 2
    assert not (tmp_path / "cl" / "head.json").exists()  # `burst up` sees the job end and reports its log's last line
    assert not (tmp_path / "ray" / "cid").exists()
    assert not left.exists()
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == ["ba9876543210"]  # and nothing of its own
