"""A cluster's Prometheus and the tunnel it scrapes through end with it, and nothing else does
(issue 64, finding 14): `burst monitor --stop` did nothing once Prometheus had died (its tunnel ran
on), took any process with the tunnel's recorded pid for the tunnel, and a watcher's idle stop left
both running. A real Prometheus (Debian's) here; the tunnel is a real process burst records as it
records `kubectl port-forward`'s (its pid and start time)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.support.slurm_site import needs


def _prometheus_missing():
    import shutil

    return None if shutil.which("prometheus") else "these tests need Debian's prometheus (apt-get install prometheus)"


pytestmark = needs(_prometheus_missing())


def _cluster(tmp_path: Path, name: str = "g"):
    from burst.home import state
    from burst.home.state import ClusterHandle

    handle = ClusterHandle(name=name, provider="gcp", cluster_id=f"{name}lease0001", state="running", storage_uri=str(tmp_path / "store"),
                           idle_minutes=0.01, created=time.time() - 3600)
    with state.locked():
        state.save(handle)
    return handle


def _monitored(handle, tmp_path: Path):
    """A real Prometheus for the cluster, and a tunnel process recorded beside it as burst records one."""
    from burst import monitor

    discovery = tmp_path / "nodes.json"
    discovery.write_text("[]")
    mon = monitor.start(handle, discovery)
    tunnel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    record = Path(mon.directory) / "monitor.json"
    data = json.loads(record.read_text())
    data.update(forward_pid=tunnel.pid, forward_started=psutil.Process(tunnel.pid).create_time())
    record.write_text(json.dumps(data))
    return mon, tunnel


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_stop_ends_the_tunnel_of_a_prometheus_that_died_and_leaves_a_reused_pid_alone(home, tmp_path):
    from burst import api, monitor

    handle = _cluster(tmp_path)
    mon, tunnel = _monitored(handle, tmp_path)
    try:
        psutil.Process(mon.pid).send_signal(signal.SIGKILL)  # Prometheus died (out of memory, a reboot of its own)
        psutil.Process(mon.pid).wait(timeout=10)
        api.monitor("g", stop=True)
        tunnel.wait(timeout=20)  # before, the tunnel ran on for good
        assert not (Path(mon.directory) / "monitor.json").exists()

        # a record whose tunnel pid now belongs to someone else's process (the tunnel ended long ago)
        mon, tunnel2 = _monitored(handle, tmp_path)
        tunnel2.kill()
        tunnel2.wait()
        time.sleep(0.2)  # start times are kept to the clock tick: another process started later has another
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        record = Path(mon.directory) / "monitor.json"
        data = json.loads(record.read_text())
        data["forward_pid"] = other.pid  # the same pid, another process: its start time differs from the one recorded
        record.write_text(json.dumps(data))
        assert monitor.stop("g") is True
        assert _gone(mon.pid) and other.poll() is None  # Prometheus stopped; the other process untouched
        other.kill()
        other.wait()
    finally:
        for p in (tunnel,):
            if p.poll() is None:
                p.kill()


def test_a_watcher_s_idle_stop_ends_the_cluster_s_monitor(home, tmp_path, monkeypatch):
    """A GKE cluster with `--idle-minutes` and `burst monitor` running: its watcher takes it down
    after its idle time (its `down` is Pulumi's destroy, the target here), and its Prometheus and
    tunnel end with it."""
    from burst import targets
    from burst.home import state
    from burst.home.state import ClusterHandle
    from burst.unattended import watcher

    handle = _cluster(tmp_path)
    mon, tunnel = _monitored(handle, tmp_path)

    class _Gke:
        def down(self, handle, report=None):
            state.release(handle)

    monkeypatch.setattr(targets, "get", lambda provider: _Gke())
    monkeypatch.setattr(watcher, "job_activity", lambda handle: (False, time.time() - 3600))  # the head answers: no job for an hour
    monkeypatch.setattr(watcher, "WATCH_POLL_S", 0.05)
    try:
        assert watcher.watch("g") == 0
        assert state.load(ClusterHandle, "g") is None
        tunnel.wait(timeout=20)
        assert _gone(mon.pid)
        assert "taken down by its watcher: no job for" in (home / "managed" / "cluster-g.log").read_text()
    finally:
        if tunnel.poll() is None:
            tunnel.kill()
        if not _gone(mon.pid):
            psutil.Process(mon.pid).kill()
