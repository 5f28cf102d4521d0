"""The budget guard: stop a run and tear its cluster down before the policy's budget is spent.

Cost accrues from the cluster's creation at its hourly price. The guard acts while there is
still a reserve left: the time to take a final checkpoint and to tear the cluster down, both
billed too. Stopping is a request the workers see at their next step check (a ``STOP`` file in
the run's directory on the cluster storage); they agree on the step, save a checkpoint and end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import BurstError
from ..home.state import ClusterHandle

CHECKPOINT_RESERVE_S = 60.0  # a final checkpoint of the paper preset, written to cluster storage
LOCAL_TEARDOWN_S = 15.0


def now() -> float:
    """The guard's clock (one seam, so that its decisions can be tested without waiting)."""
    return time.time()


def teardown_seconds(provider: str) -> float:
    from ..placement.estimate import provider_facts

    facts = provider_facts().get(provider)
    return facts.teardown_minutes * 60 if facts else LOCAL_TEARDOWN_S


def run_budget(asked: Optional[float], *, handle: Optional[ClusterHandle] = None, policy=None) -> Optional[float]:
    """The budget a run is held to, resolved in one place: the one asked for (``--budget``), else
    its cluster's (the policy's when the cluster was started), else the policy's; None: no limit."""
    if asked is not None:
        return asked
    if handle is not None and handle.budget_usd is not None:
        return handle.budget_usd
    return policy.budget_usd if policy is not None else None


@dataclass
class BudgetGuard:
    handle: ClusterHandle
    budget_usd: float
    reserve_s: float
    requested_at: Optional[float] = None
    stop_written: bool = False
    forced: bool = False

    @classmethod
    def for_cluster(cls, handle: ClusterHandle, budget_usd: Optional[float]) -> Optional["BudgetGuard"]:
        budget = run_budget(budget_usd, handle=handle)
        if budget is None or handle.hourly_usd <= 0:
            return None
        return cls(handle, budget, CHECKPOINT_RESERVE_S + teardown_seconds(handle.provider))

    def accrued(self, at: Optional[float] = None) -> float:
        at = now() if at is None else at
        return self.handle.hourly_usd * max(0.0, at - self.handle.created) / 3600

    def must_stop(self, at: Optional[float] = None) -> bool:
        at = now() if at is None else at
        return self.accrued(at + self.reserve_s) >= self.budget_usd

    def check_can_start(self) -> None:
        if self.must_stop():
            raise BurstError(f"the budget of ${self.budget_usd:,.2f} is (nearly) spent: ${self.accrued():,.2f} accrued on cluster "
                             f"{self.handle.name!r} at ${self.handle.hourly_usd:,.2f}/h; raise budget_usd or `burst down {self.handle.name}`", exit_code=3)

    def request_stop(self, run_id: str) -> Optional[str]:
        """Write the stop request on the run's store; None once written, else why it could not be (a
        503, expired credentials, a store being recreated): the guard tries again at its next look."""
        from ..runtime.job import BUDGET_REQUEST, RunFiles

        if self.requested_at is None:
            self.requested_at = now()  # the workers' reserve counts from the first try: a write that keeps failing ends in a hard stop
        try:
            RunFiles(self.handle.storage_uri, run_id).ask_to_stop(BUDGET_REQUEST)
        except Exception as exc:  # noqa: BLE001 - whatever the store's SDK raised: the guard must outlive it
            return _said(exc)
        self.stop_written = True
        return None

    def overdue(self, at: Optional[float] = None) -> bool:
        """The workers did not stop within the reserve: the job must be stopped hard."""
        at = now() if at is None else at
        return self.requested_at is not None and not self.forced and at - self.requested_at > CHECKPOINT_RESERVE_S

    def poll(self, run_id: str, stop_job: Callable[[], None]) -> Optional[str]:
        """One look at the budget while a run goes on; returns what the user should be told.

        First it asks the workers to stop (they agree on a step and checkpoint); a request the store
        refused is written again at every look; if they have not stopped within the checkpoint
        reserve, it stops the job hard, once (again at the next look if the job API refused). No
        error of the store or the job API escapes: a guard that died would leave the run unguarded.
        """
        if self.requested_at is None and self.must_stop():
            failed = self.request_stop(run_id)
            spent = f"${self.accrued():,.2f} of ${self.budget_usd:,.2f} spent"
            if failed:
                return (f"{spent}; the stop request could not be written on {self.handle.storage_uri} ({failed}): tried again at every "
                        f"look, and the job is stopped hard if its workers have not stopped in {CHECKPOINT_RESERVE_S:.0f} s")
            return f"{spent}; taking a final checkpoint and stopping (reserve {self.reserve_s:.0f} s for checkpoint and tear-down)"
        if self.requested_at is not None and not self.stop_written and not self.forced and not self.overdue():
            if self.request_stop(run_id) is None:
                return "the stop request is written now; taking a final checkpoint and stopping"
        if self.overdue():
            try:
                stop_job()
            except Exception as exc:  # noqa: BLE001 - the job API refused: asked again at the next look
                return f"the workers did not stop in time and stopping the job failed ({_said(exc)}); trying again"
            self.forced = True
            return "the workers did not stop in time; stopping the job"
        return None


def _said(exc: BaseException) -> str:
    """An error of a store's SDK or the job API in one line: its class and the line that says why."""
    from ..unattended.backoff import reason_of

    return f"{exc.__class__.__name__}: {reason_of(exc)}"
