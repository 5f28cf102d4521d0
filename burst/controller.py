"""Processes that act while no CLI is attached: a managed run's controller and a cluster's watcher.

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
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

from filelock import FileLock, Timeout
from pydantic import BaseModel, Field

from . import state, targets
from .errors import BurstError
from .records import read_json, write_json_atomic
from .state import ClusterHandle, RunRecord
from .targets.base import QUIET, Reporter

if TYPE_CHECKING:
    from .placement.policy import Policy

POLL_S = 2.0           # a controller's look at its run
LOSS_CONFIRM = 2       # looks in a row that find the cluster gone before it counts as lost
WATCH_POLL_S = 5.0     # a watcher's look at its cluster
FINAL_STATES = ("SUCCEEDED", "FAILED", "FAILED_QUALITY", "STOPPED", "STOPPED_BUDGET", "LOST")


class Attempt(BaseModel):
    """One cluster a managed run ran on: where, from when to when, how it ended, what it cost."""

    number: int
    cluster: str
    own: bool = True                 # started by the run (the controller takes it down)
    provider: str = ""
    region: Optional[str] = None
    preemptible: bool = False
    hourly_usd: float = 0.0
    started: float = Field(default_factory=time.time)  # the attempt began (planning, up)
    cluster_created: Optional[float] = None             # its cluster's cost accrues from here
    submitted: Optional[float] = None
    first_step: Optional[float] = None
    ended: Optional[float] = None
    how: Optional[str] = None
    cost_usd: float = 0.0

    def cost_until(self, at: float) -> float:
        """The cluster's price from its creation (a cluster the run found running: from the attempt's start) until ``at``."""
        if self.cluster_created is None:
            return 0.0
        since = self.cluster_created if self.own else max(self.cluster_created, self.started)
        return self.hourly_usd * max(0.0, at - since) / 3600


class ManagedRun(BaseModel):
    """What a controller needs to carry a run to its end, kept beside the run's record."""

    run_id: str
    request: dict                     # the TrainRequest, as the user gave it
    placement: dict = Field(default_factory=dict)  # the first attempt's placement flags (provider, gpus, ...)
    policy: Optional[str] = None      # a copy of the policy, taken when the run was handed over
    cluster: str                      # the first cluster's name; moves add -2, -3, ...
    own_first: bool = True            # the first cluster was started for the run
    recover: bool = True
    budget_usd: Optional[float] = None
    cwd: str = Field(default_factory=os.getcwd)  # where the run's directory (burst-runs/) goes
    phase: Literal["starting", "running", "finished"] = "starting"
    attempts: list[Attempt] = Field(default_factory=list)
    avoid: list[str] = Field(default_factory=list)
    controller_pid: Optional[int] = None
    created: float = Field(default_factory=time.time)

    def spent(self, at: Optional[float] = None) -> float:
        at = time.time() if at is None else at
        return sum(a.cost_usd if a.ended is not None else a.cost_until(at) for a in self.attempts)


# --------------------------------------------------------------------------- files


def _dir() -> Path:
    path = state.home() / "managed"
    path.mkdir(exist_ok=True, mode=0o700)
    return path


def _file(key: str, suffix: str) -> Path:
    return _dir() / f"{state.check_name(key, 'run')}{suffix}"


def load(run_id: str) -> Optional[ManagedRun]:
    path = _file(run_id, ".json")
    return ManagedRun.model_validate(read_json(path, f"managed run {run_id}")) if path.exists() else None


def save(m: ManagedRun) -> None:
    write_json_atomic(_file(m.run_id, ".json"), m.model_dump(mode="json"), private=True)


def load_all() -> list[ManagedRun]:
    return [m for p in sorted(_dir().glob("*.json")) if not p.name.endswith(".policy.json")
            if (m := load(p.stem)) is not None]


def moves(run_id: str) -> list[str]:
    """The run's move lines, oldest first."""
    path = _file(run_id, ".log")
    return path.read_text().splitlines() if path.exists() else []


