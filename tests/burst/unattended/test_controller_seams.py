"""Where the controller meets a laptop's sleep, a store that refuses a write and a cluster name
taken again (issue 64, findings 6, 10 and 11). The controller's own `lost`, `finish`, `take_down`
and budget guard run here as they do for a user; what stands in is only the cloud cluster behind
its tunnel (a target whose head and job API answer as the test says), or nothing at all (a real
local Ray cluster)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.records import save as _save
from tests.support.storage_servers import azure_store, azurite_server, gcs_server, gcs_store  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[3]


class _GkeBehindATunnel:
    """A cloud cluster reached through a port-forward: ``alive()`` and ``job()`` say how its head and
    job API answer; every ``reach`` opens the way anew; ``down`` is what `pulumi destroy` would do."""

    provider, provisions, kind, is_scheduler, keeper_ends_lease = "gcp", True, "cloud", False, True

    def __init__(self, alive, job):
        self.alive, self.job, self.opened, self.downs = alive, job, [], []

    def is_alive(self, handle, timeout: float = 2.0) -> bool:
        return self.alive()

    def stopped_reason(self, handle) -> str:
        return "its Ray head does not answer"

    def is_gone(self, handle) -> bool:
        return False

    def storage_outlives(self, handle) -> bool:
        return True

    @contextmanager
    def reach(self, handle):
        self.opened.append(time.monotonic())
        yield handle

    def down(self, handle, report=None) -> None:
        from burst.home import state

        self.downs.append(handle.cluster_id)
        state.release(handle)


def _managed(tmp_path: Path, monkeypatch, target, policy: str, store: str, budget=None):
    """A managed run r1 on its attempt 1, cluster c (id gke0001), with ``target`` in place of GKE and
    a job API that answers ``target.job()``; the controller that follows it."""
    from burst import controller, targets
    from burst.home.state import ClusterHandle, RunRecord
    from burst.client import jobs
    from burst.unattended.managed import Attempt, ManagedRun

    (tmp_path / "policy.yaml").write_text(policy)
    monkeypatch.chdir(tmp_path)  # a run's results (a failed job's log) go under the working directory: this test's, not the checkout
    now = time.time()
    _save(ClusterHandle(name="c", provider="gcp", cluster_id="gke0001", state="running", storage_uri=store, hourly_usd=3600.0,
                        created=now, region="europe-west4"))
    _save(RunRecord(run_id="r1", workload="gan3d", cluster="c", provider="gcp", state="RUNNING", job_id="raysubmit_1", storage_uri=store))
    m = ManagedRun(run_id="r1", request={}, cluster="c", policy=str(tmp_path / "policy.yaml"), budget_usd=budget, recover=False,
                   attempts=[Attempt(number=1, cluster="c", provider="gcp", region="europe-west4", started=now, cluster_created=now,
                                     cluster_id="gke0001", submitted=now, hourly_usd=3600.0)])
    stopped = []

    class _JobApi:
        def stop_job(self, job_id):
            stopped.append(job_id)

        def get_job_logs(self, job_id):
            return ""

    monkeypatch.setattr(targets, "get", lambda provider: target)
    monkeypatch.setattr(jobs, "client", lambda handle: _JobApi())
    monkeypatch.setattr(jobs, "job_status", lambda client, job_id: target.job())
    monkeypatch.setattr(controller, "POLL_S", 0.05)
    monkeypatch.setattr(controller, "REOPEN_WAITS_S", (0.05,))
    return controller.Controller(m), m, stopped


def _moves(run_id: str) -> str:
    from burst.unattended.managed import managed_file

    path = managed_file(run_id, ".log")
    return path.read_text() if path.exists() else ""


def test_a_laptop_that_slept_past_the_blind_grace_reopens_the_tunnel_and_follows_the_run_on(home, tmp_path, monkeypatch):
    """Finding 6. The laptop sleeps 15 minutes while its run trains on GKE; on waking, the
    port-forward is stale (the job API refuses). Before, blindness was counted by the wall clock
    from the last good look: the first refused look found the 3 s grace (10 min by default) long
    spent, and the healthy cluster was destroyed. Now blindness counts awake time only, the tunnel is
    opened again, the run is followed on, and the cluster is judged lost only when its head truly
    stops answering, through a way opened after the grace."""
    wall = time.time
    asleep = {"s": 0.0}
    monkeypatch.setattr(time, "time", lambda: wall() + asleep["s"])  # the wall clock jumps; time.monotonic does not
    looks = {"n": 0, "after_wake": 0}
    head = {"alive": True}

    def job() -> str:
        looks["n"] += 1
        if looks["n"] == 4:
            asleep["s"] = 15 * 60.0  # the lid closed between the 3rd and 4th look
        if asleep["s"] and len(gke.opened) <= 2:  # the stale tunnel, then a new one whose first looks fail too (its pod warming up)
            raise ConnectionError("kubectl port-forward: lost connection to pod")
        if asleep["s"]:
            looks["after_wake"] += 1
            if looks["after_wake"] == 5:
                head["alive"] = False  # later the head really dies
        return "RUNNING"

    gke = _GkeBehindATunnel(alive=lambda: head["alive"], job=job)
    c, m, _ = _managed(tmp_path, monkeypatch, gke, "providers: [gcp]\nrecovery: {blind_grace_minutes: 0.05, loss_grace_seconds: 2}\n",
                       str(tmp_path / "store"))
    from burst import controller

    monkeypatch.setattr(controller, "REOPEN_AFTER_S", 0.3)
    c.follow_attempt(m.attempts[0])
    attempt = m.attempts[0]
    assert looks["after_wake"] >= 5, "the run was followed through the reopened tunnel after the wake"
    assert attempt.how == "lost: its Ray head does not answer", attempt.how  # not "not seen for 15.0 min"
    assert len(gke.opened) >= 4  # the first way, two opened after the wake, one opened again before judging the dead head
    assert gke.downs == ["gke0001"]  # the dead cluster, once
    assert "not seen for 15" not in _moves("r1")


def test_a_head_judged_dead_through_an_old_tunnel_is_asked_again_through_a_new_one(home, tmp_path, monkeypatch):
    """Finding 6's second half: a way to the cluster opened before the grace passed (a port-forward
    that went stale) says "dead" for a healthy head; the tunnel is reopened before anything is
    judged lost, and the healthy head answers again."""
    ends = iter(["RUNNING"] * 3 + ["FAILED"])

    def alive() -> bool:
        return len(gke.opened) > 1  # dead through the first way only

    def job() -> str:
        return next(ends)

    gke = _GkeBehindATunnel(alive=alive, job=job)
    c, m, _ = _managed(tmp_path, monkeypatch, gke, "providers: [gcp]\nrecovery: {loss_grace_seconds: 2}\n", str(tmp_path / "store"))
    c.follow_attempt(m.attempts[0])
    assert m.attempts[0].how == "job failed", m.attempts[0].how  # the job's own end, seen through the new way
    assert len(gke.opened) == 2


@pytest.mark.parametrize("look", ["hangs", "is refused"])
def test_a_cluster_its_keeper_ended_at_its_lease_stops_the_run_when_the_platform_says_it_is_gone(home, tmp_path, monkeypatch, look):
    """A laptop that slept through its cluster's lease: on waking, the look it was in hangs (a
    dashboard whose GCS the keeper stopped) or is refused, and the platform says the cluster is gone.
    Gone past its lease is the keeper's end, not a loss: the run ends STOPPED and does not move (CI
    once saw LOST here, the platform's word judged before the lease)."""
    from burst.home import state
    from burst.home.state import ClusterHandle, RunRecord

    ended = {"yes": False}

    def job() -> str:
        if not ended["yes"]:
            return "RUNNING"
        if look == "hangs":
            time.sleep(30)  # abandoned: the platform is asked beside it
        raise ConnectionError("the dashboard refused the connection")

    gke = _GkeBehindATunnel(alive=lambda: True, job=job)
    gke.is_gone = lambda handle: ended["yes"]
    c, m, _ = _managed(tmp_path, monkeypatch, gke, "providers: [gcp]\n", str(tmp_path / "store"))
    with state.locked():
        handle = state.load(ClusterHandle, "c")
        handle.expires = time.time() + 0.3
        state.save(handle)
    import threading

    threading.Timer(0.6, lambda: ended.update(yes=True)).start()  # the keeper ends the cluster after its lease
    c.follow_attempt(m.attempts[0])
    assert m.attempts[0].how.startswith("stopped at the end of its lease"), m.attempts[0].how
    run = state.load(RunRecord, "r1")
    assert run.state == "STOPPED" and "lease" in run.message, (run.state, run.message)


