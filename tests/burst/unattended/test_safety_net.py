"""What keeps clusters in check while no CLI runs: watchers started again by `burst status` like
controllers, `burst status` answering with one cluster that does not, a watcher that decides
idleness only on a fresh answer and outlives any error of a target's `down`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.support import census
from tests.support.cli_runs import wait_until
from tests.support.records import save as _save

ROOT = Path(__file__).resolve().parents[3]


def burst(*args, home: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, **(env or {}), "BURST_HOME": str(home)})


def test_status_answers_with_a_login_host_that_hangs_and_revives_a_dead_watcher_first(home, tmp_path):
    """One Slurm site whose login host takes the ssh and never answers (the stand-in sleeps), and a
    cluster with an idle stop whose watcher was killed (a reboot): `burst status` starts the watcher
    again before it asks any cluster, shows the site's cluster as unreachable once its wait is over,
    and returns; the revived watcher ends by itself once its cluster is gone."""
    from burst import api
    from burst.home.state import ClusterHandle
    from burst.values.site import OnPrem

    before = census.snapshot()
    hanging = tmp_path / "bin"
    hanging.mkdir()
    (hanging / "ssh").write_text("#!/bin/sh\nexec sleep 300\n")
    (hanging / "ssh").chmod(0o755)
    site = OnPrem(name="lab", accelerator="V100", gpus=8, scheduler="slurm", login="login.example.org")
    _save(ClusterHandle(name="lab", provider="slurm", cluster_id="slurm0001", state="running", storage_uri=str(tmp_path / "s"),
                        outputs={"site": site.model_dump(mode="json"), "job_id": "7"}))
    # its watcher died with the machine; still starting (a running one with none of its processes left is gone: its watcher
    # would take it down at once, test_driver's keeper test)
    _save(ClusterHandle(name="idle", provider="local", cluster_id="local0001", state="starting", storage_uri=str(tmp_path / "l"),
                        idle_minutes=30.0, watcher_pid=2**31 - 2))
    started = time.monotonic()
    proc = burst("status", "--json", home=home, env={"PATH": f"{hanging}{os.pathsep}{os.environ['PATH']}"}, timeout=90)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    rows = {c["name"]: c for c in out["clusters"]}
    assert rows["lab"]["state"] == f"unreachable (no answer in {api.STATUS_ASK_S:g} s)"
    assert took < 60  # the ssh stand-in sleeps 300 s: status went on without it
    assert out["revived_watchers"] == ["idle"]
    from burst.home import state

    pid = state.load(ClusterHandle, "idle").watcher_pid
    assert pid != 2**31 - 2 and psutil.pid_exists(pid) and "burst.controller" in " ".join(psutil.Process(pid).cmdline())
    with state.locked():  # the hanging site has been shown; asked again it would only cost another wait
        state.delete(ClusterHandle, "lab")
    again = json.loads(burst("status", "--json", home=home, env={"PATH": f"{hanging}{os.pathsep}{os.environ['PATH']}"}, timeout=90).stdout)
    assert again["revived_watchers"] == []  # alive: not started twice
    with state.locked():
        state.delete(ClusterHandle, "idle")
    # its next look (every 5 s, after a question to a head that does not answer) finds the record gone;
    # 30 s was too short once in CI with both cores busy (its Python start alone takes seconds there)
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 90, "the watcher to end")
    for p in census.started_since(before, ["sleep", "300"]):  # the ssh stand-ins status left behind (this test's own)
        p.kill()


class _Unreachable:
    """A target whose Jobs API cannot be asked (a broken tunnel), and whose `down` fails with a
    Pulumi-like error the first times."""

    provider = "local"
    provisions = False

    def __init__(self, failing_downs: int, looks: list):
        self.failing_downs, self.downs, self.looks, self.looks_at_down = failing_downs, 0, looks, []

    def down(self, handle, report=None):
        from burst.home import state
        from burst.home.state import ClusterHandle

        self.downs += 1
        self.looks_at_down.append(len(self.looks))
        if self.downs <= self.failing_downs:
            raise RuntimeError("error: update failed: googleapi: Error 503: the service is unavailable")  # not a BurstError
        with state.locked():
            state.delete(ClusterHandle, handle.name)


def test_a_watcher_says_a_cluster_lost_while_it_had_work_is_not_its_keeper_s_idle_end(home, monkeypatch):
    """A cluster with an idle time whose Ray part the platform says is gone (a Slurm job cancelled,
    a pod evicted) seconds after a look found a job running: the watcher takes the rest down and
    says why in the platform's words, not "its keeper ended it (no job for its idle time)"."""
    from burst import targets
    from burst.unattended import watcher
    from burst.home.state import ClusterHandle

    _save(ClusterHandle(name="lost", provider="local", cluster_id="local0003", state="running", storage_uri="/tmp/x",
                        idle_minutes=30.0, created=time.time()))
    looks = []

    class _Gone(_Unreachable):
        def is_gone(self, handle):
            return len(looks) >= 2

        def stopped_reason(self, handle):
            return "Slurm job 7 CANCELLED"

    fake = _Gone(failing_downs=0, looks=looks)
    monkeypatch.setattr(targets, "get", lambda provider: fake)

    def activity(handle):
        looks.append(time.time())
        if len(looks) == 1:
            return True, None  # a job runs
        raise ConnectionError("the head does not answer")

    monkeypatch.setattr(watcher, "job_activity", activity)
    monkeypatch.setattr(watcher, "WATCH_POLL_S", 0.05)
    assert watcher.watch("lost") == 0 and fake.downs == 1
    log = (home / "managed" / "cluster-lost.log").read_text()
    assert "taken down by its watcher: its Ray cluster is gone (Slurm job 7 CANCELLED)" in log and "not at its keeper's idle end" in log, log
    assert "no job for its idle time" not in log


