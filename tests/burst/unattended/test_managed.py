"""Managed runs on real targets: a controller process carries the run with no CLI attached
(``burst.controller``). The budget stops a detached run; an idle cluster takes itself down. (Killed
controllers started again, and a run moved off a cancelled Slurm allocation: the group's server
test, tests/burst/server/test_server.py, where the server dies with them.) Every test ends with a
process census."""

import json

import pytest

from tests.support import census
from tests.support.cli_runs import TRAIN, burst, finished, handed_over, managed, wait_until

pytestmark = pytest.mark.slow

@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


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
    # $1 a second and $200: the guard asks for a stop when the cluster is 125 s old (75 s reserve)
    # and stops the job hard 60 s later if its workers have not checkpointed by then. Here the
    # first step comes about 30 s after the cluster does; a CI machine under load took longer than
    # the 105 s a $120 budget left, and the 2-core EPYC beside the suite 127 s (a $150 budget asked
    # at 75 s), and got the (correct) hard stop without a final checkpoint.
    before = census.snapshot()
    policy = tmp_path / "priced.yaml"
    policy.write_text("budget_usd: 200\nproviders: [local]\nlocal: {usd_per_hour: 3600}\n")
    up = burst("up", "--provider", "local", "--name", "det", "--cpus", "2", "--policy", str(policy), home=home, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    # 500 epochs: more than any machine trains before the budget's stop (a 2-core Xeon, idle, finished 50 of them first)
    proc = burst("train", "gan3d", "--cluster", "det", "--detach", "--epochs", "500", "--steps", "8", *TRAIN, home=home, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "now enforces the budget of run" in " ".join(proc.stderr.split())
    (run_file,) = list((home / "runs").glob("gan3d-*.json"))
    run = finished(home, run_file.stem)
    assert run["state"] == "STOPPED_BUDGET" and not (home / "clusters" / "det.json").exists()
    (attempt,) = managed(home, run_file.stem)["attempts"]
    assert attempt["how"] == "stopped by the budget guard" and attempt["cost_usd"] < 200
    log = (home / "managed" / f"{run_file.stem}.log").read_text()
    assert "did not stop in time" not in log, log
    stopped = json.loads((home / "clusters" / "det" / "storage" / "runs" / run_file.stem / "checkpoint" / "stopped.json").read_text())
    assert stopped["reason"] == "request" and stopped["step"] % 5 == 0  # the workers agreed on a step and checkpointed it
    census.assert_none_left(before)
