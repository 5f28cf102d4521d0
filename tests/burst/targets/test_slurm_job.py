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
    yield asked, stopped, outcomes
    import psutil

    for child in psutil.Process().children(recursive=True):  # a stand-in head a failed test left answering
        try:
            if "http.server" in " ".join(child.cmdline()):
                child.kill()
        except psutil.Error:
            pass


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


# The other nodes' task, in a process of its own as `srun` starts it: `ray start` stood in for by a
# process that records how it was asked and waits, as a joined worker does.
WORKER_NODE = """
import sys, tempfile
from pathlib import Path
from burst.runtime import ray_head
from burst.targets import slurm_job
tmp = Path(sys.argv[1])
tempfile.tempdir = str(tmp / "node-tmp")
ray_head.runtime_root = lambda: tmp / "ray"
ray_head.ray_command = lambda: [sys.executable, "-c", sys.argv[4]]
sys.exit(slurm_job.worker_node(sys.argv[2], sys.argv[3]))
"""
JOINED = "import json, os, sys, time; open(os.environ['RAY_START_LOG'], 'w').write(json.dumps([os.getpid(), sys.argv[1:]])); time.sleep(600)"


def _worker_node(tmp_path, cluster_id):
    """A worker node's task, started, with its `ray start` running; returns (the task, the `ray start` pid)."""
    import json
    import subprocess
    import time

    log = tmp_path / f"{cluster_id}.ray-start"
    env = {**os.environ, ray_head.MARKER: cluster_id, "RAY_START_LOG": str(log)}  # the head's environment, which srun passes on
    task = subprocess.Popen([sys.executable, "-c", WORKER_NODE, str(tmp_path), cluster_id, "10.0.0.1:6379", JOINED], env=env)
    deadline = time.time() + 60
    while not (log.exists() and log.read_text()) and task.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert task.poll() is None, "the worker node's task ended before its `ray start` did anything"
    pid, args = json.loads(log.read_text())
    assert args == ["start", "--address=10.0.0.1:6379", "--block", f"--temp-dir={tmp_path / 'ray' / cluster_id}", "--disable-usage-stats"]
    assert (tmp_path / "ray" / f"{cluster_id}.allocation").exists()  # held: no other allocation's sweep removes its directory
    return task, pid


def test_a_worker_node_cleans_up_on_the_cancel_s_sigterm_and_after_a_sigkill_the_next_allocation_there_does(tmp_path, monkeypatch):
    import signal
    import subprocess

    import psutil

    from burst.runtime import scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-tmp"))
    monkeypatch.setattr(ray_head, "runtime_root", lambda: tmp_path / "ray")
    # scancel (or the walltime): SIGTERM to the step's tasks. The worker is stopped, its Ray directory and
    # lock removed, and the scratch of the runs it served (their processes stopped with it) too.
    # A process of the head's carries the same marker: where the head shares the machine (as here, or
    # a site that packs nodes), the worker's clean-up must stop its own Ray only.
    head = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env={**os.environ, ray_head.MARKER: "aaaaaaaaaaaa"})
    try:
        task, ray_pid = _worker_node(tmp_path, "aaaaaaaaaaaa")
        served = scratch.root() / "checkpoints" / "run-on-both-nodes"
        served.mkdir(parents=True)
        task.send_signal(signal.SIGTERM)
        assert task.wait(timeout=60) == 128 + signal.SIGTERM
        assert not psutil.pid_exists(ray_pid) or psutil.Process(ray_pid).status() == psutil.STATUS_ZOMBIE
        assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == [] and not served.exists()
        assert head.poll() is None
    finally:
        head.kill()
        head.wait()
    # KillWait passed: SIGKILL to every process of the step, before any clean-up. What it left is
    # removed by the next allocation that starts on this node (its head or one of its workers).
    task, ray_pid = _worker_node(tmp_path, "bbbbbbbbbbbb")
    task.kill()
    os.kill(ray_pid, signal.SIGKILL)  # slurmstepd kills the whole step
    task.wait(timeout=30)
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == ["bbbbbbbbbbbb", "bbbbbbbbbbbb.allocation"]
    assert slurm_job.sweep_allocations() == ["bbbbbbbbbbbb"]
    assert list((tmp_path / "ray").iterdir()) == []