def test_a_watcher_never_stops_a_busy_cluster_it_cannot_ask_and_outlives_a_failing_down(home, monkeypatch):
    from burst.home import state
    from burst import targets
    from burst.unattended import watcher
    from burst.home.state import ClusterHandle

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


def test_a_cluster_that_waited_in_a_queue_is_not_idle_the_moment_it_starts(home, monkeypatch):
    """A Slurm job that waited two hours in the queue with `--idle-minutes`: the watcher counted idle
    time from the submission and took the allocation down at its first look, before the user's job
    could be sent. Now a cluster that has run no job is idle from the first answer that finds it running."""
    from burst import targets
    from burst.unattended import watcher
    from burst.home.state import ClusterHandle

    _save(ClusterHandle(name="queued", provider="slurm", cluster_id="0123456789ab", state="running", storage_uri="/tmp/x",
                        idle_minutes=0.01, created=time.time() - 7200))
    looks = []
    fake = _Unreachable(failing_downs=0, looks=looks)
    monkeypatch.setattr(targets, "get", lambda provider: fake)

    def no_job_yet(handle):
        looks.append(time.time())
        return False, 0.0

    monkeypatch.setattr(watcher, "job_activity", no_job_yet)
    monkeypatch.setattr(watcher, "WATCH_POLL_S", 0.05)
    assert watcher.watch("queued") == 0
    assert fake.downs == 1 and fake.looks_at_down[0] > 1  # not on the first look
    assert looks[-1] - looks[0] >= 0.6  # a full idle time after the first answer


class _Head:
    """A target whose head answers as ``alive`` says and whose job API answers as ``api`` says."""

    provider, provisions, kind, is_scheduler, keeper_ends_lease = "local", False, "local", False, False

    def __init__(self, alive, api):
        self.alive, self.api, self.looks = alive, api, []

    def is_alive(self, handle, timeout: float = 2.0) -> bool:
        ok = self.alive()
        self.looks.append((time.time(), ok))
        return ok

    def stopped_reason(self, handle) -> str:
        return "its Ray head does not answer"

    def is_gone(self, handle) -> bool:
        return False

    def storage_outlives(self, handle) -> bool:
        return True

    from contextlib import contextmanager

    @contextmanager
    def reach(self, handle):
        yield handle