def _say(run_id: str, text: str) -> None:
    line = f"{time.strftime('%H:%M:%S')} {text}"
    with open(_file(run_id, ".log"), "a") as fh:
        fh.write(line + "\n")
    print(line, flush=True)


def _take_lock(lock_path: Path) -> Optional[FileLock]:
    """The lock, held by this process; None while another live process holds it (a killed holder's lock is free again)."""
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock


def _held(lock_path: Path) -> bool:
    """True while a live process holds the lock."""
    lock = _take_lock(lock_path)
    if lock is None:
        return True
    lock.release()
    return False


def controller_alive(run_id: str, pid: Optional[int] = None) -> bool:
    """True while the run's controller holds its lock, or its process ``pid`` is still starting."""
    return _held(_file(run_id, ".lock")) or _is_controller(pid)


def _is_controller(pid: Optional[int]) -> bool:
    import psutil

    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and "burst.controller" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def _spawn(kind: str, key: str, cwd: str, out: Path) -> int:
    """Start ``python -m burst.controller KIND KEY`` in a session of its own, detached from this terminal."""
    with open(out, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "burst.controller", kind, key], cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy())
    return proc.pid


# --------------------------------------------------------------------------- handing a run over


def hand_over(request, placement: dict, policy, *, own_first: bool, budget_usd: Optional[float], report: Reporter = QUIET) -> RunRecord:
    """Record a managed run and start its controller; returns the run's record (PENDING)."""
    from .placement import policy as policy_mod
    from .runs import new_run_id

    if request.resume:
        raise BurstError("--managed starts a new run; a managed run resumes by itself, and `burst train --resume RUN` without "
                         "--managed goes on with one")
    if own_first and state.load(ClusterHandle, request.cluster) is not None:
        raise BurstError(f"cluster {request.cluster!r} is already up, started by another command; a managed run starts a cluster of "
                         f"its own: pass another --name, or use `burst train --managed --cluster {request.cluster}`")
    run_id = new_run_id(request.workload)
    pol_copy = None
    if policy is not None:
        pol = policy if isinstance(policy, policy_mod.Policy) else policy_mod.load(Path(policy))
        pol_copy = str(_file(run_id, ".policy.json"))
        write_json_atomic(Path(pol_copy), pol.model_dump(mode="json", exclude_defaults=True), private=True)
    request = request.model_copy(update={"run_id": run_id, "managed": True})
    record = RunRecord(run_id=run_id, workload=request.workload, cluster=request.cluster, provider=placement.get("provider") or "?",
                       state="PENDING", managed=True, message="handed to its controller")
    m = ManagedRun(run_id=run_id, request=request.model_dump(mode="json"), placement=placement, policy=pol_copy, cluster=request.cluster,
                   own_first=own_first, budget_usd=budget_usd)
    with state.locked():
        state.save(record)
    save(m)
    m.controller_pid = _spawn("run", run_id, m.cwd, _file(run_id, ".out"))
    save(m)
    report.say(f"run {run_id} handed to its controller (PID {m.controller_pid}); it goes on without this terminal: "
               f"`burst status`, `burst logs {run_id}`")
    return record


def guard(handle: ClusterHandle, record: RunRecord, budget_usd: Optional[float], report: Reporter = QUIET) -> None:
    """A run no CLI follows any more (``--detach``, a CLI interrupted or hung up): a controller
    enforces its budget and its cluster's lease and collects its results; it moves nothing and takes
    down only what the budget or the lease stops."""
    attempt = Attempt(number=record.attempts, cluster=handle.name, own=False, provider=handle.provider, region=handle.region,
                      preemptible=handle.preemptible, hourly_usd=handle.hourly_usd, started=handle.created,
                      cluster_created=handle.created, submitted=time.time())
    m = ManagedRun(run_id=record.run_id, request={}, cluster=handle.name, own_first=False, recover=False, budget_usd=budget_usd,
                   phase="running", attempts=[attempt])
    save(m)
    m.controller_pid = _spawn("run", record.run_id, m.cwd, _file(record.run_id, ".out"))
    save(m)
    report.say(f"a controller (PID {m.controller_pid}) now enforces the budget of run {record.run_id} "
               f"(${budget_usd:,.2f}) and collects its results, with no CLI attached")


