"""Processes that act while no CLI is attached: a managed run's controller (here) and a cluster's
watcher (``burst.unattended.watcher``); a managed run's records and how it is handed over are ``burst.unattended.managed``'s.

``burst run --managed`` and ``burst train --managed`` hand a run to a controller, a process of its
own (detached from the terminal; ``burst status`` starts it again if it died) that

* follows the run on its cluster;
* when the cluster is lost (preempted, cancelled, out of walltime, stocked out) plans again without
  the target that failed, under the policy's ``recovery`` keys, brings a cluster up there, stages
  the newest complete checkpoint and resumes the run from it;
* enforces the budget (over every attempt) and the cluster's lease itself;
* collects the results, and takes down every cluster it started.

Every move is one line in ``managed/<run>.log`` (``burst status`` and ``burst logs`` show them) and
every attempt, with its cost, is in the run's ``cost.json``.

A watcher (``burst up --idle-minutes``, and every cloud cluster with a lease) takes its cluster down
when no job has run on it for that long, or when its lease ends.

    python -m burst.controller run RUN_ID
    python -m burst.controller cluster NAME
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from .home import state
from . import targets
from .unattended.backoff import Backoff, reason_of
from .unattended import recovery, run_lock, timeline
from .errors import BurstError
from .home.records import read_json, write_json_atomic
from .home.state import ClusterHandle, RunRecord
from .unattended.managed import FINAL_STATES, Attempt, ManagedRun, managed_file, say_move, take_lock, load, save
from .targets.base import Reporter
from .monitor import stop as stop_monitor

if TYPE_CHECKING:
    from .placement.policy import Policy
    from .placement.request import PlacementRequest

POLL_S = 2.0           # a controller's look at its run
REOPEN_AFTER_S = 20.0  # a job API that does not answer this long: the tunnel is opened again
REOPEN_WAITS_S = (2.0, 5.0, 10.0, 20.0, 30.0)  # between tries to open the way to a cluster not seen
BLIND_SAY_EVERY_S = 60.0  # while blind, the log says so at most this often
DOWN_RETRY_S = (30.0, 120.0)  # a failed take-down is tried again after these waits


# --------------------------------------------------------------------------- a look that may hang


class PlatformSaysGone(Exception):
    """The target's platform said the cluster is gone while a look through its job API was awaited."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def asked_beside_platform(question: Callable[[], object], target, handle: ClusterHandle) -> object:
    """``question``'s answer (a look through the job API), asking the platform every ``POLL_S``
    while it is awaited: a dashboard whose GCS was killed takes a request and answers only when its
    own call to the GCS times out (a 500 after 31 s a request here, two requests a look; the request's
    own limit is 120 s), so a head the
    platform says is gone raises ``PlatformSaysGone`` at once instead. A look that answers within
    ``POLL_S`` asks the platform nothing; an abandoned look ends on its own (a daemon thread)."""
    import threading

    box: dict = {}
    done = threading.Event()

    def ask() -> None:
        try:
            box["answer"] = question()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=ask, name="burst-look", daemon=True).start()
    while not done.wait(POLL_S):
        try:
            gone = target.is_gone(handle)
        except Exception:  # noqa: BLE001 - a platform that cannot be asked is no verdict
            gone = False
        if gone:
            raise PlatformSaysGone(target.stopped_reason(handle))
    if "error" in box:
        raise box["error"]
    return box["answer"]


# --------------------------------------------------------------------------- the controller


class _Said(Reporter):
    """What ``up`` and ``train`` say goes into the controller's own output."""

    def say(self, message: str) -> None:
        print(message, flush=True)


