"""The local target on a real Ray cluster: up, train, preemption, crashes, down.

One cluster serves the module (starting Ray costs ~10 s); every test leaves it as it found it.
Tests that start a cluster of their own check that nothing is left with an independent process
census (``tests/support/census.py``), not with burst's own finder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from burst.runtime import ray_head
from workloads.common import precision
from tests.support import census, cli_runs, slurm_site
from tests.support.cli_runs import TRAIN as TRAIN_ARGS, checkpoint_tensors, raw_events

pytestmark = pytest.mark.slow

# The uninterrupted reference run and the preempted run train exactly this (same seed, data, threads).
RESUME_ARGS = ["--epochs", "3", "--steps", "6", *TRAIN_ARGS]


def burst(*args, check=True, **kw):
    """The CLI in a subprocess; in this module a failure fails the test unless ``check=False``."""
    return cli_runs.burst(*args, check=check, **kw)


def popen_burst(*args, home, cwd, env_extra=None):
    env = {**os.environ, "BURST_HOME": str(home), **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "burst.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


def marked(cluster_id: str) -> list[int]:
    from burst.runtime.ray_head import cluster_processes

    return [p.pid for p in cluster_processes(cluster_id)]


@pytest.fixture(scope="module")
def home():
    # A state directory 120 characters long, as on AFS/GPFS homes: Ray's Unix sockets (107-byte
    # limit) must not live under it, and every test of this module runs with it.
    top = Path(tempfile.mkdtemp(prefix="bt", dir="/tmp"))
    path = top / ("a-long-home-directory-" * 6)[: 120 - len(str(top)) - 1]
    path.mkdir()
    assert len(str(path)) == 120
    node_tmp = top / "tmp"  # this module's clusters' TMPDIR: what a test finds there is theirs, not another worker's
    node_tmp.mkdir()
    with pytest.MonkeyPatch.context() as mp:  # this process reads burst's state too; later modules must not
        mp.setenv("BURST_HOME", str(path))
        mp.setenv("TMPDIR", str(node_tmp))
        mp.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        yield path
    env = {**os.environ, "BURST_HOME": str(path)}
    subprocess.run([sys.executable, "-m", "burst.cli", "down", "--all"], env=env, capture_output=True, timeout=120)
    shutil.rmtree(top, ignore_errors=True)  # mkdtemp is outside pytest's tmp_path: remove it ourselves


@pytest.fixture(scope="module")
def cluster(home, tmp_path_factory):
    before = census.snapshot()
    cwd = tmp_path_factory.mktemp("cwd")
    proc = burst("up", "--provider", "local", "--name", "t", "--cpus", "2", "--json", home=home, cwd=cwd)
    handle = json.loads(proc.stdout)
    assert marked(handle["cluster_id"])  # the finder sees the cluster, so its "none left" below means something
    # the dashboard's forkserver socket, in the machine's TMPDIR: a killed forkserver leaves its directory
    forkserver = ray_head.forkserver_dirs(ray_head.cluster_processes(handle["cluster_id"], handle["temp_dir"]))
    assert forkserver and all(d.exists() for d in forkserver)
    yield handle, cwd
    burst("down", "t", home=home, cwd=cwd, check=False)
    assert marked(handle["cluster_id"]) == []
    assert not Path(handle["temp_dir"]).exists()  # down removes the runtime dir
    assert not any(d.exists() for d in forkserver)  # and the forkserver's, so no `up` adds to /tmp for good
    census.assert_none_left(before)


@pytest.fixture(scope="module")
def straight_run(cluster, home, tmp_path_factory):
    """README's first command, `burst run gan3d --provider local`, shortened: up, train, validate, down."""
    cwd = tmp_path_factory.mktemp("headline")
    before = census.snapshot()
    proc = burst("run", "gan3d", "--provider", "local", "--cpus", "2", *RESUME_ARGS, home=home, cwd=cwd, check=False)
    left = census.survivors(before, exempt_roots=cluster[0]["pids"])
    return proc, cwd, left