def revive() -> list[str]:
    """Start again the controller of every unfinished managed run whose controller is gone; their ids."""
    started = []
    for m in load_all():
        if m.phase != "finished" and not controller_alive(m.run_id, m.controller_pid):
            m.controller_pid = _spawn("run", m.run_id, m.cwd, _file(m.run_id, ".out"))
            save(m)
            started.append(m.run_id)
    return started


def follow(run_id: str, report: Reporter, poll_s: float = 1.0) -> RunRecord:
    """Print a managed run's moves and progress until it ends (Ctrl-C leaves it to its controller)."""
    from .runs import load_run

    shown, last_progress = 0, None
    while True:
        lines = moves(run_id)
        for line in lines[shown:]:
            report.say(line.split(" ", 1)[1] if " " in line else line)
        shown = len(lines)
        m, record = load(run_id), load_run(run_id)
        progress = (record.progress or {}).get("epoch")
        if progress is not None and progress != last_progress:
            report.say(f"epoch {progress}/{record.progress.get('epochs')} ({record.cluster})")
            last_progress = progress
        if m is None or m.phase == "finished":
            return record
        if not controller_alive(run_id, m.controller_pid):
            revive()
        time.sleep(poll_s)


# --------------------------------------------------------------------------- the controller


class _Said(Reporter):
    """What ``up`` and ``train`` say goes into the controller's own output."""

    def say(self, message: str) -> None:
        print(message, flush=True)


