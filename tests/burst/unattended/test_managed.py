"""Managed runs on real targets: a controller process carries the run with no CLI attached
(``burst.controller``). A killed controller is started again by ``burst status``, and a Slurm
allocation cancelled under the run then moves it to this machine; the budget stops a detached run; an idle
cluster takes itself down. Every test ends with a process census."""

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.support import census, slurm_site
from tests.support.cli_runs import TRAIN, burst, done_epochs, finished, handed_over, history_of, managed, wait_until

pytestmark = pytest.mark.slow

@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def site():
    why = slurm_site.missing()
    slurm_site.needs(why)  # fails under BURST_REQUIRE_SITE_TESTS=1 when the site tools are missing
    if why:
        pytest.skip(why)
    started = slurm_site.start()
    yield started
    slurm_site.stop(started)


def test_killed_controllers_are_revived_by_status_and_move_the_run_from_a_cancelled_slurm_job_training_every_epoch_once(site, home, tmp_path):
    """A run on a Slurm allocation outlives its controller twice. Killed while the job trains, it is
    started again by `burst status` and follows the same attempt (the job goes on, no epoch is
    repeated). Killed again, and the site cancels the allocation while no controller runs: the
    next `burst status` starts one that finds the job ended (the scheduler says so; its head
    cannot be reached) and moves the run to this machine, from the newest checkpoint. Every
    epoch trains once across both targets and three controllers."""
    before = census.snapshot()
    policy = site.policy(tmp_path / "site.yaml")
    proc = burst("run", "gan3d", "--provider", "slurm", "--name", "mv", "--policy", str(policy), "--hours", "1", "--managed", "--detach",
                 "--epochs", "4", "--steps", "8", "--checkpoint-every", "3", *TRAIN, home=home, cwd=tmp_path, env=site.env)
    run_id = handed_over(proc)  # the CLI is gone: only the controller follows the run from here

    def kill_the_controller() -> int:
        pid = managed(home, run_id)["controller_pid"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 30, "the kill")
        return pid

    def revived_by_status(killed: int) -> None:
        status = burst("status", "--json", home=home, cwd=tmp_path, env=site.env)
        assert json.loads(status.stdout)["revived"] == [run_id]
        assert managed(home, run_id)["controller_pid"] != killed

    wait_until(lambda: done_epochs(home, run_id) >= 1, 300, "an epoch")  # the controller's record: it looks every 2 s
    revived_by_status(kill_the_controller())  # the run has no follower until then; its job trains on
    wait_until(lambda: done_epochs(home, run_id) >= 2, 300, "an epoch recorded by the revived controller")
    assert done_epochs(home, run_id) < 4
    killed = kill_the_controller()
    (job,) = [j.split("|")[0] for j in site.jobs()]
    cancelled_at = time.time()
    site.slurm("scancel", job)  # the site takes the allocation back while no controller runs
    revived_by_status(killed)

    run = finished(home, run_id)
    assert run["state"] == "SUCCEEDED", run
    assert history_of(run) == [1, 2, 3, 4]  # every epoch once, across both targets
    lines = (home / "managed" / f"{run_id}.log").read_text()
    assert lines.count("controller restarted") == 2 and lines.count("following attempt 1") == 2  # each took the attempt up, not a new one
    m = managed(home, run_id)
    attempts = m["attempts"]
    assert [(a["provider"], a["cluster"]) for a in attempts] == [("slurm", "mv"), ("local", "mv-2")]
    assert attempts[0]["how"].startswith("lost: Slurm job") and "CANCELLED" in attempts[0]["how"]
    assert m["avoid"] == ["slurm"]
    # resumed from the newest checkpoint: the second attempt's first epoch event is epoch 2 or 3, never 1 again
    job_log = (Path(run["run_dir"]) / "job.log").read_text()
    starts = [json.loads(line.split("BURST_EVENT ", 1)[1]) for line in job_log.splitlines() if '"type": "start"' in line]
    assert starts and all(s["resumed"] and s["epoch"] >= 1 for s in starts)

    cost = json.loads((Path(run["run_dir"]) / "cost.json").read_text())
    assert [a["provider"] for a in cost["attempts"]] == ["slurm", "local"]
    assert cost["attempts"][0]["cost_usd"] > 0 and cost["cost_usd"] >= cost["attempts"][0]["cost_usd"]
    assert 0 < cost["recovery_s"] < 300 and attempts[1]["first_step"] - cancelled_at < 300

    status = burst("status", "--json", home=home, cwd=tmp_path, env=site.env)
    moves = json.loads(status.stdout)["moves"][run_id]
    assert any("lost after" in line and "slurm cluster mv" in line for line in moves)
    assert any("moving run" in line for line in moves) and any("run resumed on local cluster mv-2" in line for line in moves)
    print(burst("status", home=home, cwd=tmp_path, env=site.env).stdout)  # for the record (pytest -s)
    print(json.dumps(cost, indent=1))
    print(f"scancel to the loss seen: {attempts[0]['ended'] - cancelled_at:.1f} s; loss seen to the first step on local: "
          f"{cost['recovery_s']:.1f} s; scancel to the first step on local: {attempts[1]['first_step'] - cancelled_at:.1f} s")
    logs = burst("logs", run_id, home=home, cwd=tmp_path, env=site.env)
    assert "managed: " in logs.stdout and "lost after" in logs.stdout
    assert json.loads(status.stdout)["clusters"] == []  # both clusters taken down by the controller
    assert site.jobs() == []
    census.assert_none_left(before)