def _local_up(home: Path, name: str, cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "up", "--provider", "local", "--name", name, "--cpus", "1", "--json"],
                          capture_output=True, text=True, cwd=cwd, timeout=180, env={**os.environ, "BURST_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_a_revived_controller_never_acts_on_a_new_cluster_of_its_cluster_s_name(home, tmp_path):
    """Finding 10. A managed run's controller died while its cluster `c` trained; the user took `c`
    down and brought up a new `c` for other work; `burst status` revives the controller. Before, it
    loaded the record by name, went blind on the new cluster (no such job there) and took it down.
    Now the attempt names its cluster by id: the new `c` is another cluster, the attempt is lost,
    and the new cluster is untouched, up and answering."""
    from burst.home import state
    from burst.home.state import ClusterHandle, RunRecord
    from burst.targets import local
    from burst.unattended.managed import Attempt, ManagedRun, save

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    new = _local_up(home, "c", cwd)
    try:
        (tmp_path / "policy.yaml").write_text("providers: [local]\nrecovery: {blind_grace_minutes: 0.05, loss_grace_seconds: 2}\n")
        old_created = new["created"] - 3600
        _save(RunRecord(run_id="r1", workload="gan3d", cluster="c", provider="local", state="RUNNING", job_id="raysubmit_old",
                        storage_uri=new["storage_uri"], attempts=1))
        save(ManagedRun(run_id="r1", request={}, cluster="c", policy=str(tmp_path / "policy.yaml"), recover=False, phase="running",
                        cwd=str(cwd), attempts=[Attempt(number=1, cluster="c", provider="local", started=old_created,
                                                        cluster_created=old_created, cluster_id="local00000old", submitted=old_created)]))
        proc = subprocess.run([sys.executable, "-m", "burst.controller", "run", "r1"], capture_output=True, text=True, timeout=120,
                              cwd=cwd, env={**os.environ, "BURST_HOME": str(home)})
        assert proc.returncode == 0, proc.stderr[-3000:]
        run = state.load(RunRecord, "r1")
        assert run.state == "LOST" and "is now another cluster" in run.message, run.message
        handle = state.load(ClusterHandle, "c")
        assert handle is not None and handle.cluster_id == new["cluster_id"]  # its record stays
        assert local.LocalTarget().is_alive(handle)  # and it answers
        assert "(local) taken down" not in _moves("r1")  # nothing was taken down
    finally:
        subprocess.run([sys.executable, "-m", "burst.cli", "down", "c"], capture_output=True, timeout=120, cwd=cwd,
                       env={**os.environ, "BURST_HOME": str(home)})


STORES = ("path", "gs", "abfs")


@pytest.fixture(params=STORES)
def refusing_store(request, tmp_path):
    """A store that refuses writes under ``runs/r1`` until ``mend()``, on each kind of store burst
    writes a stop request on: a directory (``runs/r1`` is a file: NotADirectoryError), a bucket on the
    GCS emulator not made yet (its create is refused), a container on Azurite reached with a wrong
    account key (403, as with expired credentials; ``mend`` gives the right key back)."""
    from tests.support.storage_servers import new_bucket

    if request.param == "path":
        root = tmp_path / "store"
        (root / "runs").mkdir(parents=True)
        (root / "runs" / "r1").write_text("not a directory")
        return str(root), lambda: (root / "runs" / "r1").unlink()
    server = request.getfixturevalue("gcs_server" if request.param == "gs" else "azurite_server")
    monkeypatch = request.getfixturevalue("monkeypatch")
    for k, v in server.env.items():
        monkeypatch.setenv(k, v)
    made = new_bucket(request.param, server.env)
    if request.param == "gs":
        missing = made + "x"

        def make_bucket():
            urllib.request.urlopen(urllib.request.Request(f"{server.env['STORAGE_EMULATOR_HOST']}/storage/v1/b?project=burst-tests",
                                                          method="POST", data=json.dumps({"name": missing[5:]}).encode(),
                                                          headers={"Content-Type": "application/json"}), timeout=10).close()

        return missing, make_bucket
    right = server.env["AZURE_STORAGE_CONNECTION_STRING"]
    key = right.split("AccountKey=", 1)[1].split(";", 1)[0]
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", right.replace(key, base64.b64encode(b"an expired key, 64 bytes long, as Azure's are: ........").decode()))
    return made, lambda: os.environ.__setitem__("AZURE_STORAGE_CONNECTION_STRING", right)


def _stop_file(store: str) -> bool:
    from burst.runtime import storage
    from burst.runtime.job import RunFiles

    try:
        return storage.exists(RunFiles(store, "r1").stop_request)
    except Exception:  # noqa: BLE001 - a store that does not exist holds no stop file
        return False


def test_a_stop_request_the_store_refuses_is_written_again_and_the_job_stopped_hard_when_it_never_is(refusing_store, monkeypatch):
    """Finding 11, the guard itself, on every kind of store: the store refuses the stop request (a
    503, expired credentials); before, the error escaped the guard and ended its controller, and a
    detached run trained on with nothing enforcing its budget. Now the guard says so, writes it
    again at its next look, and, if the store never takes it, stops the job hard once the workers'
    reserve is over."""
    from burst.home.state import ClusterHandle
    from burst.lifecycle import budget

    store, mend = refusing_store
    clock = {"t": 1000.0}
    monkeypatch.setattr(budget, "now", lambda: clock["t"])
    handle = ClusterHandle(name="c", provider="gcp", cluster_id="gke0001", storage_uri=store, hourly_usd=3600.0, created=0.0)
    stops = []

    def refused():
        raise ConnectionError("the job API does not answer")

    never = budget.BudgetGuard(handle, budget_usd=1100.0, reserve_s=60.0)  # $1/s: the stop is due at t = 1040
    assert never.poll("r1", stop_job=lambda: stops.append("hard")) is None
    clock["t"] = 1045.0
    said = never.poll("r1", stop_job=lambda: stops.append("hard"))
    assert "the stop request could not be written" in said and not _stop_file(store)
    clock["t"] = 1050.0
    assert never.poll("r1", stop_job=lambda: stops.append("hard")) is None  # refused again, quietly
    clock["t"] = 1045.0 + budget.CHECKPOINT_RESERVE_S + 1
    assert "stopping the job failed" in never.poll("r1", stop_job=refused) and not never.forced  # asked again at the next look
    assert never.poll("r1", stop_job=lambda: stops.append("hard")) == "the workers did not stop in time; stopping the job"
    assert stops == ["hard"] and never.forced

    guard = budget.BudgetGuard(handle, budget_usd=1100.0, reserve_s=60.0)
    clock["t"] = 1045.0
    assert "could not be written" in guard.poll("r1", stop_job=lambda: stops.append("too soon"))
    mend()
    clock["t"] = 1046.0
    assert guard.poll("r1", stop_job=lambda: stops.append("too soon")) == "the stop request is written now; taking a final checkpoint and stopping"
    assert _stop_file(store) and stops == ["hard"]


def test_a_controller_whose_store_refuses_the_stop_request_outlives_it_and_stops_the_run_at_its_budget(home, tmp_path, monkeypatch, gcs_server):
    """Finding 11 through the controller: a managed run on GKE reaches its budget while its gs://
    store refuses writes; before, the controller died of the store's error (and `finish("FAILED")`
    took the cluster down with no final checkpoint). Now it says so, writes the request once the
    store takes it, the workers stop, and the run ends STOPPED_BUDGET with its cluster taken down."""
    from burst.home.state import RunRecord
    from burst.home import state
    from burst.lifecycle import budget
    from tests.support.storage_servers import new_bucket

    for k, v in gcs_server.env.items():
        monkeypatch.setenv(k, v)
    made = new_bucket("gs", gcs_server.env)
    store = made + "x"  # not made yet: the emulator answers 404 to every write
    monkeypatch.setattr(budget, "CHECKPOINT_RESERVE_S", 30.0)  # the workers' reserve: far longer than the store's refusal
    monkeypatch.setattr(budget, "teardown_seconds", lambda provider: 0.5)
    refused_looks = {"n": 0}

    def job() -> str:
        if "could not be written" in _moves("r1"):
            refused_looks["n"] += 1
            if refused_looks["n"] == 5:  # a few looks after the refusal, the store is back
                urllib.request.urlopen(urllib.request.Request(f"{gcs_server.env['STORAGE_EMULATOR_HOST']}/storage/v1/b?project=burst-tests",
                                                              method="POST", data=json.dumps({"name": store[5:]}).encode(),
                                                              headers={"Content-Type": "application/json"}), timeout=10).close()
        return "STOPPED" if _stop_file(store) else "RUNNING"  # the workers checkpoint and end once they read it

    gke = _GkeBehindATunnel(alive=lambda: True, job=job)
    c, m, _ = _managed(tmp_path, monkeypatch, gke, "providers: [gcp]\n", store, budget=32.0)  # $1/s, stop due after about 1.5 s
    c.run()
    run = state.load(RunRecord, "r1")
    assert run.state == "STOPPED_BUDGET", run.message
    assert gke.downs == ["gke0001"]
    log = _moves("r1")
    assert "the stop request could not be written" in log and "the stop request is written now" in log


KUBE_FAKES = Path(__file__).resolve().parents[2] / "fakes" / "kube"


class _KubernetesSite(_GkeBehindATunnel):
    """Your own Kubernetes: no stack (burst applies objects), a keeper beside the head deletes the
    RayCluster at the lease's end, and the claim store is read through the head pod (the stand-in
    kubectl, whose claim is a directory): it goes with the cluster."""

    provider, provisions, kind, is_scheduler, keeper_ends_lease = "kubernetes", False, "onprem", True, True

    def storage_outlives(self, handle) -> bool:
        return False


def _claim_with_checkpoints(fake: Path, tmp_path: Path, monkeypatch) -> tuple[str, Path]:
    """A claim (stand-in) holding run r1's Ray Train checkpoints of epochs 1 and 2; (its URI, the newest)."""
    from burst.runtime import kube_storage
    from tests.support.checkpoints import checkpoint as _checkpoint

    monkeypatch.setenv("FAKE_KUBE", str(fake))
    monkeypatch.setenv("PATH", f"{KUBE_FAKES}:{os.environ['PATH']}")
    on_claim = fake / "pvc" / "ray-train" / "r1"
    _checkpoint(on_claim, "checkpoint_000000", 1)
    newest = _checkpoint(on_claim, "checkpoint_000001", 2)
    return kube_storage.uri("lab", "physics", "burst-k8s-0123456789ab", "/mnt/burst"), newest


def test_a_managed_run_on_kubernetes_checkpoints_before_its_lease_ends_and_resumes_from_it(home, tmp_path, monkeypatch):
    """Issue 64, finding 1: a managed run on your own Kubernetes still training at its lease's end.
    Before, only cloud targets were asked to checkpoint first: the keeper deleted the RayCluster,
    the controller went blind, `lost()` read the checkpoints through a head pod that was gone,
    failed, `finish("FAILED")` and `take_down` deleted the claim with every checkpoint. Now the run
    is asked to stop before the keeper acts, its final checkpoint is copied off the claim while the
    head still answers, the run is STOPPED, and a resume elsewhere goes on from that checkpoint."""
    from burst.home import state
    from burst.home.state import ClusterHandle, RunRecord
    from burst.lifecycle import budget
    from burst.lifecycle.runs import kept_checkpoints, load_run, stage_checkpoint
    from tests.support.checkpoints import tree as _tree

    fake = tmp_path / "cluster"
    fake.mkdir()
    claim, newest = _claim_with_checkpoints(fake, tmp_path, monkeypatch)
    monkeypatch.setattr(budget, "CHECKPOINT_RESERVE_S", 2.0)
    monkeypatch.setattr(budget, "teardown_seconds", lambda provider: 1.0)
    keeper_at = time.time() + 3.0 + 2.0  # the lease's end: the keeper deletes the RayCluster then
    stop_seen = {}

    def job() -> str:
        if time.time() >= keeper_at:
            (fake / "unreachable").write_text("")  # the keeper deleted the RayCluster: no head pod to read the claim through
            raise ConnectionError("the head is gone")
        if (fake / "pvc" / "runs" / "r1" / "STOP").exists():
            stop_seen.setdefault("at", time.time())
            return "STOPPED"  # the workers read it, checkpoint where they are and end
        return "RUNNING"

    site = _KubernetesSite(alive=lambda: time.time() < keeper_at, job=job)
    c, m, _ = _managed(tmp_path, monkeypatch, site, "providers: [kubernetes]\nrecovery: {loss_grace_seconds: 2}\n", claim)
    with state.locked():
        handle = state.load(ClusterHandle, "c")
        state.save(handle.model_copy(update={"provider": "kubernetes", "expires": keeper_at}))
    c.run()
    run = load_run("r1")
    assert run.state == "STOPPED" and "--resume r1" in run.message, run.message
    assert stop_seen and stop_seen["at"] < keeper_at  # asked, and seen by the workers, before the keeper acted
    kept = kept_checkpoints("r1") / "checkpoint_000001"
    assert _tree(kept) == _tree(newest)  # copied off the claim while its head pod answered
    assert site.downs == ["gke0001"]  # then the cluster and its claim went
    point = stage_checkpoint(run, ClusterHandle(name="k8s-2", provider="local", cluster_id="next0001", storage_uri=str(tmp_path / "next")))
    assert point is not None and point.epochs == 2  # `burst train --resume r1` goes on from epoch 2's checkpoint
    assert "lease of cluster c ends; taking a final checkpoint" in _moves("r1")


def test_a_claim_whose_checkpoints_cannot_be_copied_off_is_never_deleted(home, tmp_path, monkeypatch):
    """The controller slept past the lease (a laptop): the keeper has deleted the RayCluster, the
    claim can no longer be read. Before, the controller failed on the read and deleted the claim.
    Now the lease's end is recognised as the keeper's (not a loss), and the cluster and its claim
    stay, said, for `burst down` once the user no longer needs them."""
    from burst.lifecycle.runs import load_run

    fake = tmp_path / "cluster"
    fake.mkdir()
    claim, _ = _claim_with_checkpoints(fake, tmp_path, monkeypatch)
    (fake / "unreachable").write_text("")  # the head pod is gone with the RayCluster
    site = _KubernetesSite(alive=lambda: False, job=lambda: "RUNNING")
    c, m, _ = _managed(tmp_path, monkeypatch, site, "providers: [kubernetes]\nrecovery: {loss_grace_seconds: 2}\n", claim)
    from burst.home import state
    from burst.home.state import ClusterHandle

    with state.locked():
        handle = state.load(ClusterHandle, "c")
        state.save(handle.model_copy(update={"provider": "kubernetes", "expires": time.time() - 60}))
    c.run()
    run = load_run("r1")
    assert run.state == "STOPPED" and "lease of cluster 'c' ended" in run.message, run.message
    assert site.downs == []  # nothing deleted: the claim holds the only checkpoints
    assert (fake / "pvc" / "ray-train" / "r1" / "checkpoint_000001").is_dir()
    assert "the cluster and its storage are kept, not taken down; `burst down c` deletes them" in _moves("r1")