class Controller:
    def __init__(self, m: ManagedRun):
        self.m = m
        self.policy = self._policy()

    def _policy(self) -> "Policy":
        from .placement import policy as policy_mod

        return policy_mod.load(Path(self.m.policy) if self.m.policy else None)

    def say(self, text: str) -> None:
        _say(self.m.run_id, text)

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
            self.finish("FAILED", f"the controller failed ({exc.__class__.__name__}: {exc}); see {_file(self.m.run_id, '.out')}")

    # ------------------------------------------------------------------ starting an attempt

    def start_attempt(self) -> None:
        from . import api, runs

        n = len(self.m.attempts) + 1
        name = self.m.cluster if n == 1 else f"{self.m.cluster[:36]}-{n}"
        attempt = Attempt(number=n, cluster=name, own=self.m.own_first if n == 1 else True)
        self.m.attempts.append(attempt)
        self.m.phase = "starting"
        self.save()
        if attempt.own:
            if n == 1:
                flags, policy = dict(self.m.placement), self.m.policy
            else:
                try:
                    flags, policy = self.moved_flags()
                except BurstError as exc:
                    self.end_attempt(attempt, "no target left")
                    self.finish("LOST", f"no target left to move to: {exc}")
                    return
            provider = flags.pop("provider", None)
            self.say(f"attempt {n}: starting cluster {name} on {provider}"
                     + (f" {flags['region']}" if flags.get("region") else "") + (f" (avoiding {', '.join(self.m.avoid)})" if self.m.avoid else ""))
            try:
                handle = api.up(provider, name, policy=policy, wait=True, report=_Said(), **flags).handle
            except BurstError as exc:
                self.end_attempt(attempt, f"could not start: {exc}")
                self.say(f"attempt {n}: could not start a cluster on {provider}: {exc}")
                if n == 1 or not self.can_move():
                    self.finish("FAILED" if n == 1 else "LOST", f"attempt {n} could not start a cluster: {exc}")
                    return
                self.m.avoid.append(f"{provider}:{flags['region']}" if flags.get("region") else str(provider))  # a stock-out: elsewhere next
                self.save()
                return
        else:
            handle = runs.cluster(name)
        attempt.provider, attempt.region, attempt.preemptible = handle.provider, handle.region, handle.preemptible
        attempt.hourly_usd, attempt.cluster_created = handle.hourly_usd, handle.created
        self.save()
        self.submit(attempt, handle)

    def submit(self, attempt: Attempt, handle: ClusterHandle) -> None:
        """The run's job on the attempt's cluster: from the start, or from the newest checkpoint after a move."""
        from . import runs

        n, name = attempt.number, attempt.cluster
        request = runs.TrainRequest(**self.m.request).model_copy(update={"cluster": name, "detach": True,
                                                                         "resume": self.m.run_id if n > 1 else None})
        resume_from = stage_checkpoint(self.m.run_id, handle) if n > 1 else None
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
                 + (f" from {resume_from}" if resume_from else ""))

    def can_move(self) -> bool:
        return self.m.recover and len(self.m.attempts) <= self.policy.recovery.max_restarts

    def moved_flags(self) -> tuple[dict, "Policy"]:
        """Placement flags and policy for the next attempt: the plan's choice among the providers
        recovery allows, without the targets lost so far, on-demand once enough preemptible
        clusters were lost; pinned to that choice, so that a failure to start it is avoided next."""
        from . import api

        recovery = self.policy.recovery
        allowed = recovery.allow_providers or self.policy.providers
        lost_spot = sum(1 for a in self.m.attempts[:-1] if a.preemptible and (a.how or "").startswith(("lost", "could not start")))
        on_demand = recovery.fallback_on_demand_after is not None and lost_spot >= recovery.fallback_on_demand_after
        policy = self.policy.model_copy(update={"providers": list(allowed), "preemptible": "never" if on_demand else self.policy.preemptible})
        from .placement.request import PlacementRequest

        first = self.m.placement
        sizing = {k: first.get(k) for k in ("gpus", "batch_per_replica", "epochs", "workload")}
        chosen, _ = api._placement(PlacementRequest(avoid=tuple(self.m.avoid), **sizing), policy, _Said())
        flags = {"provider": chosen.provider, "hours": first.get("hours"), **sizing}
        if targets.get(chosen.provider).kind == "cloud":
            flags.update(region=chosen.region, accelerator=chosen.accelerator, gpus=chosen.count, preemptible=chosen.preemptible)
        return {k: v for k, v in flags.items() if v is not None}, policy

    # ------------------------------------------------------------------ following an attempt

    def follow_attempt(self, attempt: Attempt) -> None:
        from .runs import load_run
        from .runtime import jobs
        from .runtime.budget import BudgetGuard, CHECKPOINT_RESERVE_S, teardown_seconds

        handle = state.load(ClusterHandle, attempt.cluster)
        record = load_run(self.m.run_id)
        if handle is None:
            return self.lost(attempt, "its cluster record is gone (taken down)")
        target = targets.get(handle.provider)
        if attempt.submitted is None:  # a controller before this one stopped between up and submit
            if record.cluster == attempt.cluster and record.attempts == attempt.number and record.job_id:
                attempt.submitted = record.created  # it did submit
                self.save()
            elif target.is_alive(handle):
                return self.submit(attempt, handle)
            else:
                return self.lost(attempt, target.stopped_reason(handle))
        remaining = None if self.m.budget_usd is None else self.m.budget_usd - (self.m.spent() - attempt.cost_until(time.time()))
        guard = BudgetGuard.for_cluster(handle, remaining) if remaining is not None else None
        reserve = CHECKPOINT_RESERVE_S + teardown_seconds(handle.provider)
        lease_stop = False
        misses = 0
        try:
            with target.reach(handle) as reachable:
                client = jobs.client(reachable)
                while True:
                    now = time.time()
                    # a cloud lease; a scheduler's walltime is not the run's end: its notice moves the run
                    if target.provisions and handle.expires is not None and now > handle.expires - reserve and not lease_stop:
                        self.say(f"attempt {attempt.number}: the lease of cluster {handle.name} ends; taking a final checkpoint and stopping")
                        request_stop(handle, self.m.run_id)
                        lease_stop = True
                    fresh = state.load(ClusterHandle, handle.name)
                    if fresh is None or fresh.cluster_id != handle.cluster_id or not target.is_alive(fresh):
                        misses += 1
                        if misses >= LOSS_CONFIRM:
                            why = target.stopped_reason(fresh) if fresh is not None else "it was taken down"
                            return self.lost(attempt, why)
                        time.sleep(POLL_S)
                        continue
                    try:
                        status = jobs.job_status(client, record.job_id)
                        log = client.get_job_logs(record.job_id)
                    except (ConnectionError, RuntimeError, OSError):
                        misses += 1
                        time.sleep(POLL_S)
                        continue
                    misses = 0
                    tracker = self.track(attempt, record, log)
                    if guard is not None:
                        said = guard.poll(record.run_id, stop_job=lambda: client.stop_job(record.job_id))
                        if said:
                            self.say(f"budget guard: {said}")
                    if status in jobs.TERMINAL:
                        return self.job_ended(attempt, handle, reachable, record, status, tracker,
                                              budget=guard is not None and guard.requested_at is not None, lease=lease_stop)
                    time.sleep(POLL_S)
        except BurstError as exc:  # a tunnel to a cluster that went away
            fresh = state.load(ClusterHandle, handle.name)
            if fresh is not None and target.is_alive(fresh):
                raise
            return self.lost(attempt, str(exc))

    def track(self, attempt: Attempt, record: RunRecord, log: str):
        from .runs import _replay

        tracker = _replay(record, log)
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
        from . import runs

        stopped = tracker.stopped
        if stopped is not None and stopped.on_notice and not (budget or lease):
            return self.lost(attempt, f"it gave notice ({stopped.reason}); checkpointed at epoch {stopped.epoch} step {stopped.step}")
        if budget or lease:
            self.end_attempt(attempt, "stopped by the budget guard" if budget else "stopped at the end of its lease")
            self.take_down(handle)  # the budget or the lease stops whoever started it
            where = f"epoch {stopped.epoch} step {stopped.step}" if stopped else "its last checkpoint"
            if budget:
                self.finish("STOPPED_BUDGET", f"stopped by the budget guard at {where}: ${self.m.spent():,.2f} of ${self.m.budget_usd:,.2f} "
                                              f"spent over {len(self.m.attempts)} attempt(s); cluster {handle.name!r} torn down")
            else:
                self.finish("STOPPED", f"stopped at {where}: the lease of cluster {handle.name!r} ended; `burst train --resume {record.run_id}` goes on")
            return
        if status == "SUCCEEDED":
            record = runs.collect_finished(runs.load_run(record.run_id), reachable)
            self.end_attempt(attempt, "finished")
            if attempt.own:
                self.take_down(handle)
            self.write_cost(record)
            self.finish(record.state, record.message or "trained, validated and collected")
            return
        if not targets.get(handle.provider).is_alive(handle):
            return self.lost(attempt, targets.get(handle.provider).stopped_reason(handle))
        self.end_attempt(attempt, f"job {status.lower()}")
        if attempt.own:
            self.take_down(handle)
        self.finish("FAILED", tracker.failure or f"job ended {status}; see `burst logs {record.run_id}`")

    # ------------------------------------------------------------------ endings

    def end_attempt(self, attempt: Attempt, how: str) -> None:
        attempt.ended = time.time()
        attempt.how = how
        attempt.cost_usd = round(attempt.cost_until(attempt.ended), 6)
        self.save()

    def lost(self, attempt: Attempt, why: str) -> None:
        from .runs import last_checkpoint, load_run

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
        if handle is not None and attempt.own:
            self.take_down(handle)
        kind = targets.get(attempt.provider).kind if attempt.provider in targets.PROVIDERS else "local"
        self.m.avoid.append(f"{attempt.provider}:{attempt.region}" if kind == "cloud" and attempt.region else attempt.provider)
        self.save()
        if not self.can_move():
            why_not = "recovery is off" if not self.m.recover else f"{self.policy.recovery.max_restarts} move(s) allowed by recovery.max_restarts"
            self.finish("LOST", f"cluster {attempt.cluster} lost ({why}); not moved: {why_not}; `burst train --resume {self.m.run_id}` goes on")
            return
        self.say(f"moving run {self.m.run_id}: planning again without {', '.join(self.m.avoid)}")

    def take_down(self, handle: ClusterHandle) -> None:
        try:
            targets.get(handle.provider).down(handle, _Said())
            self.say(f"cluster {handle.name} ({handle.provider}) taken down")
        except BurstError as exc:
            self.say(f"error: taking down cluster {handle.name}: {exc}")

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
        write_json_atomic(path, cost, indent=1)

    def finish(self, final: str, message: str) -> None:
        from .runs import load_run

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
            if handle is not None and attempt.own and handle.cluster_id and attempt.cluster_created == handle.created:
                self.take_down(handle)
        if record.run_dir:
            self.write_cost(record)
        self.m.phase = "finished"
        self.save()
        self.say(f"run {self.m.run_id} {record.state}: {message}; spent ${self.m.spent():,.4f} over {len(self.m.attempts)} attempt(s)")