def test_a_worker_node_whose_ray_ends_removes_its_directory_and_says_how_ray_ended(tmp_path):
    import subprocess

    gone = "import sys; sys.exit(3)"  # `ray start --block` ends when its raylet does (the head lost, say)
    task = subprocess.run([sys.executable, "-c", WORKER_NODE, str(tmp_path), "cccccccccccc", "10.0.0.1:6379", gone], timeout=60)
    assert task.returncode == 3
    assert list((tmp_path / "ray").iterdir()) == []


# `srun` as a step of one more node: records its options and runs the task (here, in this very
# process) with that node's own runtime directory, `ray start` stood in for as above.
SRUN = """#!{python}
import json, os, runpy, sys
args = sys.argv[1:]
first = next(i for i, a in enumerate(args) if not a.startswith("--"))
options, command = args[:first], args[first:]
open(os.environ["SRUN_LOG"], "w").write(json.dumps({{"options": options, "command": command, "pid": os.getpid()}}))
os.environ["XDG_RUNTIME_DIR"] = os.environ["OTHER_NODE_RUNTIME"]
assert command[:3] == [sys.executable, "-m", "burst.targets.slurm_job"], command
from burst.runtime import ray_head
ray_head.ray_command = lambda: [sys.executable, "-c", {joined!r}]
sys.argv = ["slurm_job", *command[3:]]
runpy.run_module("burst.targets.slurm_job", run_name="__main__")
"""


def test_a_two_node_allocation_starts_the_other_node_s_task_with_srun_once_the_head_answers(tmp_path, starts, monkeypatch):
    import json
    import signal
    import socket
    import threading
    import time

    import psutil

    asked, stopped, outcomes = starts
    outcomes += ["answers"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN.format(python=sys.executable, joined=JOINED))
    (bin_dir / "srun").chmod(0o755)
    other = tmp_path / "other-node"
    other.mkdir(mode=0o700)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    for name, value in (("SLURM_JOB_NUM_NODES", "2"), ("SRUN_LOG", str(tmp_path / "srun.json")), ("OTHER_NODE_RUNTIME", str(other)),
                        ("RAY_START_LOG", str(tmp_path / "ray-start.json"))):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # main's handlers are for the batch script, not for pytest
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-tmp"))
    monkeypatch.setattr(ray_head, "runtime_root", lambda: tmp_path / "ray")
    (tmp_path / "ray").mkdir(mode=0o700)
    (tmp_path / "cl").mkdir()
    (tmp_path / "cl" / "auth_token").write_text("t")
    ended = []
    allocation = threading.Thread(target=lambda: ended.append(slurm_job.main(tmp_path / "cl", "cid")), daemon=True)
    allocation.start()
    log = tmp_path / "ray-start.json"
    deadline = time.time() + 60

    def task_ended() -> bool:
        task = tmp_path / "srun.json"
        if not (task.exists() and task.read_text()):
            return False
        try:
            return psutil.Process(json.loads(task.read_text())["pid"]).status() == psutil.STATUS_ZOMBIE  # srun's parent reaps it later
        except psutil.NoSuchProcess:
            return True

    while not (log.exists() and log.read_text()) and allocation.is_alive() and not task_ended() and time.time() < deadline:
        time.sleep(0.05)
    assert allocation.is_alive(), ended
    srun = json.loads((tmp_path / "srun.json").read_text())
    assert log.exists(), f"the other node's task ended without starting Ray: {srun}"
    host = socket.gethostname()
    head = json.loads((tmp_path / "cl" / "head.json").read_text())
    gcs = f"{socket.gethostbyname(host)}:{asked[0]['GCS server']}"
    assert head["nodes"] == 2 and head["gcs_port"] == asked[0]["GCS server"]
    assert srun["options"] == ["--nodes=1", "--ntasks-per-node=1", f"--exclude={host}", "--kill-on-bad-exit=1"]
    assert srun["command"] == [sys.executable, "-m", "burst.targets.slurm_job", "--worker", "cid", gcs]
    ray_pid, ray_args = json.loads(log.read_text())
    try:
        assert ray_args == ["start", f"--address={gcs}", "--block", f"--temp-dir={other / 'burst' / 'cid'}", "--disable-usage-stats"]
        assert (other / "burst" / "cid.allocation").exists()  # the other node's task holds its lock there
        # the head ends: the allocation stops what it started and returns the head's code
        (answering,) = [p for p in psutil.Process().children() if "http.server" in " ".join(p.cmdline())]
        answering.kill()
        allocation.join(timeout=60)
        assert ended == [-signal.SIGKILL] and not allocation.is_alive()
    finally:
        os.kill(ray_pid, signal.SIGKILL)  # what slurmstepd does to what is left of the step at the job's end