def _following(home: Path, tmp_path: Path, monkeypatch, head: _Head, policy: str, budget=None):
    """A controller following attempt 1 of run r1 on cluster c, with the head above; (controller, what it did)."""
    from burst import controller, targets
    from burst.unattended.managed import Attempt, ManagedRun
    from burst.client import jobs
    from burst.home.state import ClusterHandle, RunRecord

    (tmp_path / "policy.yaml").write_text(policy)
    now = time.time()
    _save(ClusterHandle(name="c", provider="local", cluster_id="local0003", state="running", storage_uri=str(tmp_path / "store"),
                        hourly_usd=3600.0, created=now))
    _save(RunRecord(run_id="r1", workload="gan3d", cluster="c", provider="local", state="RUNNING", job_id="raysubmit_1",
                    storage_uri=str(tmp_path / "store")))
    m = ManagedRun(run_id="r1", request={}, cluster="c", policy=str(tmp_path / "policy.yaml"), budget_usd=budget,
                   attempts=[Attempt(number=1, cluster="c", provider="local", started=now, cluster_created=now, submitted=now, hourly_usd=3600.0)])
    did = []
    monkeypatch.setattr(targets, "get", lambda provider: head)
    monkeypatch.setattr(jobs, "client", lambda handle: type("Client", (), {"stop_job": lambda self, job: did.append(("stop_job", job)),
                                                                          "get_job_logs": lambda self, job: ""})())
    monkeypatch.setattr(jobs, "job_status", lambda client, job: head.api())
    monkeypatch.setattr(controller, "POLL_S", 0.05)
    monkeypatch.setattr(controller.Controller, "take_down", lambda self, handle: did.append(("take_down", handle.name)))
    monkeypatch.setattr(controller.Controller, "finish", lambda self, final, message: did.append(("finish", final, message)))
    monkeypatch.setattr(controller.Controller, "lost", lambda self, attempt, why: did.append(("lost", why, time.time())))
    return controller.Controller(m), m.attempts[0], did


def test_a_head_that_misses_looks_for_less_than_the_grace_is_not_lost_and_a_dead_one_is(home, tmp_path, monkeypatch):
    """A head under load misses looks: before, two misses 2 s apart moved a busy run (and a second
    copy trained). Now a head is lost only after answering no look for `recovery.loss_grace_seconds`."""
    start = time.time()

    def alive() -> bool:  # alive, then 1 s without an answer (a loaded head), then alive, then dead from 2 s on
        t = time.time() - start
        return t < 0.3 or 1.3 <= t < 2.0

    head = _Head(alive, api=lambda: "RUNNING")
    c, attempt, did = _following(home, tmp_path, monkeypatch, head, "providers: [local]\nrecovery: {loss_grace_seconds: 2}\n")
    c.follow_attempt(attempt)
    (lost,) = [d for d in did if d[0] == "lost"]
    last_answer = max(t for t, ok in head.looks if ok)
    assert lost[1] == "its Ray head does not answer" and lost[2] - last_answer >= 2.0
    assert last_answer - start >= 1.3  # the 1 s without an answer did not end the attempt


def test_a_budget_reached_while_the_job_cannot_be_asked_is_enforced(home, tmp_path, monkeypatch):
    """The tunnel is up but the job API answers nothing (a head OOM-killed behind a port-forward):
    the budget is charged by the clock, the stop is asked on the store, and once the workers are
    overdue the cluster is taken down and the run ends STOPPED_BUDGET."""
    from burst.lifecycle import budget
    from burst import controller
    from burst.runtime.job import RunFiles

    monkeypatch.setattr(budget, "CHECKPOINT_RESERVE_S", 0.2)
    monkeypatch.setattr(controller, "CHECKPOINT_RESERVE_S", 0.2, raising=False)
    monkeypatch.setattr(controller, "REOPEN_AFTER_S", 3600.0)

    def refused():
        raise ConnectionError("the job API does not answer")

    head = _Head(lambda: True, api=refused)
    c, attempt, did = _following(home, tmp_path, monkeypatch, head, "providers: [local]\n", budget=2.0)  # 2 s of $3600/h
    c.follow_attempt(attempt)
    assert (tmp_path / "store" / "runs" / "r1" / "STOP").exists() or Path(RunFiles(str(tmp_path / "store"), "r1").stop_request).exists()
    assert ("take_down", "c") in did
    (end,) = [d for d in did if d[0] == "finish"]
    assert end[1] == "STOPPED_BUDGET" and "could not be reached" in end[2]
    assert attempt.how == "stopped by the budget guard (the cluster could not be reached)"