def request_stop(handle: ClusterHandle, run_id: str) -> None:
    """The same stop request the budget guard writes: the workers checkpoint where they are and end."""
    from .runtime import storage
    from .runtime.job import RunFiles

    storage.write_text(RunFiles(handle.storage_uri, run_id).stop_request, "lease\n")


def stage_checkpoint(run_id: str, handle: ClusterHandle) -> Optional[str]:
    """The newest complete checkpoint of ``run_id`` on any storage it ran on, copied to ``handle``'s
    storage when it is elsewhere; where the next attempt resumes from (None: nothing to resume)."""
    from .runs import load_run
    from .runtime import storage
    from .runtime.job import RunFiles
    from .runtime.training import latest_checkpoint

    record = load_run(run_id)
    if not record.storage_uri:
        return None
    old = RunFiles(record.storage_uri, run_id)
    if record.storage_uri.rstrip("/") == handle.storage_uri.rstrip("/"):
        return old.ray_train_dir
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if storage.is_remote(old.ray_train_dir):
            storage.copy_dir(old.ray_train_dir, tmp)
            found = list(Path(tmp).glob("checkpoint_*"))
        else:
            found = list(Path(old.ray_train_dir).glob("checkpoint_*"))
        staged = storage.join(record.storage_uri, "resume", run_id)
        if not storage.is_remote(staged):
            found += list(Path(staged).glob("checkpoint_*"))  # what an earlier move staged there
        newest = latest_checkpoint(sorted(found))
        if newest is None:
            return None
        dest = storage.join(handle.storage_uri, "resume", run_id)
        storage.copy_dir(str(newest), storage.join(dest, newest.name))
    return dest