class Controller:
    def __init__(self, m: ManagedRun):
        self.m = m
        self.policy = self._policy()
        self.kept_up: set[str] = set()  # clusters whose storage holds checkpoints that could not be copied off: never taken down here
        self.seen_at: Optional[float] = None  # when the last look reached the followed attempt's job (wall clock, for the move timeline)

    def _policy(self) -> "Policy":
        from .placement import policy as policy_mod

        return policy_mod.load(Path(self.m.policy) if self.m.policy else None)

    def say(self, text: str) -> None:
        say_move(self.m.run_id, text)

    def save(self) -> None:
        save(self.m)

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        started_before = bool(self.m.attempts)
        self.m.controller_pid = os.getpid()
        self.save()
        if started_before:
            self.say(f"controller restarted (PID {os.getpid()}); following attempt {self.m.attempts[-1].number}")
        try:
            while self.m.phase != "finished":
                attempt = self.m.attempts[-1] if self.m.attempts else None
                if attempt is None or attempt.ended is not None:
                    self.start_attempt()
                else:
                    self.follow_attempt(attempt)
        except BurstError as exc:
            self.finish("STOPPED_BUDGET" if exc.exit_code == 3 else "FAILED", str(exc))
        except Exception as exc:  # the traceback stays in the controller's output
            traceback.print_exc()
            self.finish("FAILED", f"the controller failed ({exc.__class__.__name__}: {exc}); see {managed_file(self.m.run_id, '.out')}")

    # ------------------------------------------------------------------ starting an attempt

    def start_attempt(self) -> None:
        from . import api
        from .lifecycle import runs

        n = len(self.m.attempts) + 1
        name = self.m.cluster if n == 1 else f"{self.m.cluster[:36]}-{n}"
        attempt = Attempt(number=n, cluster=name, own=self.m.own_first if n == 1 else True)
        self.m.attempts.append(attempt)
        self.m.phase = "starting"
        self.save()
        if attempt.own:
            if n == 1:
                ask, policy = self.m.first_request(), self.m.policy
            else:
                try:
                    ask, policy = self.moved_request()
                except BurstError as exc:
                    self.end_attempt(attempt, "no target left")
                    self.finish("LOST", f"no target left to move to: {exc}")
                    return
            provider = ask.provider
            self.say(f"attempt {n}: starting cluster {name} on {provider}"
                     + (f" {ask.region}" if ask.region else ""))  # what it avoids: said when the last one was lost
            try:
                handle = api.up_for(ask, name, policy=policy, hours=self.m.placement.get("hours"), wait=True, report=_Said()).handle
            except BurstError as exc:
                self.end_attempt(attempt, f"could not start: {exc}")
                self.say(f"attempt {n}: could not start a cluster on {provider}: {exc}")
                if n == 1 or not self.can_move():
                    self.finish("FAILED" if n == 1 else "LOST", f"attempt {n} could not start a cluster: {exc}")
                    return
                self.m.avoid.append(f"{provider}:{ask.region}" if ask.region else str(provider))  # a stock-out: elsewhere next
                self.save()
                return
        else:
            handle = runs.cluster(name)
        self.note_cluster(attempt, handle)
        self.submit(attempt, handle)

    def note_cluster(self, attempt: Attempt, handle: ClusterHandle) -> None:
        """What the attempt's cluster is: where, at what price, since when (its cost counts from then)."""
        attempt.provider, attempt.region, attempt.preemptible = handle.provider, handle.region, handle.preemptible
        attempt.hourly_usd, attempt.cluster_created, attempt.cluster_id = handle.hourly_usd, handle.created, handle.cluster_id
        attempt.cluster_up = attempt.cluster_up or time.time()
        self.save()

    def submit(self, attempt: Attempt, handle: ClusterHandle) -> None:
        """The run's job on the attempt's cluster: from the start, or from the newest checkpoint after a move."""
        from .lifecycle import runs

        n, name = attempt.number, attempt.cluster
        request = runs.TrainRequest(**self.m.request).model_copy(update={"cluster": name, "detach": True,
                                                                         "resume": self.m.run_id if n > 1 else None})
        resume_from = runs.stage_checkpoint(runs.load_run(self.m.run_id), handle) if n > 1 else None
        spent = self.m.spent() - attempt.cost_until(time.time())  # the attempts before this one (the guard counts this cluster itself)
        budget = None if self.m.budget_usd is None else self.m.budget_usd - spent
        if budget is not None and budget <= 0:
            self.finish("STOPPED_BUDGET", f"the budget of ${self.m.budget_usd:,.2f} is spent (${spent:,.2f} over {n - 1} attempt(s))")
            return
        runs.train(request.model_copy(update={"budget_usd": budget}) if budget is not None else request, _Said(), resume_from=resume_from)
        attempt.submitted = time.time()
        self.m.phase = "running"
        self.save()
        where = f"{handle.provider} cluster {name}" + (f" ({handle.region})" if handle.region else "")
        self.say(f"attempt {n}: run {'resumed' if n > 1 else 'submitted'} on {where} at ${handle.hourly_usd:,.2f}/h"
                 + (f" from {resume_from.describe()}" if resume_from else ""))

    def can_move(self) -> bool:
        return self.m.recover and len(self.m.attempts) <= self.policy.recovery.max_restarts

    def strategy(self) -> recovery.NextTarget:
        """The policy's ``recovery.strategy``."""
        return recovery.strategy(self.policy.recovery.strategy)

    def allowed(self) -> list[str]:
        """The providers recovery may move the run to."""
        return list(self.policy.recovery.allow_providers or self.policy.providers)

    def moved_request(self) -> tuple["PlacementRequest", "Policy"]:
        """The placement request and policy for the next attempt: the first request less what bound
        it to the target lost (``PlacementRequest.elsewhere``: its sizing and limits go on), planned
        among the providers recovery allows, without the targets lost so far (or, under
        ``recovery.strategy: same_first``, the target just lost once more), on-demand once enough
        preemptible clusters were lost; pinned to the plan's choice, so that a failure to start it
        is avoided next."""
        from .home import staged
        from .lifecycle.placing import place

        rules = self.policy.recovery
        allowed = self.allowed()
        lost_spot = sum(1 for a in self.m.attempts[:-1] if a.preemptible and (a.how or "").startswith(("lost", "could not start")))
        on_demand = rules.fallback_on_demand_after is not None and lost_spot >= rules.fallback_on_demand_after
        policy = self.policy.model_copy(update={"providers": allowed, "preemptible": "never" if on_demand else self.policy.preemptible})
        first = self.m.first_request()
        moving = first.elsewhere().but(workload=first.workload or self.m.request.get("workload"),  # sized for the run's own workload
                                       staged_on=staged.holding(self.m.request.get("data")))
        moving = self.strategy().next_request(moving, self.m.attempts[:-1], allowed, self.m.avoid, on_demand)
        chosen, _ = place(moving, policy, _Said())
        moved = moving.but(provider=chosen.provider, avoid=())  # pinned: what it avoided has been planned around
        if targets.get(chosen.provider).kind == "cloud":
            moved = moved.but(region=chosen.region, accelerator=chosen.accelerator, gpus=chosen.count, preemptible=chosen.preemptible)
        return moved, policy

    # ------------------------------------------------------------------ following an attempt

    def follow_attempt(self, attempt: Attempt) -> None:
        from .lifecycle.runs import load_run
        from .client import jobs
        from .lifecycle.budget import BudgetGuard, CHECKPOINT_RESERVE_S, teardown_seconds

        self.seen_at = None
        handle = state.load(ClusterHandle, attempt.cluster)
        record = load_run(self.m.run_id)
        if handle is None and attempt.own and attempt.cluster_id is None and attempt.submitted is None:
            # the controller before this one died before the attempt's cluster was recorded, and a cluster is
            # recorded before anything of it starts: nothing was made, nothing was spent; the attempt starts again
            self.m.attempts.pop()
            self.save()
            self.say(f"attempt {attempt.number}: its controller stopped before cluster {attempt.cluster} was made; starting it again")
            return None
        if handle is None:
            return self.lost(attempt, "its cluster record is gone (taken down)")
        if not attempt.owns(handle):  # taken down while no controller ran, and a cluster of that name brought up since
            return self.lost(attempt, f"it was taken down (cluster {handle.name!r} is now another cluster, {handle.cluster_id})")
        target = targets.get(handle.provider)
        if attempt.cluster_id is None:  # a controller before this one died while the cluster started: it is this attempt's
            self.note_cluster(attempt, handle)
        if attempt.submitted is None:  # a controller before this one stopped between up and submit
            if record.cluster == attempt.cluster and record.attempts == attempt.number and record.job_id:
                attempt.submitted = record.created  # it did submit
                self.save()
            elif target.is_alive(handle):
                return self.submit(attempt, handle)
            elif handle.state == "starting" and not state.starter_alive(handle):
                adopted = target.adopt(handle, _Said())  # its starter died creating it: wait for that to finish, never destroy under it
                if adopted is not None:
                    return self.submit(attempt, adopted)
                return self.lost(attempt, "it did not come up after its starter died")
            else:
                return self.lost(attempt, target.stopped_reason(handle))
        remaining = None if self.m.budget_usd is None else self.m.budget_usd - (self.m.spent() - attempt.cost_until(time.time()))
        guard = BudgetGuard.for_cluster(handle, remaining) if remaining is not None else None
        reserve = CHECKPOINT_RESERVE_S + teardown_seconds(handle.provider)
        rules = self.policy.recovery
        lease_stop = lease_said = False
        # Blindness is counted in time this machine was awake (time.monotonic stops while a laptop
        # sleeps, on Linux and macOS alike): a wake after an hour asleep is not an hour of blindness.
        seen = time.monotonic()  # the last look that reached the run's job
        reopen, said_blind = Backoff(REOPEN_WAITS_S), 0.0
        while True:
            why_blind = None
            opened = time.monotonic()  # nothing is judged lost through a way to the cluster opened before the grace had passed
            try:
                with target.reach(handle) as reachable:
                    client = jobs.client(reachable)
                    while True:
                        now = time.time()
                        # a lease a keeper ends (a cloud's, your own Kubernetes'): a final checkpoint before the keeper acts;
                        # a scheduler's walltime is not the run's end: its notice moves the run
                        if target.keeper_ends_lease and handle.expires is not None and now > handle.expires - reserve and not lease_stop:
                            failed = request_stop(handle, self.m.run_id)
                            if failed is None:
                                self.say(f"attempt {attempt.number}: the lease of cluster {handle.name} ends; taking a final checkpoint and stopping")
                                lease_stop = True
                            elif not lease_said:  # tried again at every look; said once
                                self.say(f"attempt {attempt.number}: the lease of cluster {handle.name} ends, and the stop request could "
                                         f"not be written on {handle.storage_uri} ({failed}); trying again at every look")
                                lease_said = True
                        fresh = state.load(ClusterHandle, handle.name)
                        if fresh is None or fresh.cluster_id != handle.cluster_id:
                            return self.lost(attempt, "it was taken down")
                        if not target.is_alive(fresh):
                            if self.past_lease(target, fresh):  # its lease is over: the cluster ended itself
                                return self.lease_over(attempt, fresh, record)
                            if target.is_gone(fresh):  # the platform's own word (its processes, its scheduler): lost now, no grace
                                return self.gone(attempt, fresh, record)
                            if time.monotonic() - seen >= rules.loss_grace_seconds:  # a busy head misses looks; a dead one misses them all
                                if opened - seen >= rules.loss_grace_seconds:
                                    return self.lost(attempt, target.stopped_reason(fresh))
                                why_blind = target.stopped_reason(fresh)
                                break  # judged only through a way opened anew (a stale tunnel after a wake says "dead" too)
                            time.sleep(POLL_S)
                            continue
                        try:
                            status, log = asked_beside_platform(
                                lambda: (jobs.job_status(client, record.job_id), client.get_job_logs(record.job_id)), target, fresh)
                        except PlatformSaysGone as gone:  # the look hung on a head whose GCS is gone: the platform's word, now
                            return self.gone(attempt, fresh, record, gone.why)
                        except (ConnectionError, RuntimeError, OSError) as exc:
                            why_blind = f"{exc.__class__.__name__}: {str(exc)[:160]}"
                            if target.is_gone(fresh):  # a job API that does not answer, and the platform says the cluster ended
                                return self.gone(attempt, fresh, record)
                            if self.blind_budget(guard, record, attempt, handle):
                                return
                            if time.monotonic() - seen >= REOPEN_AFTER_S:
                                break  # the tunnel may be what broke: open a new one
                            time.sleep(POLL_S)
                            continue
                        seen, self.seen_at = time.monotonic(), time.time()
                        reopen.reset()
                        tracker = self.track(attempt, record, log)
                        if guard is not None:
                            said = guard.poll(record.run_id, stop_job=lambda: client.stop_job(record.job_id))
                            if said:
                                self.say(f"budget guard: {said}")
                        if status in jobs.TERMINAL:
                            return self.job_ended(attempt, handle, reachable, record, status, tracker,
                                                  budget=guard is not None and guard.requested_at is not None, lease=lease_stop)
                        time.sleep(POLL_S)
            except BurstError as exc:  # a tunnel that would not open, or broke
                why_blind = str(exc)
            fresh = state.load(ClusterHandle, handle.name)
            if fresh is None or fresh.cluster_id != handle.cluster_id:
                return self.lost(attempt, "it was taken down")
            if self.past_lease(target, fresh):  # not seen after its lease's end: its keeper ended it
                return self.lease_over(attempt, fresh, record)
            if target.is_gone(fresh):  # not a way to it that broke: the cluster ended (an allocation cancelled while no controller ran)
                return self.gone(attempt, fresh, record)
            blind_s = time.monotonic() - seen
            grace_s = rules.blind_grace_minutes * 60
            if blind_s >= grace_s and opened - seen >= grace_s:  # the way failed again after the grace: lost
                return self.lost(attempt, f"not seen for {blind_s / 60:.1f} min ({why_blind})")
            if self.blind_budget(guard, record, attempt, handle):
                return
            if blind_s >= grace_s:
                continue  # the grace passed on a way opened before it ended: open a new one now, then judge
            wait = reopen.next_wait()
            if time.time() - said_blind >= BLIND_SAY_EVERY_S:
                said_blind = time.time()
                self.say(f"attempt {attempt.number}: cluster {handle.name} not seen for {blind_s:.0f} s ({why_blind}); "
                         f"reopening the way to it (again every {REOPEN_WAITS_S[-1]:g} s at most, said once a minute)")
            time.sleep(wait)

    @staticmethod
    def past_lease(target, handle: ClusterHandle) -> bool:
        """The cluster's lease has ended and a keeper ends it (a scheduler's walltime is not a lease: its notice moves the run)."""
        return (target.keeper_ends_lease or not target.is_scheduler) and handle.expires is not None and time.time() >= handle.expires

    def gone(self, attempt: Attempt, handle: ClusterHandle, record: RunRecord, why: str | None = None) -> None:
        """The platform says the cluster is gone: past its lease, its keeper ended it (the run stops
        there, as a sleeping laptop's controller finds it on waking); before, it was lost (the run moves)."""
        if self.past_lease(targets.get(handle.provider), handle):
            return self.lease_over(attempt, handle, record)
        return self.lost(attempt, why or targets.get(handle.provider).stopped_reason(handle))

    def lease_over(self, attempt: Attempt, handle: ClusterHandle, record: RunRecord) -> None:
        """The cluster's lease is over and it does not answer: it ended itself (its keeper) while this
        controller could not act (a sleeping laptop). Not a loss to move from: the run stops there."""
        why = targets.get(handle.provider).stopped_reason(handle)
        self.end_attempt(attempt, f"stopped at the end of its lease ({why})")
        if self.keep_checkpoint(handle, record):
            self.take_down(handle)
        self.finish("STOPPED", f"the lease of cluster {handle.name!r} ended ({why}); `burst train --resume {record.run_id}` goes on "
                               f"from its last checkpoint")

    def blind_budget(self, guard, record: RunRecord, attempt: Attempt, handle: ClusterHandle) -> bool:
        """The budget while the job cannot be asked: charged by wall time; a stop is asked on the
        store (the workers read it there); once overdue, the cluster is taken down. True: the attempt ended."""
        if guard is None:
            return False
        said = guard.poll(record.run_id, stop_job=lambda: None)
        if said and not guard.forced:
            self.say(f"budget guard (cluster not seen): {said}")
        if guard.forced:
            self.end_attempt(attempt, "stopped by the budget guard (the cluster could not be reached)")
            if self.keep_checkpoint(handle, record):
                self.take_down(handle)
            self.finish("STOPPED_BUDGET", f"stopped by the budget guard while cluster {handle.name!r} could not be reached: "
                                          f"${self.m.spent():,.2f} of ${self.m.budget_usd:,.2f} spent; cluster torn down")
            return True
        return False

    def track(self, attempt: Attempt, record: RunRecord, log: str):
        from .lifecycle.runs import replay_log

        tracker = replay_log(record, log)
        progress = tracker.snapshot() if tracker.last_epoch is not None else record.progress
        if attempt.first_step is None and tracker.first_step_time is not None:
            attempt.first_step = tracker.first_step_time
            self.say(f"attempt {attempt.number}: first training step {attempt.first_step - attempt.started:.0f} s after the attempt began")
            self.save()
        if progress != record.progress:
            record.progress = progress
            with state.locked():
                state.save(record)
        return tracker

    def job_ended(self, attempt: Attempt, handle: ClusterHandle, reachable: ClusterHandle, record: RunRecord, status: str, tracker, *,
                  budget: bool, lease: bool) -> None:
        from .lifecycle import runs

        stopped = tracker.stopped
        how = ending(status, stopped, budget=budget, lease=lease)
        if how == "notice":
            return self.lost(attempt, f"it gave notice ({stopped.reason}); checkpointed at epoch {stopped.epoch} step {stopped.step}")
        if how in ("budget", "lease"):
            self.end_attempt(attempt, "stopped by the budget guard" if budget else "stopped at the end of its lease")
            if self.keep_checkpoint(handle, record):  # the final one: `--resume` goes on from it
                self.take_down(handle)  # the budget or the lease stops whoever started it
            where = f"epoch {stopped.epoch} step {stopped.step}" if stopped else "its last checkpoint"
            if budget:
                self.finish("STOPPED_BUDGET", f"stopped by the budget guard at {where}: ${self.m.spent():,.2f} of ${self.m.budget_usd:,.2f} "
                                              f"spent over {len(self.m.attempts)} attempt(s); cluster {handle.name!r} torn down")
            else:
                self.finish("STOPPED", f"stopped at {where}: the lease of cluster {handle.name!r} ended; `burst train --resume {record.run_id}` goes on")
            return
        if how == "finished":
            record = runs.collect_finished(runs.load_run(record.run_id), reachable)
            self.end_attempt(attempt, "finished")
            if attempt.own or budget or lease:  # a stop asked for too late: the run is done, and the stop still takes the cluster down
                self.take_down(handle)
            self.write_cost(record)
            self.finish(record.state, record.message or "trained, validated and collected")
            return
        target = targets.get(handle.provider)
        if not target.is_alive(handle):
            return self.lost(attempt, target.stopped_reason(handle))
        self.end_attempt(attempt, f"job {status.lower()}")
        self.keep_log(reachable, record)  # before the cluster goes: what says why it failed
        if attempt.own:
            self.take_down(handle)
        self.finish("FAILED", tracker.failure or f"job ended {status}; see `burst logs {record.run_id}`")

    def keep_log(self, reachable: ClusterHandle, record: RunRecord) -> None:
        """The job's log, saved with the run on this machine (``burst logs RUN`` reads it there once
        the cluster is gone; a run that succeeded keeps it with its results)."""
        from .lifecycle.rundir import RunDirectory
        from .client import jobs

        try:
            log = jobs.client(reachable).get_job_logs(record.job_id)
        except (BurstError, ConnectionError, RuntimeError, OSError) as exc:  # the run still ends, and its cluster goes
            self.say(f"the job's log could not be kept: {exc.__class__.__name__}: {str(exc)[:160]}")
            return
        RunDirectory(record.run_id).save_log(log)

    # ------------------------------------------------------------------ endings

    def end_attempt(self, attempt: Attempt, how: str) -> None:
        attempt.ended = time.time()
        if self.seen_at is not None and (attempt.submitted or 0) <= self.seen_at:  # this controller's last look that reached the job
            attempt.last_seen = self.seen_at
        attempt.how = how
        attempt.cost_usd = round(attempt.cost_until(attempt.ended), 6)
        self.save()

    def lost(self, attempt: Attempt, why: str) -> None:
        from .lifecycle.runs import last_checkpoint, load_run

        self.end_attempt(attempt, f"lost: {why}")
        record = load_run(self.m.run_id)
        record.state = "LOST"
        record.message = f"cluster {attempt.cluster} lost ({why})"
        with state.locked():
            state.save(record)
        minutes = (attempt.ended - attempt.started) / 60
        self.say(f"attempt {attempt.number} on {attempt.provider} cluster {attempt.cluster} lost after {minutes:.1f} min ({why}); "
                 f"cost ${attempt.cost_usd:,.4f}; newest checkpoint {last_checkpoint(record.storage_uri, record.run_id) if record.storage_uri else 'none'}")
        handle = state.load(ClusterHandle, attempt.cluster)
        if not attempt.owns(handle):  # gone, or someone's cluster of the same name: nothing of it is touched
            handle = None
        if handle is not None:
            self.stop_old_job(handle, record)  # never two copies of the run training at once
        if handle is not None and attempt.own and self.keep_checkpoint(handle, record):  # before its storage goes: the next attempt resumes from it
            self.take_down(handle)
        lost_on = targets.get(attempt.provider) if attempt.provider in targets.PROVIDERS else None
        if lost_on is not None and lost_on.kind != "local":  # this machine lost a Ray head, not the machine: a new cluster here is a move like any other
            self.m.avoid.append(f"{attempt.provider}:{attempt.region}" if lost_on.kind == "cloud" and attempt.region else attempt.provider)
        self.save()
        if not self.can_move():
            why_not = "recovery is off" if not self.m.recover else f"{self.policy.recovery.max_restarts} move(s) allowed by recovery.max_restarts"
            self.finish("LOST", f"cluster {attempt.cluster} lost ({why}); not moved: {why_not}; `burst train --resume {self.m.run_id}` goes on")
            return
        if self.strategy().start_again(self.m.attempts, self.allowed()) is not None:
            self.say(f"moving run {self.m.run_id}: starting {attempt.provider}" + (f" {attempt.region}" if attempt.region else "")
                     + f" once more before moving on (recovery.strategy: {self.strategy().name})")
            return
        self.say(f"moving run {self.m.run_id}: planning again" + (f" without {', '.join(self.m.avoid)}" if self.m.avoid else ""))

    def keep_checkpoint(self, handle: ClusterHandle, record: RunRecord) -> bool:
        """Copy the run's newest checkpoint to this machine when ``handle``'s storage goes with it;
        False when it could not be read (a claim whose head pod is gone): that storage must stay."""
        from .lifecycle.runs import keep_checkpoint

        if targets.get(handle.provider).storage_outlives(handle):
            return True
        try:
            kept = keep_checkpoint(record)
        except (BurstError, OSError) as exc:
            self.say(f"the run's checkpoints on cluster {handle.name}'s storage could not be read ({reason_of(exc)}): the cluster and its "
                     f"storage are kept, not taken down; `burst down {handle.name}` deletes them once you no longer need them")
            self.kept_up.add(handle.cluster_id)
            return False
        self.say(f"newest checkpoint kept on this machine at {kept} before cluster {handle.name} and its storage go" if kept else
                 f"cluster {handle.name} and its storage go with no complete checkpoint of the run")
        return True

    def take_down(self, handle: ClusterHandle) -> None:
        """Down, tried again with backoff on any error (a Pulumi CommandError too: a controller that
        dies of it leaves the cluster up); what still fails is said, and the cluster's watcher and
        keeper remain to end it."""
        retry = Backoff(DOWN_RETRY_S)
        while True:
            try:
                targets.get(handle.provider).down(handle, _Said())
                stop_monitor(handle.name)  # its Prometheus and the tunnel it scrapes through go with it
                self.say(f"cluster {handle.name} ({handle.provider}) taken down")
                return
            except Exception as exc:  # noqa: BLE001 - whatever the target raised
                if retry.exhausted:
                    self.say(f"error: taking down cluster {handle.name} failed {retry.failures + 1} time(s), last: {reason_of(exc)}; "
                             f"run `burst down {handle.name}`")
                    return
                wait = retry.next_wait()
                self.say(f"error: taking down cluster {handle.name}: {reason_of(exc)}; trying again in {wait:g} s")
                time.sleep(wait)
                fresh = state.load(ClusterHandle, handle.name)
                if fresh is None or fresh.cluster_id != handle.cluster_id:
                    return  # gone meanwhile (a `burst down`, its watcher)
                handle = fresh

    def stop_old_job(self, handle: ClusterHandle, record: RunRecord) -> None:
        """A lost attempt's job, stopped where its cluster can still be reached (an attached on-prem Ray
        cluster burst does not take down would otherwise train on beside the next attempt)."""
        from .client import jobs

        if not record.job_id:
            return
        target = targets.get(handle.provider)

        def stop() -> None:
            with target.reach(handle) as reachable:
                jobs.client(reachable).stop_job(record.job_id)

        try:  # beside the platform: a dashboard whose GCS is gone holds each request 31 s, and the move waited two of them
            asked_beside_platform(stop, target, handle)
            self.say(f"the lost attempt's job {record.job_id} on cluster {handle.name} was stopped")
        except PlatformSaysGone:
            pass  # the platform says the cluster is gone: its down (next) ends whatever of it lingers
        except Exception:  # noqa: BLE001 - unreachable: it is lost after all
            pass

    def write_cost(self, record: RunRecord) -> None:
        """cost.json counts every attempt: where it ran, how it ended, what it cost."""
        if not record.run_dir:
            return
        path = Path(record.run_dir) / "cost.json"
        cost = read_json(path, f"run {record.run_id}'s cost record") if path.exists() else {}
        cost["attempts"] = [a.model_dump(mode="json") for a in self.m.attempts]
        cost["cost_usd"] = round(self.m.spent(), 4)
        cost["hours"] = round(sum(((a.ended or time.time()) - (a.cluster_created or a.started)) for a in self.m.attempts) / 3600, 5)
        first = next((a for a in self.m.attempts if a.first_step is not None and a.number > 1), None)
        if first is not None:
            lost = self.m.attempts[first.number - 2]
            cost["recovery_s"] = round(first.first_step - lost.ended, 1)  # from the loss to the first step on the new target
        cost["moves"] = timeline.records(self.m)
        write_json_atomic(path, cost, indent=1)
        timeline.add_to_report(Path(record.run_dir) / "report" / "report.html", self.m)

    def finish(self, final: str, message: str) -> None:
        from .lifecycle.runs import load_run

        record = load_run(self.m.run_id)
        record.state = final if final in FINAL_STATES else "FAILED"
        record.message = message
        record.finished = record.finished or time.time()
        with state.locked():
            state.save(record)
        for attempt in self.m.attempts:  # nothing the run started outlives it
            if attempt.ended is None:
                self.end_attempt(attempt, final.lower())
            handle = state.load(ClusterHandle, attempt.cluster)
            if attempt.own and attempt.owns(handle) and handle.cluster_id and handle.cluster_id not in self.kept_up:
                self.take_down(handle)
        if record.run_dir:
            self.write_cost(record)
        self.m.phase = "finished"
        self.save()
        self.say(f"run {self.m.run_id} {record.state}: {message}; spent ${self.m.spent():,.4f} over {len(self.m.attempts)} attempt(s)")


