"""What keeps clusters in check while no CLI runs: watchers started again by `burst status` like
controllers, `burst status` answering with one cluster that does not, a watcher that decides
idleness only on a fresh answer and outlives any error of a target's `down`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]


def burst(*args, home: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, **(env or {}), "BURST_HOME": str(home)})


def wait_until(check, timeout: float, what: str):
    deadline = time.time() + timeout
    while not (got := check()):
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return got


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("BURST_HOME", str(path))
    return path


def _save(handle) -> None:
    from burst import state

    with state.locked():
        state.save(handle)


def test_status_answers_with_a_login_host_that_hangs_and_revives_a_dead_watcher_first(home, tmp_path):
    """One Slurm site whose login host takes the ssh and never answers (the stand-in sleeps), and a
    cluster with an idle stop whose watcher was killed (a reboot): `burst status` starts the watcher
    again before it asks any cluster, shows the site's cluster as unreachable once its wait is over,
    and returns; the revived watcher ends by itself once its cluster is gone."""
    from burst import api
    from burst.state import ClusterHandle
    from burst.targets.site import OnPrem

    hanging = tmp_path / "bin"
    hanging.mkdir()
    (hanging / "ssh").write_text("#!/bin/sh\nexec sleep 300\n")
    (hanging / "ssh").chmod(0o755)
    site = OnPrem(name="lab", accelerator="V100", gpus=8, scheduler="slurm", login="login.example.org")
    _save(ClusterHandle(name="lab", provider="slurm", cluster_id="slurm0001", state="running", storage_uri=str(tmp_path / "s"),
                        outputs={"site": site.model_dump(mode="json"), "job_id": "7"}))
    _save(ClusterHandle(name="idle", provider="local", cluster_id="local0001", state="running", storage_uri=str(tmp_path / "l"),
                        idle_minutes=30.0, watcher_pid=2**31 - 2))  # its watcher died with the machine
    started = time.monotonic()
    proc = burst("status", "--json", home=home, env={"PATH": f"{hanging}{os.pathsep}{os.environ['PATH']}"}, timeout=90)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    rows = {c["name"]: c for c in out["clusters"]}
    assert rows["lab"]["state"] == f"unreachable (no answer in {api.STATUS_ASK_S:g} s)"
    assert took < 60  # the ssh stand-in sleeps 300 s: status went on without it
    assert out["revived_watchers"] == ["idle"]
    from burst import state

    pid = state.load(ClusterHandle, "idle").watcher_pid
    assert pid != 2**31 - 2 and psutil.pid_exists(pid) and "burst.controller" in " ".join(psutil.Process(pid).cmdline())
    again = json.loads(burst("status", "--json", home=home, env={"PATH": f"{hanging}{os.pathsep}{os.environ['PATH']}"}, timeout=90).stdout)
    assert again["revived_watchers"] == []  # alive: not started twice
    with state.locked():
        state.delete(ClusterHandle, "idle")
        state.delete(ClusterHandle, "lab")
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 30, "the watcher to end")
    for p in psutil.process_iter(["cmdline"]):  # the ssh stand-ins status left behind
        if p.info["cmdline"] and p.info["cmdline"][:2] == ["sleep", "300"]:
            p.kill()


class _Unreachable:
    """A target whose Jobs API cannot be asked (a broken tunnel), and whose `down` fails with a
    Pulumi-like error the first times."""

    provider = "local"
    provisions = False

    def __init__(self, failing_downs: int, looks: list):
        self.failing_downs, self.downs, self.looks, self.looks_at_down = failing_downs, 0, looks, []

    def down(self, handle, report=None):
        from burst import state
        from burst.state import ClusterHandle

        self.downs += 1
        self.looks_at_down.append(len(self.looks))
        if self.downs <= self.failing_downs:
            raise RuntimeError("error: update failed: googleapi: Error 503: the service is unavailable")  # not a BurstError
        with state.locked():
            state.delete(ClusterHandle, handle.name)


def test_a_watcher_never_stops_a_busy_cluster_it_cannot_ask_and_outlives_a_failing_down(home, monkeypatch):
    from burst import state, targets, watcher
    from burst.state import ClusterHandle

    created = time.time() - 3600  # idle for an hour, by its record
    _save(ClusterHandle(name="busy", provider="local", cluster_id="local0002", state="running", storage_uri="/tmp/x",
                        idle_minutes=1.0, created=created))
    looks = []
    fake = _Unreachable(failing_downs=2, looks=looks)
    monkeypatch.setattr(targets, "get", lambda provider: fake)

    def unreachable(handle):
        looks.append(time.time())
        if len(looks) >= 3:  # the tunnel is back: the cluster really has had no job for an hour
            return False, created
        raise ConnectionError("the tunnel to the head broke")

    monkeypatch.setattr(watcher, "job_activity", unreachable)
    monkeypatch.setattr(watcher, "WATCH_POLL_S", 0.05)
    monkeypatch.setattr(watcher, "DOWN_RETRY_S", (0.05,))
    assert watcher.watch("busy") == 0
    assert fake.looks_at_down[0] == 3 and fake.downs == 3  # nothing decided on the two failed looks; two failed downs retried
    assert state.load(ClusterHandle, "busy") is None
    log = (home / "managed" / "cluster-busy.log").read_text()
    assert log.count("error: taking cluster busy down failed (error: update failed: googleapi: Error 503") == 2
    assert "trying again in 0.05 s" in log