def test_a_tunnel_that_will_not_open_is_tried_again_with_growing_waits_and_said_once_a_minute(home, tmp_path, monkeypatch):
    """A way to the head that fails to open (a port-forward refused): before, the controller tried
    every 2 s and wrote a line each time for its whole blind grace (300 lines in 10 min). Now the
    waits grow to a ceiling, the log says so at most once a `BLIND_SAY_EVERY_S`, and at the grace's
    end the attempt is lost."""
    from contextlib import contextmanager

    from burst import controller
    from burst.errors import BurstError

    monkeypatch.setattr(controller, "REOPEN_WAITS_S", (0.05, 0.1, 0.2, 0.4))
    monkeypatch.setattr(controller, "BLIND_SAY_EVERY_S", 1.0)
    tries = []

    class _Refused(_Head):
        @contextmanager
        def reach(self, handle):
            tries.append(time.time())
            raise BurstError("kubectl port-forward: connection refused")
            yield handle

    head = _Refused(lambda: True, api=lambda: "RUNNING")
    said = []
    c, attempt, did = _following(home, tmp_path, monkeypatch, head, "providers: [local]\nrecovery: {blind_grace_minutes: 0.05}\n")
    monkeypatch.setattr(controller.Controller, "say", lambda self, line: said.append(line))
    c.follow_attempt(attempt)
    (lost,) = [d for d in did if d[0] == "lost"]
    assert lost[1].startswith("not seen for") and "connection refused" in lost[1]
    gaps = [b - a for a, b in zip(tries, tries[1:])]
    assert gaps[0] < 0.1 and max(gaps) >= 0.4  # growing waits, up to the last one
    blind_lines = [line for line in said if "not seen for" in line]
    assert 1 <= len(blind_lines) <= 4 < len(tries), (blind_lines, len(tries))  # 3 s blind: one line a second at most


def test_a_controller_started_after_its_cluster_ended_moves_the_run_at_once(home, tmp_path, monkeypatch):
    """A controller killed while its run trained on a Slurm allocation, revived by `burst status`
    after the site cancelled the allocation: its head cannot be reached from the first look, and
    before, the controller took that for a broken way to it and reopened it for its whole blind
    grace (10 min) while the run stood still. Now it asks the target, which knows the job ended."""
    from burst import controller
    from burst.errors import BurstError
    from burst.client import jobs

    class _Cancelled(_Head):
        def is_gone(self, handle) -> bool:
            return True

        def stopped_reason(self, handle) -> str:
            return "Slurm job 3 CANCELLED"

    head = _Cancelled(lambda: False, api=lambda: "RUNNING")
    c, attempt, did = _following(home, tmp_path, monkeypatch, head, "providers: [local]\nrecovery: {blind_grace_minutes: 0.05}\n")

    def unreachable(handle):
        raise BurstError(f"cannot reach the Ray cluster {handle.name!r} at http://127.0.0.1:35419 (Failed to connect); check `burst status`")

    monkeypatch.setattr(jobs, "client", unreachable)
    monkeypatch.setattr(controller, "REOPEN_WAITS_S", (0.05,))
    started = time.time()
    c.follow_attempt(attempt)
    (lost,) = [d for d in did if d[0] == "lost"]
    assert lost[1] == "Slurm job 3 CANCELLED" and lost[2] - started < 2  # not "not seen for 0.1 min" at the (here 3 s) grace's end


