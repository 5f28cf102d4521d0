"""The Slurm target against a real slurmctld/slurmd on this machine (``tests/support/slurm_site.py``)."""

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support import census, slurm_site
from tests.support.cli_runs import wait_until
from tests.support.ray_auth import assert_refuses_strangers

pytestmark = [pytest.mark.slow, slurm_site.needs(slurm_site.missing())]

TRAIN = ["--synthetic", "200", "--val-events", "100", "--batch-per-replica", "8"]


@pytest.fixture(scope="module")
def site():
    started = slurm_site.start()
    yield started
    slurm_site.stop(started)


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


def burst(site, *args, home, cwd, timeout=600, env_extra=None):
    env = {**site.env, "BURST_HOME": str(home), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def one_line_error(proc) -> str:
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


def run_record(home, run_id) -> dict:
    return json.loads((home / "runs" / f"{run_id}.json").read_text())


def test_the_queue_wait_is_one_clock_s_difference_when_the_site_keeps_another_time_zone(site, home, tmp_path):
    """A laptop in New York (UTC-5) asks a site whose login node keeps India's time (UTC+5:30): Slurm
    words "to start at" in the site's local time. Compared with the laptop's clock that was 10.5 h of
    phantom wait, and the plan burst to a cloud for nothing; the idle site starts the job now."""
    import os
    import shutil

    wrappers = tmp_path / "site-in-india"
    wrappers.mkdir()
    for tool in ("sbatch", "date"):  # the site's commands keep the site's zone
        (wrappers / tool).write_text(f"#!/bin/sh\nTZ=Asia/Kolkata exec {shutil.which(tool, path=site.env['PATH'])} \"$@\"\n")
        (wrappers / tool).chmod(0o755)
    policy = site.policy(tmp_path / "slurm.yaml")
    proc = burst(site, "plan", "--policy", str(policy), "--json", home=home, cwd=tmp_path,
                 env_extra={"TZ": "America/New_York", "PATH": f"{wrappers}{os.pathsep}{site.env['PATH']}"})
    assert proc.returncode in (0, 1), proc.stderr
    plan = json.loads(proc.stdout)
    onprem = next(c for c in plan["candidates"] if c["target"] == "onprem")
    assert onprem["queue_source"] == "slurm" and onprem["queue_wait_h"] < 0.05, onprem
    assert plan["choice"]["target"] == "onprem"


def test_the_plan_takes_the_on_prem_wait_from_slurm_and_bursts_when_the_queue_is_full(site, home, tmp_path):
    policy = site.policy(tmp_path / "slurm.yaml")

    def plan() -> dict:
        proc = burst(site, "plan", "--policy", str(policy), "--json", home=home, cwd=tmp_path)
        assert proc.returncode in (0, 1), proc.stderr
        return json.loads(proc.stdout)

    idle = plan()
    onprem = next(c for c in idle["candidates"] if c["target"] == "onprem")
    assert onprem["queue_source"] == "slurm" and onprem["queue_wait_h"] < 0.05
    assert idle["choice"]["target"] == "onprem" and idle["why"].startswith("on-prem first")
    blocker = site.slurm("sbatch", "--parsable", "--exclusive", "-N1", "--time=120", "--job-name=blocker", f"--output={tmp_path / 'blocker.out'}",
                         "--wrap", "sleep 3000").stdout.strip()  # its log in the test's directory, not the repository
    try:
        deadline = time.time() + 30
        while "RUNNING" not in site.slurm("squeue", "-h", "-j", blocker, "-o", "%T").stdout:
            assert time.time() < deadline, "the blocker did not start"
            time.sleep(0.5)
        full = plan()
        onprem = next(c for c in full["candidates"] if c["target"] == "onprem")
        assert onprem["queue_source"] == "slurm" and onprem["queue_wait_h"] > 1.5  # the blocker's two hours, less what has run
        assert full["choice"]["target"] != "onprem"
        assert "queue wait" in full["why"] and "over 0.5 h" in full["why"]
    finally:
        site.slurm("scancel", blocker)
    deadline = time.time() + 60
    while blocker in " ".join(site.jobs()):
        assert time.time() < deadline
        time.sleep(0.5)
    again = plan()
    assert again["choice"]["target"] == "onprem"


def test_a_job_cancelled_by_the_site_is_reported_lost_with_how_to_go_on(site, home, tmp_path):
    before = census.snapshot()
    policy = site.policy(tmp_path / "slurm.yaml")
    # the allocation's scratch in a directory of this test's (the job inherits TMPDIR; short, for Ray's
    # sockets): the cancelled run's driver, killed with the allocation, leaves its scratch there
    job_tmp = tempfile.mkdtemp(prefix="sc", dir="/tmp")
    up = burst(site, "up", "--provider", "slurm", "--name", "first", "--policy", str(policy), "--hours", "1", "--wait", home=home, cwd=tmp_path,
               env_extra={"TMPDIR": job_tmp})
    assert up.returncode == 0, up.stderr
    handle = json.loads((home / "clusters" / "first.json").read_text())  # the head inside the allocation takes no job without its token
    assert_refuses_strangers(handle["dashboard_url"], Path(handle["token_path"]).read_text().strip())
    env = {**site.env, "BURST_HOME": str(home), "TMPDIR": job_tmp}
    train = subprocess.Popen([sys.executable, "-m", "burst.cli", "train", "gan3d", "--cluster", "first", "--epochs", "3", "--steps", "6", *TRAIN],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    run_id = None
    deadline = time.time() + 300
    while run_id is None or not list((home / "clusters" / "first" / "storage" / "ray-train" / run_id).glob("checkpoint_*")):
        assert time.time() < deadline and train.poll() is None, "no checkpoint was written"
        runs = list((home / "runs").glob("gan3d-*.json")) if (home / "runs").exists() else []
        run_id = runs[0].stem if runs else None
        time.sleep(0.5)
    (job_id,) = [j.split("|")[0] for j in site.jobs()]
    site.slurm("scancel", job_id)  # the site takes the allocation back in the middle of epoch 2
    _, stderr = train.communicate(timeout=120)
    assert train.returncode == 1
    (error,) = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert f"run {run_id} lost its cluster" in error and f"Slurm job {job_id}" in error and "CANCELLED" in error, stderr[-2000:]
    status = json.loads(burst(site, "status", "--json", home=home, cwd=tmp_path).stdout)
    (cluster,) = status["clusters"]
    assert cluster["state"].startswith("cancelled")
    (run,) = status["runs"]
    assert run["state"] == "LOST" and "CANCELLED" in run["message"] and f"--resume {run_id}" in run["message"]
    assert burst(site, "down", "first", home=home, cwd=tmp_path).returncode == 0
    # Going on from the checkpoint on a new target: by hand (test_local_cluster.py, a lost head) or by
    # itself (test_managed.py: a managed run moves from a cancelled allocation to this machine).
    assert site.jobs() == []
    census.assert_none_left(before)
    shutil.rmtree(job_tmp, ignore_errors=True)


def test_a_node_that_fails_ends_its_allocation_for_good_and_slurm_s_word_is_a_loss_at_once(site, home, tmp_path, monkeypatch):
    """Issue 86: a node that stops answering is set DOWN by slurmctld, which ends the jobs on it
    (scontrol(1)) and, by default, requeues a batch job: the allocation came back later as a new Ray
    head nobody followed, and the controller waited out its blind grace (the benchmark's first run:
    10 min). burst's job asks for --no-requeue: the allocation ends NODE_FAIL, and the target says
    so from Slurm's queue without the head."""
    from burst import targets
    from burst.home.state import ClusterHandle

    before = census.snapshot()
    policy = site.policy(tmp_path / "slurm.yaml")
    up = burst(site, "up", "--provider", "slurm", "--name", "node", "--policy", str(policy), "--hours", "1", "--wait", home=home, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    handle = ClusterHandle(**json.loads((home / "clusters" / "node.json").read_text()))
    monkeypatch.setenv("BURST_HOME", str(home))
    monkeypatch.setenv("SLURM_CONF", str(site.conf))
    slurm = targets.get("slurm")
    assert not slurm.is_gone(handle)
    try:
        site.slurm("scontrol", "update", f"NodeName={site.host}", "State=DOWN", "Reason=node-lost-in-a-test")
        wait_until(lambda: slurm.is_gone(handle), 60, "Slurm to end the allocation on the failed node")
        assert slurm.stopped_reason(handle).startswith(f"Slurm job {handle.outputs['job_id']} NODE_FAIL"), slurm.stopped_reason(handle)
        time.sleep(3)  # a requeued job would be back in the queue by now (PENDING, BeginTime)
        assert site.jobs() == []
    finally:
        site.slurm("scontrol", "update", f"NodeName={site.host}", "State=RESUME", check=False)
        wait_until(lambda: site.slurm("sinfo", "-h", "-o", "%T").stdout.strip() == "idle", 60, "the node to be idle again")
    assert burst(site, "down", "node", home=home, cwd=tmp_path).returncode == 0
    census.assert_none_left(before)


def test_a_run_that_reaches_its_walltime_checkpoints_on_the_notice_and_loses_under_one_interval(site, home, tmp_path):
    """The allocation's walltime ends while the run trains: Slurm signals the batch script before the
    end, the workers checkpoint where they are, and the run ends LOST with at most a checkpoint
    interval untrained. The walltime asked for is long, and the test brings its end near (`scontrol
    update TimeLimit`, as a site's admin may) once the run has trained to its first checkpoint: a
    fixed two minutes ended before the first step on a slow, loaded machine (Ray, TensorFlow and Ray
    Train starting in the allocation), which tested nothing of the notice."""
    from burst.runtime.training import latest_checkpoint, progress_in

    before = census.snapshot()
    policy = site.policy(tmp_path / "slurm.yaml", notice_seconds=30)  # Slurm signals the batch script 30 s (+ its own slack) before the end
    up = burst(site, "up", "--provider", "slurm", "--name", "short", "--policy", str(policy), "--hours", "0.25", "--wait",
               home=home, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    (job,) = [j.split("|")[0] for j in site.jobs()]
    interval = 25  # steps between checkpoints inside an epoch
    train = subprocess.Popen([sys.executable, "-m", "burst.cli", "train", "gan3d", "--cluster", "short", "--epochs", "100", "--steps", "60",
                              "--checkpoint-every", str(interval), *TRAIN], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**site.env, "BURST_HOME": str(home)}, cwd=tmp_path)
    try:
        storage = home / "clusters" / "short" / "storage" / "ray-train"
        wait_until(lambda: list(storage.glob("*/checkpoint_*")) or train.poll() is not None, 400, "the run's first checkpoint", poll=1.0)
        assert train.poll() is None, train.communicate()[1][-2000:]
        ran = _minutes(site.slurm("squeue", "-h", "-j", job, "-o", "%M").stdout.strip())
        site.slurm("scontrol", "update", f"JobId={job}", f"TimeLimit={ran + 2}")  # the end 1 to 2 minutes away
        _, stderr = train.communicate(timeout=300)
    finally:
        if train.poll() is None:
            train.kill()
            train.communicate()
    proc = subprocess.CompletedProcess(train.args, train.returncode, "", stderr)
    try:
        error = one_line_error(proc)
        assert "checkpointed at epoch" in error and "notice: Slurm job" in error, proc.stderr[-2000:]
        (run_file,) = list((home / "runs").glob("gan3d-*.json"))
        run = json.loads(run_file.read_text())
        assert run["state"] == "LOST" and "--resume" in run["message"]
        checkpoints = sorted((storage / run_file.stem).glob("checkpoint_*"))
        newest = latest_checkpoint(checkpoints)
        assert newest is not None  # complete: history, index and data files
        epochs, step = progress_in(newest)
        stopped = json.loads((home / "clusters" / "short" / "storage" / "runs" / run_file.stem / "checkpoint" / "stopped.json").read_text())
        assert stopped["reason"].startswith("notice") and (stopped["epoch"] - 1, stopped["step"]) == (epochs, step)
        # what the job trained after its newest checkpoint: nothing; at most a checkpoint interval in any case
        log = (home / "clusters" / "short" / f"slurm-{job}.out")
        assert (stopped["epoch"] - 1) * 60 + stopped["step"] - (epochs * 60 + step) < interval
    finally:  # a job left running would fail the module's next tests, which look at the site's queue
        down = burst(site, "down", "short", home=home, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert site.jobs() == []
    assert log.parent.exists()
    census.assert_none_left(before)


def _minutes(elapsed: str) -> int:
    """Whole minutes of a Slurm elapsed time (``M:SS``, ``H:MM:SS`` or ``D-HH:MM:SS``)."""
    days, _, clock = elapsed.rpartition("-")
    parts = [int(x) for x in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, _seconds = parts
    return (int(days or 0) * 24 + hours) * 60 + minutes


def test_bad_slurm_requests_are_one_line_and_submit_nothing(site, home, tmp_path):
    policy = site.policy(tmp_path / "slurm.yaml")
    cases = [
        (["--partition", "nope"], {}, "partition 'nope' does not exist on this Slurm cluster (partitions: cpu)"),
        (["--nodes", "5"], {}, "5 nodes is more than partition cpu has (1)"),
        ([], {"PATH": str(Path(sys.executable).parent)}, "no Slurm tools here: `sinfo` is not on PATH"),
    ]
    import re

    from burst.runtime.ray_head import free_port

    dead = tmp_path / "dead.conf"  # the same site, its controller on a port where nothing listens
    dead.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={free_port()}", site.conf.read_text()))
    cases.append(([], {"SLURM_CONF": str(dead)}, "the Slurm controller does not answer"))
    for args, env, fragment in cases:
        proc = burst(site, "up", "--provider", "slurm", "--name", "bad", "--policy", str(policy), *args, home=home, cwd=tmp_path,
                     env_extra=env, timeout=120)
        assert fragment in one_line_error(proc), proc.stderr
        assert not list(home.glob("clusters/*.json")) and site.jobs() == []


def test_two_ups_of_one_name_submit_one_job(site, home, tmp_path):
    """The check for an existing cluster and the submission are one step: the second `up` finds the
    first's job (or says it is being submitted), never submits a second allocation that nothing tears down."""
    import shutil

    policy = site.policy(tmp_path / "slurm.yaml")
    slow = tmp_path / "slow-bin"  # a controller slow to answer `sinfo` holds both `up`s between their check and their submission
    slow.mkdir()
    (slow / "sinfo").write_text(f"#!/bin/sh\nsleep 2\nexec {shutil.which('sinfo')} \"$@\"\n")
    (slow / "sinfo").chmod(0o755)
    env = {**site.env, "BURST_HOME": str(home), "PATH": f"{slow}:{site.env['PATH']}"}
    args = [sys.executable, "-m", "burst.cli", "up", "--provider", "slurm", "--name", "twin", "--policy", str(policy), "--hours", "1"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    try:
        assert len(site.jobs()) == 1, (site.jobs(), [o[1][-1500:] for o in outs])
        for proc, (_, err) in zip(procs, outs):
            assert proc.returncode == 0 or "is being submitted by PID" in err, err[-1500:]
            assert "Traceback" not in err
    finally:
        assert burst(site, "down", "twin", home=home, cwd=tmp_path).returncode == 0
    assert site.jobs() == []


def test_an_idle_allocation_ends_itself_while_the_submitting_machine_sleeps(site, home, tmp_path):
    """`burst up --provider slurm --idle-minutes M`: before, only the watcher on the submitting
    machine enforced the idle stop. Here the watcher is SIGSTOPped (a laptop with its lid closed)
    and the keeper inside the allocation cancels its own job after M minutes with no job; the
    walltime stays the lease (Slurm's own). Woken, the watcher finds the allocation ended (the
    scheduler says so; the head does not answer) and takes down what is left, its record included:
    nothing is left to cancel, and `burst down` has no cluster of that name."""
    import os
    import signal

    before = census.snapshot()
    policy = site.policy(tmp_path / "slurm.yaml")
    up = burst(site, "up", "--provider", "slurm", "--name", "idle", "--policy", str(policy), "--hours", "1", "--idle-minutes", "0.25",
               "--wait", home=home, cwd=tmp_path, env_extra={"BURST_KEEPER_POLL_S": "1"})
    assert up.returncode == 0, up.stderr[-3000:]
    handle = json.loads((home / "clusters" / "idle.json").read_text())
    job_id = handle["outputs"]["job_id"]
    os.kill(handle["watcher_pid"], signal.SIGSTOP)  # the laptop sleeps
    try:
        deadline = time.time() + 120
        while site.jobs():
            assert time.time() < deadline, f"the idle allocation was not ended: {site.jobs()}"
            time.sleep(1)
        out = (Path(handle["outputs"]["cluster_dir"]) / f"slurm-{job_id}.out").read_text()
        assert "keeper: ending the cluster: no job for 0.25 minute(s)" in out and "keeper: cluster ended" in out, out[-2000:]
        assert psutil_status(handle["watcher_pid"]) == "stopped"  # the watcher slept through it
    finally:
        os.kill(handle["watcher_pid"], signal.SIGCONT)  # the laptop wakes
    deadline = time.time() + 60
    while (home / "clusters" / "idle.json").exists():
        assert time.time() < deadline, "the woken watcher did not take down what the keeper left"
        time.sleep(0.5)
    log = (home / "managed" / "cluster-idle.log").read_text()
    assert "cluster idle taken down by its watcher: its keeper ended its Ray cluster" in log, log
    down = burst(site, "down", "idle", home=home, cwd=tmp_path)
    assert down.returncode == 2 and "no cluster named 'idle'" in down.stderr
    assert site.jobs() == []
    census.assert_none_left(before)


def psutil_status(pid: int) -> str:
    import psutil

    return psutil.Process(pid).status()