# --------------------------------------------------------------------------- the watcher


def watch_cluster(handle: ClusterHandle, idle_minutes: Optional[float], report: Reporter = QUIET) -> ClusterHandle:
    """Start the watcher of a cluster ``up`` just created (idle stop and lease end); the handle with its PID."""
    target = targets.get(handle.provider)
    if idle_minutes is None and not target.provisions:
        return handle  # a lease alone is the scheduler's to enforce (Slurm's walltime), or nothing's to pay for (local)
    with state.locked():
        current = state.load(ClusterHandle, handle.name)
        if current is None or current.cluster_id != handle.cluster_id:
            return handle
        current.idle_minutes = idle_minutes
        current.watcher_pid = _spawn("cluster", handle.name, os.getcwd(), _dir() / f"cluster-{handle.name}.out")
        state.save(current)
    what = [f"after {idle_minutes:g} idle minute(s)"] if idle_minutes is not None else []
    if current.expires is not None and target.provisions:
        what.append(f"at its lease's end ({time.strftime('%Y-%m-%d %H:%M', time.localtime(current.expires))})")
    report.say(f"cluster {handle.name} is taken down {' or '.join(what)} by its watcher (PID {current.watcher_pid}), with or without a CLI")
    return current


def stop_watcher(handle: ClusterHandle) -> None:
    """After ``down``: the watcher has nothing left to watch (it would see that at its next look)."""
    import psutil

    pid = handle.watcher_pid
    if not pid or pid == os.getpid() or not _is_controller(pid):
        return
    try:
        proc = psutil.Process(pid)
        proc.terminate()
        proc.wait(timeout=10)
    except (psutil.Error, psutil.TimeoutExpired):
        pass