def test_a_managed_run_the_policy_cannot_afford_ends_stopped_by_its_budget_and_leaves_no_cluster(home, tmp_path):
    # $1 a second on this machine and a $76 budget: the guard keeps 75 s in reserve (checkpoint,
    # tear-down), so once the cluster is a second old the controller may not start the job.
    # (A budget reached while training: test_a_plain_detached_run_is_stopped_... below.)
    before = census.snapshot()
    policy = tmp_path / "priced.yaml"
    policy.write_text("budget_usd: 76\nproviders: [local]\nlocal: {usd_per_hour: 3600}\n")
    proc = burst("run", "gan3d", "--provider", "local", "--name", "bud", "--cpus", "1", "--policy", str(policy), "--managed", "--detach",
                 "--epochs", "50", *TRAIN, home=home, cwd=tmp_path)
    run_id = handed_over(proc)
    run = finished(home, run_id)
    assert run["state"] == "STOPPED_BUDGET" and "the budget of $76.00 is (nearly) spent" in run["message"], run
    assert not (home / "clusters" / "bud.json").exists()  # the controller took down what it started
    census.assert_none_left(before)


def test_an_idle_cluster_is_taken_down_by_its_watcher(home, tmp_path):
    before = census.snapshot()
    up = burst("up", "--provider", "local", "--name", "idle", "--cpus", "1", "--idle-minutes", "0.1", "--json", home=home, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    handle = json.loads(up.stdout)
    assert handle["idle_minutes"] == 0.1 and handle["watcher_pid"]
    assert "taken down after 0.1 idle minute(s)" in " ".join(up.stderr.split())
    wait_until(lambda: not (home / "clusters" / "idle.json").exists(), 90, "the idle cluster to go")
    log = (home / "managed" / "cluster-idle.log").read_text()
    assert "taken down by its watcher: no job for 0.1 minute(s)" in log
    census.assert_none_left(before)


def test_a_plain_detached_run_is_stopped_by_the_budget_once_the_cli_has_returned(home, tmp_path):
    # $1 a second and $150: the guard asks for a stop when the cluster is 75 s old (75 s reserve)
    # and stops the job hard 60 s later if its workers have not checkpointed by then. Here the
    # first step comes about 30 s after the cluster does; a CI machine under load took longer than
    # the 105 s a $120 budget left, and got the (correct) hard stop without a final checkpoint.
    before = census.snapshot()
    policy = tmp_path / "priced.yaml"
    policy.write_text("budget_usd: 150\nproviders: [local]\nlocal: {usd_per_hour: 3600}\n")
    up = burst("up", "--provider", "local", "--name", "det", "--cpus", "2", "--policy", str(policy), home=home, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    proc = burst("train", "gan3d", "--cluster", "det", "--detach", "--epochs", "50", "--steps", "8", *TRAIN, home=home, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "now enforces the budget of run" in " ".join(proc.stderr.split())
    (run_file,) = list((home / "runs").glob("gan3d-*.json"))
    run = finished(home, run_file.stem)
    assert run["state"] == "STOPPED_BUDGET" and not (home / "clusters" / "det.json").exists()
    (attempt,) = managed(home, run_file.stem)["attempts"]
    assert attempt["how"] == "stopped by the budget guard" and attempt["cost_usd"] < 150
    log = (home / "managed" / f"{run_file.stem}.log").read_text()
    assert "did not stop in time" not in log, log
    stopped = json.loads((home / "clusters" / "det" / "storage" / "runs" / run_file.stem / "checkpoint" / "stopped.json").read_text())
    assert stopped["reason"] == "request" and stopped["step"] % 5 == 0  # the workers agreed on a step and checkpointed it
    census.assert_none_left(before)