def test_up_is_secure_and_idempotent(cluster, home):
    handle, cwd = cluster
    assert handle["state"] == "running" and handle["created_now"] is True
    token = Path(handle["token_path"])
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    ray_dir = Path(handle["temp_dir"])  # short and private, whatever the state directory's length
    assert home not in ray_dir.parents and stat.S_IMODE(ray_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(ray_dir.parent.stat().st_mode) == 0o700 and ray_dir.parent.stat().st_uid == os.getuid()
    assert list(ray_dir.glob("session_*/sockets/*"))
    secret = token.read_text().strip()
    for path in list(Path(home).rglob("*.json")):
        assert secret not in path.read_text()  # nothing secret in the state
    # The dashboard/Jobs API answers only with the token.
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(handle["dashboard_url"] + "/api/version", timeout=5)
    assert info.value.code in (401, 403)
    req = urllib.request.Request(handle["dashboard_url"] + "/api/version", headers={"Authorization": f"Bearer {secret}"})
    assert urllib.request.urlopen(req, timeout=5).status == 200
    # The dashboard listens on loopback only.
    import psutil

    port = int(handle["dashboard_url"].rsplit(":", 1)[1])
    listeners = [c for c in psutil.net_connections("inet") if c.status == "LISTEN" and c.laddr.port == port]
    assert listeners and all(c.laddr.ip == "127.0.0.1" for c in listeners)
    again = json.loads(burst("up", "--provider", "local", "--name", "t", "--json", home=home, cwd=cwd).stdout)
    assert again["cluster_id"] == handle["cluster_id"] and again["created_now"] is False


def test_headline_run_trains_validates_reports_and_leaves_nothing(straight_run, home):
    proc, cwd, left = straight_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert left == [], f"processes left behind: {left}"
    assert not Path(home, "clusters", "run-local.json").exists()  # the temporary cluster is gone
    (run_dir,) = list((cwd / "burst-runs").iterdir())
    node_scratch = Path(tempfile.gettempdir()) / f"burst-{os.getuid()}"
    assert list(node_scratch.glob(f"*/{run_dir.name}*")) == []  # no copy, checkpoint or lock of the run is left on this machine
    assert f"report: {run_dir.resolve() / 'report' / 'report.html'}" in " ".join(proc.stderr.split())
    for name in ("report/report.html", "metrics.json", "cost.json", "provenance.json", "history.json", "job.log"):
        assert (run_dir / name).exists(), name
    assert list((run_dir / "report" / "tensorboard").glob("events.out.tfevents.*"))  # the run's TensorBoard log came home
    history = json.loads((run_dir / "history.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert all(0 <= h["input_wait_s"] < h["seconds"] for h in history)  # the step time's split, epoch by epoch
    used = json.loads((run_dir / "report" / "usage.json").read_text())  # the node's utilisation, sampled from Ray's metrics
    assert used["accelerator"] == "CPU" and used["samples"] >= 2 and list(used["nodes"]) == ["127.0.0.1"]
    assert 0 <= used["busy_percent"] <= 100 and used["idle_usd"] is not None
    cost = json.loads((run_dir / "cost.json").read_text())  # what of the cost paid for idle devices, beside the cost
    assert (cost["busy_percent"], cost["idle_usd_while_training"]) == (used["busy_percent"], used["idle_usd"])
    assert (run_dir / "report" / "usage.png").exists() and "<h2>Utilisation</h2>" in (run_dir / "report" / "report.html").read_text()
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["target"]["provider"] == "local"
    assert provenance["versions"]["tensorflow"] and provenance["data_hashes"]
    assert provenance["timings"]["submit_to_first_step_s"] > 0
    assert provenance["timings"]["validated_in_worker_s"] > 0  # by the worker that trained: no second TensorFlow in the job
    machine = provenance["machine"]  # as the training worker's TensorFlow saw it
    assert machine["onednn_enabled"] is True and machine["onednn_requested"] == "1"
    assert machine["cpu_model"] and machine["simd"] and machine["intra_op_threads"] == 2
    # auto: what this CPU runs fast (float32 without AVX512-BF16 or AMX), and why, as the worker decided
    assert (machine["precision"], machine["precision_why"]) == precision.for_cpu(precision.cpu_flags())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0.01 < metrics["summary"]["sf_mc"] < 0.03
    status = json.loads(burst("status", "--json", home=home, cwd=cwd).stdout)
    assert any(r["run_id"] == run_dir.name and r["state"] == "SUCCEEDED" for r in status["runs"])
    report = burst("report", run_dir.name, home=home, cwd=cwd).stdout.strip()
    assert report.endswith("report.html") and Path(report).exists()
    logs = burst("logs", run_dir.name, home=home, cwd=cwd).stdout  # the cluster is gone: the saved log
    assert '"type": "done"' in logs


def _wait_for_event(home, cwd, run_id, predicate, timeout=240):
    """Poll the job log through the CLI's own client until an event matches."""
    from burst.home import state
    from burst.client import jobs
    from burst.home.state import ClusterHandle, RunRecord

    deadline = time.time() + timeout
    while time.time() < deadline:
        run = state.load(RunRecord, run_id)
        if run and run.job_id:
            handle = state.load(ClusterHandle, run.cluster)
            events = [e.model_dump() for e in jobs.parse_events(jobs.client(handle).get_job_logs(run.job_id))]
            hits = [e for e in events if predicate(e)]
            if hits:
                return hits[0], events
            if any(e["type"] == "failed" for e in events):
                raise AssertionError(f"job failed: {events}")
        time.sleep(1)
    raise AssertionError("event did not arrive in time")


def _new_run_id(home, before: set, timeout=60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        new = set(Path(home, "runs").glob("gan3d-*.json")) - before if Path(home, "runs").exists() else set()
        if new:
            return new.pop().stem
        assert time.monotonic() < deadline, "burst train recorded no run"
        time.sleep(0.3)


def _runs(home) -> set:
    return set(Path(home, "runs").glob("gan3d-*.json")) if Path(home, "runs").exists() else set()


def test_detached_cli_and_preempted_worker_resume_exactly(cluster, home, straight_run):
    """Ctrl-C on `burst train` detaches (the job goes on); a Ray Train worker SIGKILLed mid-run is
    restarted from the newest checkpoint; every epoch is trained once and the final weights equal
    those of the uninterrupted headline run."""
    handle, cwd = cluster
    epochs = 3
    before = _runs(home)
    cli = popen_burst("train", "gan3d", "--cluster", "t", *RESUME_ARGS, home=home, cwd=cwd)
    run_id = _new_run_id(home, before)
    _wait_for_event(home, cwd, run_id, lambda e: e["type"] == "epoch" and e["epoch"] == 1)
    cli.send_signal(signal.SIGINT)  # Ctrl-C without --cancel: detach, the job must go on
    _, stderr = cli.communicate(timeout=30)
    assert cli.returncode == 130 and "detached; the run goes on" in " ".join(stderr.split())
    status = json.loads(burst("status", "--json", home=home, cwd=cwd).stdout)
    assert next(r for r in status["runs"] if r["run_id"] == run_id)["state"] == "RUNNING"

    first_start, _ = _wait_for_event(home, cwd, run_id, lambda e: e["type"] == "start")
    os.kill(first_start["pid"], signal.SIGKILL)  # preempt the training worker in epoch 2

    done, events = _wait_for_event(home, cwd, run_id, lambda e: e["type"] in ("done", "failed"), timeout=400)
    assert done["type"] == "done", events
    from burst.home import state
    from burst.client import jobs
    from burst.home.state import ClusterHandle

    raw = raw_events(jobs.client(state.load(ClusterHandle, "t")).get_job_logs(run_id))
    starts = [e for e in raw if e["type"] == "start"]
    assert len(starts) >= 2 and starts[-1]["resumed"] is True and starts[-1]["epoch"] >= 1
    trained = [e["epoch"] for e in raw if e["type"] == "epoch" and not e.get("replayed")]
    replayed = [e["epoch"] for e in raw if e["type"] == "epoch" and e.get("replayed")]
    assert len(trained) == len(set(trained))  # no epoch trained (announced) twice
    assert sorted(set(trained) | set(replayed)) == list(range(1, epochs + 1))  # none skipped
    # the killed worker's half-written checkpoint (if it died saving) went with the run
    assert not (Path(tempfile.gettempdir()) / f"burst-{os.getuid()}" / "checkpoints" / run_id).exists()
    assert not [p for p in Path(tempfile.gettempdir()).glob("checkpoint_tmp_*") if p.stat().st_mtime > first_start["time"]]
    # A replay is an epoch restored from a checkpoint (one killed before its announcement), never a retrained one.
    assert all(epoch <= starts[-1]["epoch"] for epoch in replayed)
    # `burst logs --follow` returns when the job ends; `burst report` then fetches the results
    # that the detached CLI never collected.
    follow = burst("logs", run_id, "--follow", home=home, cwd=cwd).stdout
    assert '"type": "done"' in follow
    report = Path(burst("report", run_id, home=home, cwd=cwd).stdout.strip())
    history = json.loads((report.parent.parent / "history.json").read_text())
    assert [h["epoch"] for h in history] == list(range(1, epochs + 1))

    # Exact resume: the preempted run ends with the uninterrupted run's weights and optimiser state.
    proc, straight_cwd, _ = straight_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    (straight_dir,) = list((straight_cwd / "burst-runs").iterdir())
    straight = checkpoint_tensors(Path((straight_dir / "checkpoint_uri.txt").read_text().strip()))
    resumed = checkpoint_tensors(Path((report.parent.parent / "checkpoint_uri.txt").read_text().strip()))
    assert straight.keys() == resumed.keys() and len(straight) > 50
    for name in straight:
        np.testing.assert_array_equal(straight[name], resumed[name], err_msg=name)


def prometheus_missing() -> str | None:
    return None if shutil.which("prometheus") else "Prometheus is not installed: apt-get install prometheus"


def test_ctrl_c_with_cancel_stops_the_job(cluster, home):
    """Ctrl-C on `burst train --cancel` once its job runs: the run is STOPPED and so is its job.
    (A run seen live in Prometheus and `status`: the lost head's run below, which trains anyway.)"""
    from burst.home import state
    from burst.client import jobs
    from burst.home.state import ClusterHandle, RunRecord

    handle, cwd = cluster
    before = _runs(home)
    cli = popen_burst("train", "gan3d", "--cluster", "t", "--epochs", "50", "--cancel", *TRAIN_ARGS, home=home, cwd=cwd)
    run_id = _new_run_id(home, before)
    client = jobs.client(state.load(ClusterHandle, "t"))
    deadline = time.monotonic() + 120
    while not ((run := state.load(RunRecord, run_id)) and run.job_id and jobs.job_status(client, run.job_id) == "RUNNING"):
        assert time.monotonic() < deadline and cli.poll() is None, "the job never ran"
        time.sleep(0.3)
    cli.send_signal(signal.SIGINT)
    _, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 130 and f"run {run_id} cancelled" in stderr
    status = json.loads(burst("status", "--json", home=home, cwd=cwd).stdout)
    assert next(r for r in status["runs"] if r["run_id"] == run_id)["state"] == "STOPPED"
    deadline = time.monotonic() + 60
    while jobs.job_status(client, run_id) not in jobs.TERMINAL:
        assert time.monotonic() < deadline, "the cancelled job did not end"
        time.sleep(0.5)
    assert jobs.job_status(client, run_id) == "STOPPED"


def test_killed_up_is_reported_truthfully_and_down_cleans_up(cluster, home, tmp_path):
    """SIGKILL `burst up` while Ray starts: status does not claim a running cluster, and
    `burst down` leaves no process of it behind."""
    from burst.home import state
    from burst.home.state import ClusterHandle

    before = census.snapshot()
    up = popen_burst("up", "--provider", "local", "--name", "crash", "--cpus", "1", home=home, cwd=tmp_path)
    deadline = time.monotonic() + 60
    handle = None
    while not (handle is not None and marked(handle.cluster_id)):
        assert time.monotonic() < deadline, "Ray never started under `burst up`: nothing to kill mid-start"
        handle = state.load(ClusterHandle, "crash")
        time.sleep(0.1)
    up.send_signal(signal.SIGKILL)
    up.wait(10)
    status = json.loads(burst("status", "--json", home=home, cwd=tmp_path).stdout)
    crash = next(c for c in status["clusters"] if c["name"] == "crash")
    assert crash["state"] in ("starting", "unreachable")
    burst("down", "crash", home=home, cwd=tmp_path)
    assert state.load(ClusterHandle, "crash") is None
    census.assert_none_left(before, exempt_roots=cluster[0]["pids"])


def _loopback(ip: str) -> bool:
    import ipaddress

    addr = ipaddress.ip_address(ip)
    return (getattr(addr, "ipv4_mapped", None) or addr).is_loopback  # gRPC listens on ::ffff:127.0.0.1


def _listening(pids: list[int]) -> list[tuple[str, int, str]]:
    import psutil

    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            conns = proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        out += [(c.laddr.ip, c.laddr.port, proc.name()) for c in conns if c.status == psutil.CONN_LISTEN]
    return out


# A job whose actor asks Ray's state API about itself without naming a cluster, as Ray Train's
# placement-group cleaner asks every second whether the run's controller still lives.
ASKS_ABOUT_ITSELF = """
import ray
ray.init()

@ray.remote(num_cpus=0)
class Asker:
    def ask(self):
        from ray.util.state import get_actor
        me = get_actor(ray.get_runtime_context().get_actor_id(), timeout=20)
        return me.state if me else "not found"

print("STATE", ray.get(Asker.remote().ask.remote()))
"""


def _asked_about_itself(name: str) -> str:
    from burst.home import state
    from burst.home.state import ClusterHandle
    from burst.client import jobs

    client = jobs.client(state.load(ClusterHandle, name))
    job = client.submit_job(entrypoint=f"{sys.executable} -c '{ASKS_ABOUT_ITSELF}'")
    deadline = time.monotonic() + 120
    while jobs.job_status(client, job) not in jobs.TERMINAL:
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.5)
    return client.get_job_logs(job)


def test_every_socket_of_a_local_cluster_listens_on_loopback_and_a_second_cluster_coexists(cluster, home, tmp_path):
    """The socket table of two live local clusters: every listening socket of every process of
    either is on 127.0.0.1 (nothing reachable from the network), the two share no port, and the
    second one starts and stops beside the first without touching it. The second one's processes
    find their own cluster when Ray looks for "the" cluster unasked: with two on the machine, Ray
    Train's placement-group cleaner asked the wrong one, and removed a live run's workers."""
    handle, cwd = cluster
    before = census.snapshot()
    first = _listening(marked(handle["cluster_id"]))
    second = json.loads(burst("up", "--provider", "local", "--name", "beside", "--cpus", "1", "--json", home=home, cwd=tmp_path).stdout)
    try:
        other = _listening(marked(second["cluster_id"]))
        assert len(first) >= 8 and len(other) >= 8, (first, other)  # GCS, raylet, agents, dashboard, metrics...
        exposed = [s for s in first + other if not _loopback(s[0])]
        assert not exposed, f"sockets reachable from the network: {exposed}"
        assert not {s[1] for s in first} & {s[1] for s in other}
        log = _asked_about_itself("beside")  # with "t" beside it on the machine
        assert "STATE ALIVE" in log, log[-3000:]
    finally:
        burst("down", "beside", home=home, cwd=tmp_path)
    census.assert_none_left(before, exempt_roots=handle["pids"])
    # The first cluster is untouched: the same processes listen on the same addresses, on the
    # ports burst chose for it (Ray's dashboard agent also opens ephemeral ports that come and go).
    after = _listening(marked(handle["cluster_id"]))
    assert sorted((ip, name) for ip, _, name in after) == sorted((ip, name) for ip, _, name in first)
    chosen = {int(handle["dashboard_url"].rsplit(":", 1)[1]), int(handle["gcs_address"].rsplit(":", 1)[1])}
    assert chosen <= {port for _, port, _ in after}


def test_up_that_loses_its_port_fails_in_one_line_and_leaves_nothing(cluster, home, monkeypatch):
    """A port chosen free is taken by someone else before Ray binds it (a race no choice can
    close): `up` fails with one line naming the port, and no process of the attempt is left."""
    from burst.errors import BurstError
    from burst.targets import local

    before = census.snapshot()
    monkeypatch.setenv("BURST_HOME", str(home))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    from burst.runtime import ray_head

    real = ray_head._free_ports
    monkeypatch.setattr(ray_head, "_free_ports", lambda n: [port if i == 1 else p for i, p in enumerate(real(n))])  # the dashboard's port is taken
    try:
        with pytest.raises(BurstError) as failure:
            local.up("taken", cpus=1)
    finally:
        taken.close()
    message = str(failure.value)
    assert "\n" not in message and str(port) in message and "nothing was left running" in message, message
    from burst.home import state
    from burst.home.state import ClusterHandle

    assert state.load(ClusterHandle, "taken") is None
    census.assert_none_left(before, exempt_roots=cluster[0]["pids"])


def test_down_all_while_up_is_starting_wins_and_up_says_so(cluster, tmp_path, monkeypatch):
    """`burst down --all` while another `burst up` is still starting Ray: down stops what exists,
    up notices and stops whatever it started after, says why, and nothing is left or recorded."""
    home = tmp_path / "home"  # its own state: `down --all` here must not touch the module's cluster
    monkeypatch.setenv("BURST_HOME", str(home))
    before = census.snapshot()
    up = popen_burst("up", "--provider", "local", "--name", "racing", "--cpus", "1", home=home, cwd=tmp_path)
    from burst.home import state
    from burst.home.state import ClusterHandle

    deadline = time.monotonic() + 60
    while True:
        handle = state.load(ClusterHandle, "racing") if (home / "clusters").exists() else None
        if handle is not None and marked(handle.cluster_id):
            break
        assert up.poll() is None and time.monotonic() < deadline, "Ray never started under `burst up`"
        time.sleep(0.05)
    burst("down", "--all", home=home, cwd=tmp_path, check=False)
    _, err = up.communicate(timeout=240)
    assert up.returncode == 1, err
    assert "stopped by `burst down` while it was starting" in " ".join(err.split())
    assert state.load(ClusterHandle, "racing") is None
    census.assert_none_left(before, exempt_roots=cluster[0]["pids"])


def test_ctrl_c_on_run_tears_everything_down(cluster, home, tmp_path):
    """`burst run` interrupted mid-training: the job is cancelled and the cluster stopped."""
    from burst.home import state
    from burst.home.state import ClusterHandle, RunRecord

    before_procs = census.snapshot()
    before = _runs(home)
    proc = popen_burst("run", "gan3d", "--provider", "local", "--name", "ctrlc", "--cpus", "1", "--epochs", "50", *TRAIN_ARGS, home=home, cwd=tmp_path)
    run = state.load(RunRecord, _new_run_id(home, before, timeout=120))
    handle = state.load(ClusterHandle, "ctrlc")
    assert handle is not None and marked(handle.cluster_id)
    proc.send_signal(signal.SIGINT)
    proc.wait(120)
    assert proc.returncode == 130, proc.stderr.read()
    assert state.load(ClusterHandle, "ctrlc") is None
    assert state.load(RunRecord, run.run_id).state == "STOPPED"
    census.assert_none_left(before_procs, exempt_roots=cluster[0]["pids"])


@pytest.mark.parametrize("key, value, words, managed", [("energy", np.nan, "NaN", False), ("ECAL", -1.0, "negative", True)],
                         ids=["condition-found-before-training", "image-found-by-the-worker-of-a-managed-run"])
def test_a_failing_job_is_one_line_a_failed_run_and_no_cluster_left(cluster, home, tmp_path, key, value, words, managed):
    """Corrupt training data: the job fails on the cluster, `burst run` exits 1 with one line that
    names the file, the key and what is wrong, the run is FAILED, and the temporary cluster is gone.
    A bad condition is found by the driver before any worker starts; a bad image only by the
    worker's input pipeline, which reports it once instead of being restarted to read it again.
    A managed run's controller keeps the job's log before it takes the cluster down, as `burst run`
    does: what says why it failed outlives the cluster."""
    import h5py

    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "workloads.gan3d", "generate", "--out", str(data), "--events", "60", "--per-file", "20"],
                   check=True, capture_output=True, timeout=300)
    broken = sorted(data.glob("*.h5"))[0]
    with h5py.File(broken, "r+") as f:
        values = f[key][:]
        values[3] = value
        f[key][:] = values
    before = census.snapshot()
    proc = burst("run", "gan3d", "--provider", "local", "--name", f"failing-{key.lower()}", "--cpus", "1", "--data", str(data), "--epochs", "1",
                 "--val-events", "20", *(["--managed"] if managed else []), home=home, cwd=tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and broken.name in errors[0] and f"'{key}'" in errors[0] and words in errors[0], proc.stderr[-3000:]
    status = json.loads(burst("status", "--json", home=home, cwd=tmp_path).stdout)
    (run,) = [r for r in status["runs"] if r["cluster"] == f"failing-{key.lower()}"]
    assert run["state"] == "FAILED" and broken.name in run["message"]
    starts = [e for e in raw_events((tmp_path / "burst-runs" / run["run_id"] / "job.log").read_text()) if e["type"] == "start"]
    assert len(starts) == (1 if key == "ECAL" else 0)  # the worker is not restarted to read the same bad file again
    assert not any(c["name"] == f"failing-{key.lower()}" for c in status["clusters"])
    census.assert_none_left(before, exempt_roots=cluster[0]["pids"])


def test_a_run_on_bucket_storage_that_misses_its_quality_gate_shares_data_checkpoints_and_results_and_ends_failed_quality(home, tmp_path, monkeypatch):
    """The path cloud clusters take (storage in a bucket), driven here through pyarrow's file://
    filesystem, with a gate the model cannot meet (a classifier that cannot tell it from MC): the
    run trains on the data where it lies in the bucket and validates, everything it made is
    published through the bucket, and it ends FAILED_QUALITY, exit 4, one line naming the metric;
    the report says so first."""
    # the cluster's local disk: the job's work copies go here, not to /tmp; short, as Ray's dashboard
    # makes a Unix socket under TMPDIR (a worker's tmp_path under pytest-xdist is too long for one)
    job_tmp = Path(tempfile.mkdtemp(prefix="bn", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(job_tmp))
    bucket = tmp_path / "bucket"
    dataset = bucket / "datasets" / "ele"  # CERN-format files already in the bucket
    subprocess.run([sys.executable, "-m", "workloads.gan3d", "generate", "--out", str(dataset), "--events", "300", "--per-file", "100"],
                   check=True, capture_output=True, timeout=300)
    burst("up", "--provider", "local", "--name", "bucket", "--cpus", "2", "--storage", bucket.as_uri(), home=home, cwd=tmp_path)
    try:
        gate = tmp_path / "gate.yaml"
        gate.write_text("optimisation_metric: 1000\nclassifier_auc: 0.5\n")
        proc = burst("train", "gan3d", "--cluster", "bucket", "--epochs", "1", "--steps", "3", "--data", dataset.as_uri(), "--val-events", "50",
                     "--batch-per-replica", "8", "--gate", str(gate), home=home, cwd=tmp_path, check=False)
        assert proc.returncode == 4, proc.stderr[-3000:]
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "failed its quality gate: classifier_auc" in errors[0] and "> 0.5" in errors[0], proc.stderr[-3000:]
        assert "optimisation_metric" not in errors[0]  # the metric that passed is not named as failing
        (run_dir,) = list((tmp_path / "burst-runs").iterdir())
        assert f"report: {run_dir.resolve()}/report/report.html" in " ".join(proc.stderr.split())
        status = json.loads(burst("status", "--json", home=home, cwd=tmp_path).stdout)
        (run,) = [r for r in status["runs"] if r["run_id"] == run_dir.name]
        assert run["state"] == "FAILED_QUALITY" and "classifier_auc" in run["message"]
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert metrics["verdict"]["passed"] is False and set(metrics["verdict"]["failing"]) == {"classifier_auc"}
        assert metrics["noise_floor"]["events"] == metrics["gan_same_size"]["events"] == 25  # MC against MC: the 50 held-out events in halves
        assert "<b>Verdict:</b> FAILED the quality gate" in (run_dir / "report" / "report.html").read_text()

        published = bucket / "runs" / run["run_id"]
        assert (published / "report" / "report.html").exists() and (published / "checkpoint").is_dir()
        # the workers read the training files where they are in the bucket: no per-run copy of the split
        assert not (bucket / "data" / run["run_id"]).exists() and len(list(dataset.glob("*.h5"))) == 3
        assert list((bucket / "ray-train" / run["run_id"]).glob("checkpoint_*"))
        local = run_dir
        assert (local / "report" / "report.html").exists() and json.loads((local / "history.json").read_text())[0]["epoch"] == 1
        # the utilisation sampled on the job's side travels through the bucket, and the cost says its idle part
        used = json.loads((local / "report" / "usage.json").read_text())
        assert used["samples"] >= 1 and (published / "report" / "usage.jsonl").exists()
        assert json.loads((local / "cost.json").read_text())["idle_usd_while_training"] == used["idle_usd"]
        assert (local / "checkpoint_uri.txt").read_text().strip() == f"{bucket.as_uri()}/runs/{run['run_id']}/checkpoint"
        scratch = job_tmp / f"burst-{os.getuid()}"  # private to the user (0700)
        assert scratch.stat().st_mode & 0o777 == 0o700
        assert not (scratch / "work" / run["run_id"]).exists()  # the job's local work copy is gone
        assert not (scratch / "data" / run["run_id"]).exists()  # and the worker's copy of the data
        assert not (scratch / "checkpoints" / run["run_id"]).exists()  # and its checkpoint scratch
    finally:
        burst("down", "bucket", home=home, cwd=tmp_path)
        shutil.rmtree(job_tmp, ignore_errors=True)


def test_an_existing_ray_cluster_is_attached_and_left_running(cluster, home, tmp_path):
    # The on-prem target: a Ray cluster burst did not start (here the module's local one), named in a policy.
    # (A run on such a cluster: the test below, which trains on it with the plan's batch.)
    handle, _ = cluster
    policy = tmp_path / "site.yaml"
    policy.write_text(f"onprem:\n  accelerator: V100\n  gpus: 8\n  usd_per_gpu_hour: 0.9\n  ray_address: {handle['dashboard_url']}\n"
                      f"  token_file: {handle['token_path']}\n  storage: {tmp_path / 'site-storage'}\n"
                      "precision: float32\n")  # the 'V100' is this CPU: a float32 run, so the plan must assume float32
    site = json.loads(burst("up", "--provider", "ray", "--name", "site", "--policy", str(policy), "--json", home=home, cwd=tmp_path).stdout)
    assert site["provider"] == "ray" and site["layout"]["cpus"] == 2 and site["layout"]["gpus"] == 0  # CPU-only: trains on CPUs
    burst("down", "site", home=home, cwd=tmp_path)
    assert marked(handle["cluster_id"])  # the on-prem cluster keeps running; burst only forgot it
    bad = tmp_path / "bad.yaml"
    bad.write_text("onprem:\n  accelerator: V100\n  gpus: 8\n  usd_per_gpu_hour: 0.9\n  ray_address: http://127.0.0.1:9\n")
    proc = burst("up", "--provider", "ray", "--name", "gone", "--policy", str(bad), home=home, cwd=tmp_path, check=False)
    assert proc.returncode == 1 and "does not answer" in proc.stderr and "Traceback" not in proc.stderr


@slurm_site.needs(prometheus_missing())
def test_an_attached_cluster_is_monitored_through_its_dashboard_s_node_list_and_forgetting_it_stops_prometheus(cluster, home, tmp_path):
    """An on-prem Ray cluster (here the module's, attached as a site): its Ray service-discovery file
    is on its head, not here, so `burst monitor` asks the dashboard (with the site's token) for its
    nodes and scrapes their metrics ports; `burst down` of the site stops Prometheus and leaves the
    cluster running."""
    handle, _ = cluster
    policy = tmp_path / "site.yaml"
    policy.write_text(f"onprem:\n  accelerator: V100\n  gpus: 8\n  usd_per_gpu_hour: 0.9\n  ray_address: {handle['dashboard_url']}\n"
                      f"  token_file: {handle['token_path']}\n  storage: {tmp_path / 'site-storage'}\n")
    burst("up", "--provider", "ray", "--name", "site", "--policy", str(policy), home=home, cwd=tmp_path)
    mon = json.loads(burst("monitor", "site", "--json", home=home, cwd=tmp_path).stdout)
    (listed,) = json.loads((Path(mon["directory"]) / "nodes.json").read_text())
    ray_own = json.loads((Path(handle["temp_dir"]) / "prom_metrics_service_discovery.json").read_text())
    assert set(listed["targets"]) <= {t for group in ray_own for t in group["targets"]}  # the node's own metrics agent
    from burst.monitor import query

    deadline, up = time.monotonic() + 60, []
    while not up:
        assert time.monotonic() < deadline, "Prometheus never scraped the attached cluster's node"
        time.sleep(1)
        up = [r for r in query(mon["url"], 'up{job="ray"}') if r["value"][1] == "1"]
    assert {r["metric"]["instance"] for r in up} == set(listed["targets"])
    burst("down", "site", home=home, cwd=tmp_path)
    import psutil

    assert not psutil.pid_exists(mon["pid"]) or psutil.Process(mon["pid"]).status() == psutil.STATUS_ZOMBIE
    assert marked(handle["cluster_id"])  # the on-prem cluster keeps running


def test_the_plan_hands_its_batch_to_the_job_and_the_run_records_predicted_against_measured(cluster, home, tmp_path):
    # `burst up --batch-per-replica 2` plans the paper preset at batch 2; `burst train --preset paper`
    # without a batch trains at the plan's batch; cost.json compares the plan's epoch (scaled to the
    # events the epoch had) with the measured one; `burst calibrate` refits the site's speed from it.
    handle, _ = cluster
    policy = tmp_path / "site.yaml"
    policy.write_text(f"onprem:\n  accelerator: V100\n  gpus: 1\n  ray_address: {handle['dashboard_url']}\n"
                      f"  token_file: {handle['token_path']}\n  storage: {tmp_path / 'site-storage'}\n"
                      "precision: float32\n")  # the 'V100' is this CPU: a float32 run, so the plan must assume float32
    site = json.loads(burst("up", "--provider", "ray", "--name", "planned", "--policy", str(policy), "--batch-per-replica", "2",
                            "--epochs", "2", "--json", home=home, cwd=tmp_path).stdout)
    assert site["plan"]["batch_per_replica"] == 2 and site["plan"]["preset"] == "paper" and site["plan"]["epoch_s"] > 0
    try:
        proc = burst("train", "gan3d", "--cluster", "planned", "--preset", "paper", "--epochs", "2", "--steps", "2", "--synthetic", "100",
                     "--val-events", "40", "--json", home=home, cwd=tmp_path, timeout=600)
        run = json.loads(proc.stdout)
        assert run["state"] == "SUCCEEDED" and run["config"]["batch_per_replica"] == 2
        assert (tmp_path / "site-storage" / "runs" / run["run_id"]).is_dir()  # the site's storage, not burst's
        # nobody takes an attached cluster down: the run's driver let go of its scratch on the head's node itself
        assert list((Path(tempfile.gettempdir()) / f"burst-{os.getuid()}").glob(f"*/{run['run_id']}*")) == []
        assert "batch per replica 2, as planned by `burst up`" in proc.stderr
        cost = json.loads((Path(run["run_dir"]) / "cost.json").read_text())
        history = json.loads((Path(run["run_dir"]) / "history.json").read_text())
        assert cost["measured"]["epoch_s"] == pytest.approx(history[1]["seconds"], abs=1e-3)  # the epoch after tracing
        assert cost["predicted"]["events_per_epoch"] == history[1]["samples"] == 4
        expected = site["plan"]["epoch_s"] * 4 / site["plan"]["events"]
        assert cost["predicted"]["epoch_s"] == pytest.approx(expected, rel=1e-3)
        assert cost["epoch_error"] == pytest.approx(cost["measured"]["epoch_s"] / cost["predicted"]["epoch_s"] - 1, abs=1e-3)
        shown = burst("report", run["run_id"], home=home, cwd=tmp_path)
        assert f"epoch: predicted {cost['predicted']['epoch_s']:.1f} s, measured {cost['measured']['epoch_s']:.1f} s" in shown.stderr
        cal = burst("calibrate", run["run_id"], home=home, cwd=tmp_path)
        assert cal.stderr.startswith("V100: ") and "from 1 run(s)" in cal.stderr
        plan = json.loads(burst("plan", "--policy", str(policy), "--provider", "ray", "--batch-per-replica", "2", "--json",
                                home=home, cwd=tmp_path, check=False).stdout)
        ours = plan["candidates"][0]
        # the calibrated speed reproduces the measured epoch for the same shape (1 replica, batch 2)
        assert ours["est_epoch_s"] * 4 / site["plan"]["events"] == pytest.approx(cost["measured"]["epoch_s"], rel=0.02)
    finally:
        burst("down", "planned", home=home, cwd=tmp_path)
    assert marked(handle["cluster_id"])  # the on-prem cluster keeps running; burst only forgot it


def test_cloud_tunnel_is_opened_for_a_command_and_closed_after(cluster, home, tmp_path, monkeypatch):
    # `burst train` on GKE/AKS reaches the head with `kubectl port-forward`; a stand-in kubectl
    # forwards to this module's real Ray dashboard, so the tunnel's whole life is exercised. Like a
    # KubeRay head, that head requires its cluster's token (the one a cloud handle carries: test_driver).
    from urllib.parse import urlparse

    from burst import targets
    from burst.home.state import ClusterHandle
    from tests.fakes.pulumi_cli import RecordingPulumi

    local, _ = cluster
    monkeypatch.setenv("BURST_HOME", str(home))
    monkeypatch.setenv("PATH", f"{Path(__file__).resolve().parents[2] / 'fakes' / 'kube'}:{os.environ['PATH']}")  # the suite's one kubectl stand-in
    monkeypatch.setenv("FAKE_KUBECTL_TARGET", str(urlparse(local["dashboard_url"]).port))
    gke = targets.get("gcp")
    monkeypatch.setattr(gke, "missing_prerequisites", lambda: [])
    handle = ClusterHandle(name="gke", provider="gcp", cluster_id="x", state="running", storage_uri="gs://b", stack="gke-stack",
                           token_path=local["token_path"], outputs={"ray_namespace": "burst", "ray_head_service": "burst-head-svc"})
    fake = RecordingPulumi()
    fake.stacks.add("gke-stack")
    before = set((home).glob("kubeconfig-*"))
    monkeypatch.setattr(gke, "command", fake)
    with gke.reach(handle) as reachable:
        assert reachable.dashboard_url != local["dashboard_url"] and reachable.dashboard_url.startswith("http://127.0.0.1:")
        from burst.runtime.ray_head import auth_headers

        req = urllib.request.Request(reachable.dashboard_url + "/api/version", headers=auth_headers(handle))
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        with pytest.raises(urllib.error.HTTPError) as refused:  # the port-forward is no way around the token
            urllib.request.urlopen(reachable.dashboard_url + "/api/version", timeout=10)
        assert refused.value.code == 401
        (config,) = set(home.glob("kubeconfig-*")) - before
        assert oct(config.stat().st_mode & 0o777) == "0o600"
    assert not config.exists()  # the kubeconfig never outlives the command
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(reachable.dashboard_url + "/api/version", timeout=3)  # the tunnel is closed
    # the tunnel `burst monitor` holds to the head's metrics relay: the same port-forward, to the relay's port, with a
    # kubeconfig of its own in the monitor's directory (user-only); a TPU slice's is the same ssh as its dashboard's
    workdir = tmp_path / "monitor"
    workdir.mkdir()
    held = gke.forward_command(handle, 4321, 8266, workdir)
    assert "4321:8266" in held and "service/burst-head-svc" in held and f"--kubeconfig={workdir / 'kubeconfig'}" in held
    assert oct((workdir / "kubeconfig").stat().st_mode & 0o777) == "0o600"
    tpu = targets.get("gcp-tpu")
    monkeypatch.setattr(tpu, "missing_prerequisites", lambda: [])
    tpu_handle = handle.model_copy(update={"provider": "gcp-tpu", "outputs": {"tpu_name": "slice", "zone": "us-central1-a", "project": "p"}})
    held = tpu.forward_command(tpu_handle, 4321, 8266, workdir)
    assert held[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh"] and held[-2:] == ["-L", "4321:127.0.0.1:8266"] and "--worker=0" in held


def test_slurm_head_on_another_node_is_reached_through_the_login_host(cluster, home, tmp_path, monkeypatch):
    # The head of a Slurm cluster on another node is reached with `ssh -J login -L ...` to that
    # node's loopback; a stand-in ssh forwards to this module's real Ray dashboard.
    from burst import targets
    from burst.home.state import ClusterHandle
    from burst.runtime.ray_head import auth_headers
    from urllib.parse import urlparse

    local, _ = cluster
    log = tmp_path / "ssh.log"
    monkeypatch.setenv("PATH", f"{Path(__file__).resolve().parents[2] / 'fakes'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    site = {"name": "s", "accelerator": "V100", "gpus": 1, "usd_per_gpu_hour": 1.0, "scheduler": "slurm", "login": "login.example.org"}
    handle = ClusterHandle(name="far", provider="slurm", cluster_id="x", state="running", storage_uri="/s", token_path=local["token_path"],
                           outputs={"site": site, "job_id": "7", "head_host": "node17", "dashboard_port": urlparse(local["dashboard_url"]).port})
    with targets.get("slurm").reach(handle) as reachable:
        assert reachable.dashboard_url.startswith("http://127.0.0.1:") and reachable.dashboard_url != local["dashboard_url"]
        req = urllib.request.Request(reachable.dashboard_url + "/api/version", headers=auth_headers(handle))
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
    (call,) = log.read_text().splitlines()
    assert "-J login.example.org" in call and call.endswith(" node17") and f":127.0.0.1:{urlparse(local['dashboard_url']).port}" in call

    # `burst monitor` of such a cluster: its nodes scraped through the relay on its head, over an ssh forward held beside Prometheus
    import psutil

    from burst import monitor
    from burst.runtime.metrics_relay import RELAY_PORT

    monkeypatch.setenv("BURST_HOME", str(home))
    mon = monitor.start_relayed(handle, targets.get("slurm"))
    try:
        assert mon.relay_url and psutil.pid_exists(mon.forward_pid)
        relay_call = log.read_text().splitlines()[-1]
        assert "-J login.example.org" in relay_call and f"{mon.relay_url.rsplit(':', 1)[1]}:127.0.0.1:{RELAY_PORT}" in relay_call
        deadline, up = time.monotonic() + 90, []
        while time.monotonic() < deadline and not (up and all(r["value"][1] == "1" for r in up)):
            time.sleep(2)
            up = monitor.query(mon.url, 'up{job="ray"}')
        assert up and all(r["value"][1] == "1" for r in up), up
    finally:
        assert monitor.stop("far")
    assert not psutil.pid_exists(mon.pid) and not psutil.pid_exists(mon.forward_pid)


@slurm_site.needs(prometheus_missing())
def test_a_run_is_seen_live_in_prometheus_and_status_and_its_lost_head_is_reported_with_its_checkpoint(cluster, home, tmp_path):
    """While a run trains (oneDNN off, as its user asked): `burst monitor` runs a real Prometheus
    (loopback only, one per cluster) that answers the run's samples/s from Ray's metrics, and
    `burst status` shows its usage line.
    Then the head of its cluster dies (every process SIGKILLed, as in a machine crash): `burst
    train` says the cluster stopped, where the last checkpoint is and how to go on (exit 1, run
    LOST), and leaves nothing running. Going on from that checkpoint on another cluster, every
    epoch once, is the managed run's move in test_stores.py (a killed head, the same resume);
    `--resume` by hand onto another cluster is the budget stop's there. (One run for both: a
    second run that trained only to be seen cost the suite 30 to 50 CPU-s.)"""
    import psutil

    from burst.monitor import query
    from burst.runtime.ray_head import cluster_processes

    before = census.snapshot()
    doomed = json.loads(burst("up", "--provider", "local", "--name", "doomed", "--cpus", "1", "--json", home=home, cwd=tmp_path).stdout)
    mon = json.loads(burst("monitor", "doomed", "--json", home=home, cwd=tmp_path).stdout)
    listening = [c for c in psutil.net_connections("inet") if c.status == "LISTEN" and c.pid == mon["pid"]]
    assert listening and all(c.laddr.ip == "127.0.0.1" for c in listening)  # nothing beyond loopback
    assert json.loads(burst("monitor", "doomed", "--json", home=home, cwd=tmp_path).stdout)["pid"] == mon["pid"]  # one per cluster
    assert any(p.endswith("burst_grafana_dashboard.json") for p in mon["dashboards"])
    assert any(p.endswith("train_grafana_dashboard.json") for p in mon["dashboards"])  # Ray's own, from its session
    runs_before = _runs(home)
    # A user who turns oneDNN off explicitly gets it off in the workers (asked from their TensorFlow).
    train = popen_burst("train", "gan3d", "--cluster", "doomed", "--epochs", "50", *TRAIN_ARGS, home=home, cwd=tmp_path,
                        env_extra={"TF_ENABLE_ONEDNN_OPTS": "0"})
    run_id = _new_run_id(home, runs_before)
    start, _ = _wait_for_event(home, tmp_path, run_id, lambda e: e["type"] == "start")
    assert start["machine"]["onednn_enabled"] is False and start["machine"]["onednn_requested"] == "0"
    _wait_for_event(home, tmp_path, run_id, lambda e: e["type"] == "step")
    deadline, answer = time.monotonic() + 90, []
    while not answer:  # Ray exports a worker's gauge within seconds; Prometheus scrapes every 5 s
        assert time.monotonic() < deadline and train.poll() is None, "Prometheus never saw the run's samples/s"
        time.sleep(2)
        answer = query(mon["url"], f'sum(ray_burst_samples_per_second{{run="{run_id}"}})')
    assert float(answer[0]["value"][1]) > 0
    assert query(mon["url"], "ray_node_cpu_utilization")  # and the node's own figures
    _wait_for_event(home, tmp_path, run_id, lambda e: e["type"] == "usage")
    status = json.loads(burst("status", "--json", home=home, cwd=tmp_path).stdout)
    live = next(r for r in status["runs"] if r["run_id"] == run_id)["progress"]["usage"]  # the line `burst status` shows
    assert re.fullmatch(r"CPU \d+ %, memory \d+ %.* on 1 node\(s\)", live), live  # a local cluster has no price: no money said
    storage = Path(doomed["storage_uri"]) / "ray-train" / run_id
    deadline = time.monotonic() + 300
    while not list(storage.glob("checkpoint_*/gan3d.index")):
        assert time.monotonic() < deadline and train.poll() is None, "no checkpoint was written"
        time.sleep(0.3)
    for proc in cluster_processes(doomed["cluster_id"], doomed["temp_dir"]):
        try:
            proc.kill()
        except Exception:
            pass
    _, stderr = train.communicate(timeout=120)
    assert train.returncode == 1, stderr[-2000:]
    (error,) = [line for line in " ".join(stderr.split()).split("error: ")[1:]]
    # the platform's own word, told without the head: every process listed was killed; a worker Ray started
    # after the list was taken may still be dying when the controller looks, and then the head's two are named
    assert f"run {run_id} lost its cluster" in error, error
    assert re.search(r"the cluster stopped \((none of its processes is left on this machine"
                     r"|its head's gcs_server and raylet are gone on this machine)\)", error), error
    assert f"the run's last checkpoint is {storage}/checkpoint_" in error and f"--resume {run_id}` continues" in error
    record = json.loads((home / "runs" / f"{run_id}.json").read_text())
    assert record["state"] == "LOST" and f"--resume {run_id}" in record["message"]
    burst("down", "doomed", home=home, cwd=tmp_path)
    assert not psutil.pid_exists(mon["pid"]) or psutil.Process(mon["pid"]).status() == psutil.STATUS_ZOMBIE  # Prometheus went with it
    census.assert_none_left(before, exempt_roots=cluster[0]["pids"])


def test_float16_on_a_cpu_cluster_is_one_line_before_the_run_starts(cluster, home, tmp_path):
    """mixed_float16 is for NVIDIA GPUs (TensorFlow has no float16 CPU kernel for the GAN's 3D
    pooling): refused before the run is recorded or its data staged, not three Ray Train restarts later."""
    runs_before = {r["run_id"] for r in json.loads(burst("status", "--json", home=home, cwd=tmp_path).stdout)["runs"]}
    proc = burst("train", "gan3d", "--cluster", "t", "--epochs", "1", *TRAIN_ARGS, "--precision", "mixed_float16",
                 home=home, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    said = " ".join(proc.stderr.split())  # the console wraps long lines
    assert proc.stderr.count("error:") == 1, proc.stderr[-2000:]
    assert "error: --precision mixed_float16 needs NVIDIA GPUs, and cluster t has none; use mixed_bfloat16 or float32 (or auto)" in said, said
    assert {r["run_id"] for r in json.loads(burst("status", "--json", home=home, cwd=tmp_path).stdout)["runs"]} == runs_before  # none recorded
    assert not (tmp_path / "burst-runs").exists()


def test_run_never_takes_down_a_cluster_it_did_not_start(cluster, home, tmp_path):
    """`burst run --name t` with the user's cluster t running (or a second `burst run` beside a first;
    `burst tune` shares the path): refused in one line, and t still answers (it used to be trained on
    and then torn down)."""
    from burst.home.state import ClusterHandle
    from burst.targets import local

    handle, _ = cluster
    proc = burst("run", "gan3d", "--provider", "local", "--name", "t", "--epochs", "1", *TRAIN_ARGS, home=home, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "cluster 't' is already up, started by another command" in " ".join(proc.stderr.split())
    assert local.is_alive(ClusterHandle.model_validate(json.loads((home / "clusters" / "t.json").read_text())))
    assert marked(handle["cluster_id"])


def test_a_head_whose_gcs_server_is_killed_is_known_gone_at_once_while_a_live_one_is_not(cluster, home, tmp_path):
    """The platform's own word, without the head: this machine's processes. A cluster whose GCS was
    killed (its raylet, agents and dashboard lingering for a minute) is gone now, in words that say
    which process went; the cluster beside it, alive, is not. Nothing is left after `down`."""
    from burst.home.state import ClusterHandle
    from burst.targets import get

    handle, _ = cluster
    before = census.snapshot()
    made = json.loads(burst("up", "--provider", "local", "--name", "dead", "--cpus", "1", "--json", home=home, cwd=tmp_path).stdout)
    try:
        local = get("local")
        dead, alive = ClusterHandle.model_validate(made), ClusterHandle.model_validate(handle)
        assert not local.is_gone(dead) and not local.is_gone(alive)
        (gcs,) = [p for p in ray_head.cluster_processes(dead.cluster_id, dead.temp_dir) if p.name() == "gcs_server"]
        gcs.kill()
        gcs.wait(timeout=10)
        killed = time.monotonic()
        assert local.is_gone(dead), "a head without its GCS is not judged gone"
        judged = time.monotonic() - killed
        assert "its head's gcs_server is gone on this machine" in local.stopped_reason(dead)
        assert [p for p in ray_head.cluster_processes(dead.cluster_id, dead.temp_dir)]  # the rest lingers: not "no process left"
        assert not local.is_gone(alive)
        print(f"gcs_server killed: judged gone in {judged:.2f} s")
    finally:
        burst("down", "dead", home=home, cwd=tmp_path)
    census.assert_none_left(before, exempt_roots=handle["pids"])