@pytest.mark.slow
def test_a_cluster_whose_controller_sleeps_past_its_lease_ends_itself(tmp_path):
    """A managed run on this machine with a 54 s lease; its controller is SIGSTOPped (a laptop with
    its lid closed) once its job is submitted. The keeper beside the Ray head posts a stop notice at
    the lease's end (the workers, training by then, checkpoint), then stops the cluster's
    processes, with the controller still asleep; woken, the controller ends the run STOPPED, not
    moved."""
    import signal

    from burst.runtime.ray_head import cluster_processes
    from tests.support.cli_runs import TRAIN, finished, handed_over, managed, record

    before = census.snapshot()
    home = tmp_path / "home"
    home.mkdir()
    # the cluster's scratch in a directory of this test's (short: Ray's dashboard makes a socket under
    # TMPDIR), where the test can see what the keeper's end of the cluster leaves
    job_tmp = tempfile.mkdtemp(prefix="kp", dir="/tmp")
    # the workers' time to checkpoint on the notice: long enough for a slow, loaded machine, where the
    # 54 s lease can end before the run's first step (40 s left a notice no worker had read yet; a stop
    # notice is read at the first step too); it costs a fast machine nothing, its workers take it in seconds
    notice_wait = 150
    env = {**os.environ, "TMPDIR": job_tmp, "BURST_KEEPER_POLL_S": "1", "BURST_KEEPER_NOTICE_S": str(notice_wait)}
    # one core: the run trains until the lease ends, and that wait should not take the other test worker's core too
    proc = burst("run", "gan3d", "--provider", "local", "--name", "kp", "--cpus", "1", "--hours", "0.015", "--managed", "--detach",
                 "--epochs", "50", "--steps", "8", *TRAIN, home=home, env=env, timeout=300)
    run_id = handed_over(proc)
    wait_until(lambda: record(home, run_id)["state"] == "RUNNING", 120, "the job's submission")
    handle = json.loads((home / "clusters" / "kp.json").read_text())
    pid = managed(home, run_id)["controller_pid"]
    os.kill(pid, signal.SIGSTOP)  # the laptop sleeps
    slept_at = time.time()
    try:
        assert handle["expires"] > time.time() and handle["outputs"]["keeper_pid"]
        # every 2 s: a look reads every process's open files (looks every 0.2 s cost this test 15 CPU-s)
        wait_until(lambda: not cluster_processes(handle["cluster_id"], handle["temp_dir"]), handle["expires"] - time.time() + notice_wait + 120,
                   "the cluster to end itself", poll=2.0)
        ended_at = time.time()
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED  # the controller slept through all of it
        log = (Path(handle["temp_dir"]) / "keeper.log").read_text()
        assert "ending the cluster: its lease ended" in log and "cluster ended: its lease ended" in log, log
        assert "the workers checkpointed on the lease's notice" in log, log  # nothing trained since the last epoch is lost
        assert ended_at >= handle["expires"]  # not before the lease's end
        # the keeper killed the run's driver and workers, then removed the scratch they had held on this machine
        node_scratch = Path(job_tmp) / f"burst-{os.getuid()}"
        assert (node_scratch / "held").is_dir() and [p.name for p in node_scratch.glob("*/*") if p.parent.name != "synthetic"] == []
    finally:
        os.kill(pid, signal.SIGCONT)  # the lid opens
    run = finished(home, run_id, timeout=300)
    assert run["state"] == "STOPPED" and "lease" in run["message"] and "its keeper ended it: its lease ended" in run["message"], run
    (attempt,) = managed(home, run_id)["attempts"]  # stopped, not moved
    assert attempt["how"].startswith("stopped at the end of its lease")
    print(log)
    print(f"controller asleep at {time.strftime('%H:%M:%S', time.localtime(slept_at))}; lease ended "
          f"{time.strftime('%H:%M:%S', time.localtime(handle['expires']))}; cluster's processes all gone "
          f"{ended_at - handle['expires']:.1f} s after the lease's end; controller woken, run {run['state']}: {run['message']}")
    census.assert_none_left(before)
    shutil.rmtree(job_tmp, ignore_errors=True)


def test_a_controller_survives_a_pulumi_error_from_down_and_tries_again(home, tmp_path, monkeypatch):
    """A Pulumi CommandError (not a BurstError) escaped the controller's take-down and killed it,
    leaving the cluster up: now it is said, tried again after a wait, and the cluster goes."""
    from burst import controller, targets
    from burst.home import state
    from burst.unattended.managed import Attempt, ManagedRun
    from burst.home.state import ClusterHandle

    _save(ClusterHandle(name="c", provider="local", cluster_id="local0004", state="running", storage_uri=str(tmp_path)))
    fake = _Unreachable(failing_downs=1, looks=[])
    monkeypatch.setattr(targets, "get", lambda provider: fake)
    monkeypatch.setattr(controller, "DOWN_RETRY_S", (0.05, 0.05))
    c = controller.Controller(ManagedRun(run_id="r2", request={}, cluster="c", attempts=[Attempt(number=1, cluster="c")]))
    c.take_down(state.load(ClusterHandle, "c"))
    assert fake.downs == 2 and state.load(ClusterHandle, "c") is None
    log = (home / "managed" / "r2.log").read_text()
    assert "error: taking down cluster c: error: update failed: googleapi: Error 503" in log and "taken down" in log