def ending(status: str, stopped, *, budget: bool, lease: bool) -> str:
    """How an attempt whose job reached ``status`` ended: ``finished`` (it trained every epoch: its
    results are collected, even when a budget or lease stop was asked for after its last check),
    ``notice`` (it checkpointed on its cluster's notice: move on), ``budget`` or ``lease`` (it
    stopped where asked), or ``failed``."""
    if status == "SUCCEEDED" and stopped is None:
        return "finished"
    if stopped is not None and stopped.on_notice and not (budget or lease):
        return "notice"
    if budget or lease:
        return "budget" if budget else "lease"
    return "finished" if status == "SUCCEEDED" else "failed"


def request_stop(handle: ClusterHandle, run_id: str) -> Optional[str]:
    """The same stop request the budget guard writes (the workers checkpoint where they are and end);
    None once written, else why the store refused it."""
    from .runtime.job import LEASE_REQUEST, RunFiles

    try:
        RunFiles(handle.storage_uri, run_id).ask_to_stop(LEASE_REQUEST)
    except Exception as exc:  # noqa: BLE001 - whatever the store's SDK raised: the controller must outlive it
        return reason_of(exc)
    return None


# --------------------------------------------------------------------------- the controller's process


def control(run_id: str) -> int:
    """A managed run's controller: one per run (its file lock, and its lock in the group's database
    when a server on PostgreSQL started it), until the run has ended."""
    lock = take_lock(managed_file(run_id, ".lock"))  # held (referenced) until the run has ended
    if lock is None:
        return 0  # another controller has it
    m = load(run_id)
    if m is None or m.phase == "finished":
        return 0
    hold = None
    if os.environ.get(run_lock.ENV):
        hold = run_lock.RunLock(os.environ[run_lock.ENV], run_id)
        try:
            taken = hold.take()
        except Exception as exc:  # noqa: BLE001 - the driver's own error: said in one line, the server starts a controller again later
            print(f"run {run_id}: the group's database cannot be reached to hold the run ({exc.__class__.__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''}); this controller leaves it to the next one the server starts", flush=True)
            return 1
        if not taken:
            print(f"run {run_id} is controlled from another server on the group's database; this controller leaves it", flush=True)
            return 0

        def lost() -> None:  # another server's controller holds the run now: two must never act on it
            say_move(run_id, f"the run's hold in the database went to another server's controller; this one (PID {os.getpid()}) stops")
            os._exit(0)

        hold.keep(lost, lambda: print(f"run {run_id}: the group's database cannot be reached; holding on", flush=True))
    try:
        Controller(m).run()
    finally:
        if hold is not None:
            hold.release()
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("run", "cluster"):
        print("usage: python -m burst.controller run RUN_ID | cluster NAME", file=sys.stderr)
        return 2
    if argv[0] == "cluster":
        from .unattended.watcher import watch

        return watch(argv[1])
    return control(argv[1])


if __name__ == "__main__":
    sys.exit(main())