def job_activity(handle: ClusterHandle) -> tuple[bool, float]:
    """(a job is pending or running, when the last job ended) on the cluster, from its Jobs API."""
    from .runtime import jobs

    with targets.get(handle.provider).reach(handle) as reachable:
        listed = jobs.client(reachable).list_jobs()
    busy = any(getattr(j.status, "value", str(j.status)) in ("PENDING", "RUNNING") for j in listed)
    ends = [j.end_time / 1000 for j in listed if getattr(j, "end_time", None)]
    return busy, max(ends, default=0.0)


def watch(name: str) -> int:
    """The watcher's loop: down at the lease's end, or after ``idle_minutes`` with no job."""
    lock = _take_lock(_dir() / f"cluster-{state.check_name(name)}.lock")  # held (referenced) until the watcher ends
    if lock is None:
        return 0  # another watcher has it
    handle = state.load(ClusterHandle, name)
    if handle is None:
        return 0
    cluster_id, last_active = handle.cluster_id, handle.created
    log = _dir() / f"cluster-{name}.log"
    while True:
        current = state.load(ClusterHandle, name)
        if current is None or current.cluster_id != cluster_id:
            return 0
        now = time.time()
        why = None
        if current.expires is not None and now >= current.expires:
            why = "its lease ended"
        elif current.idle_minutes is not None and current.state == "running":
            try:
                busy, last_end = job_activity(current)
                last_active = now if busy else max(last_active, last_end)
            except (BurstError, ConnectionError, RuntimeError, OSError):
                last_active = last_active  # not asked this time: no decision on a guess
            if now - last_active >= current.idle_minutes * 60:
                why = f"no job for {current.idle_minutes:g} minute(s)"
        if why is not None:
            with open(log, "a") as fh:
                fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} cluster {name} taken down by its watcher: {why}\n")
            try:
                targets.get(current.provider).down(current, QUIET)
            except BurstError as exc:
                with open(log, "a") as fh:
                    fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} error: {exc}\n")
                time.sleep(WATCH_POLL_S * 6)  # try again later: a cluster left up costs money
                continue
            return 0
        time.sleep(WATCH_POLL_S)


def watcher_lines(name: str) -> list[str]:
    path = _dir() / f"cluster-{name}.log"
    return path.read_text().splitlines() if path.exists() else []


def control(run_id: str) -> int:
    """A managed run's controller: one per run (its lock), until the run has ended."""
    lock = _take_lock(_file(run_id, ".lock"))  # held (referenced) until the run has ended
    if lock is None:
        return 0  # another controller has it
    m = load(run_id)
    if m is None or m.phase == "finished":
        return 0
    Controller(m).run()
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("run", "cluster"):
        print("usage: python -m burst.controller run RUN_ID | cluster NAME", file=sys.stderr)
        return 2
    return control(argv[1]) if argv[0] == "run" else watch(argv[1])


if __name__ == "__main__":
    sys.exit(main())
