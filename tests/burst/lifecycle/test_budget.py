"""The budget guard's decisions, driven by an injected clock (no waiting, no timed assertions)."""

import pytest


from burst.lifecycle import budget
from burst.lifecycle.budget import CHECKPOINT_RESERVE_S, BudgetGuard
from burst.errors import BurstError
from burst.runtime.job import RunFiles
from burst.home.state import ClusterHandle

CREATED = 1_000_000.0


@pytest.fixture
def clock(monkeypatch):
    """A settable clock standing in for the guard's."""
    t = {"now": CREATED}
    monkeypatch.setattr(budget, "now", lambda: t["now"])
    return t


@pytest.fixture
def guard(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    handle = ClusterHandle(name="c", provider="local", cluster_id="x", state="running", storage_uri=str(tmp_path / "storage"),
                           hourly_usd=36.0, created=CREATED)  # one cent a second
    g = BudgetGuard.for_cluster(handle, budget_usd=2.0)
    assert g.reserve_s == CHECKPOINT_RESERVE_S + budget.LOCAL_TEARDOWN_S  # 75 s kept for the checkpoint and tear-down
    return g


def test_no_guard_without_a_budget_or_a_price():
    free = ClusterHandle(name="c", provider="local", cluster_id="x", state="running", storage_uri="/s", hourly_usd=0.0)
    assert BudgetGuard.for_cluster(free, 10.0) is None
    priced = free.model_copy(update={"hourly_usd": 1.0})
    assert BudgetGuard.for_cluster(priced, None) is None


def test_stop_is_requested_while_the_reserve_still_fits_in_the_budget(guard, clock, tmp_path):
    stop_file = tmp_path / "storage" / "runs" / "r1" / "STOP"
    assert str(stop_file) == RunFiles(guard.handle.storage_uri, "r1").stop_request
    hard_stops = []
    clock["now"] = CREATED + 124  # $1.24 spent; $1.99 once the 75 s reserve is added
    assert guard.poll("r1", stop_job=lambda: hard_stops.append(1)) is None and not stop_file.exists()
    clock["now"] = CREATED + 125  # $1.25 + reserve $0.75 = the budget: ask the workers to stop now
    message = guard.poll("r1", stop_job=lambda: hard_stops.append(1))
    assert "$1.25 of $2.00 spent" in message and stop_file.read_text() == "budget\n"
    assert guard.requested_at == CREATED + 125 and hard_stops == []
    clock["now"] += CHECKPOINT_RESERVE_S  # the workers still have their checkpoint reserve
    assert guard.poll("r1", stop_job=lambda: hard_stops.append(1)) is None and hard_stops == []


def test_workers_that_ignore_the_stop_request_are_stopped_hard_once(guard, clock):
    hard_stops = []
    clock["now"] = CREATED + 125  # the first poll at which the guard trips
    assert "taking a final checkpoint" in guard.poll("r1", stop_job=lambda: hard_stops.append(clock["now"]))
    clock["now"] += CHECKPOINT_RESERVE_S + 1  # no `stopped` event arrived within the reserve
    assert "did not stop in time" in guard.poll("r1", stop_job=lambda: hard_stops.append(clock["now"]))
    for _ in range(3):  # later polls (the job is ending) never stop it again
        clock["now"] += 10
        assert guard.poll("r1", stop_job=lambda: hard_stops.append(clock["now"])) is None
    assert hard_stops == [CREATED + 125 + CHECKPOINT_RESERVE_S + 1]
    # Cost at the hard stop plus the tear-down still fits the budget, up to the one-second poll.
    assert guard.accrued(hard_stops[0] + budget.LOCAL_TEARDOWN_S) <= guard.budget_usd + 36 / 3600


def test_a_run_cannot_start_once_the_budget_is_nearly_spent(guard, clock):
    clock["now"] = CREATED + 100
    guard.check_can_start()
    clock["now"] = CREATED + 126
    with pytest.raises(BurstError, match=r"budget of \$2.00 is \(nearly\) spent") as info:
        guard.check_can_start()
    assert info.value.exit_code == 3


def test_a_budget_stopped_run_resumed_on_its_store_is_submitted_without_the_stop_request(tmp_path, monkeypatch):
    """The guard's stop request (and a bad-data verdict) stay on the run's store after the stop; a
    resume there would stop again at its first step, so they are removed before the job is sent.
    (The stop and a resume on another cloud's store run end to end in tests/burst/runtime/test_stores.py.)"""
    from burst import targets
    from burst.home import state
    from burst.home.state import RunRecord
    from burst.lifecycle import runs
    from burst.lifecycle.runs import TrainRequest
    from burst.client import jobs
    from burst.runtime import storage
    from tests.support.job_submission import caught_submissions

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    sent = caught_submissions(monkeypatch)
    store = str(tmp_path / "storage")
    handle = ClusterHandle(name="c", provider="local", cluster_id="x", state="running", storage_uri=store, outputs={"cpus": 2})
    earlier = RunRecord(run_id="r1", workload="gan3d", cluster="c", provider="local", state="STOPPED_BUDGET", storage_uri=store,
                        config={"workload": "gan3d", "epochs": 3, "synthetic": 200, "workers": 1})
    state.save(earlier)
    files = RunFiles(store, "r1")
    storage.write_text(files.stop_request, "budget\n")
    storage.write_text(files.data_error, "bad input data: x\n")
    real_submit, at_submit = jobs.submit, {}

    def submit(*args, **kwargs):  # what the store holds when the job is sent
        at_submit.update(stop=storage.exists(files.stop_request), error=storage.exists(files.data_error))
        return real_submit(*args, **kwargs)

    monkeypatch.setattr(jobs, "submit", submit)
    request = runs._resumed(TrainRequest.of(cluster="c", resume="r1", detach=True), earlier)
    run = runs._train_on(targets.get("local"), handle, request, runs.Reporter(), earlier)
    assert sent["submission_id"] and run.attempts == 2
    assert at_submit == {"stop": False, "error": False}
