"""Managed runs as records and processes: what ``burst run --managed`` hands over and what a
follower reads. A managed run is a ``ManagedRun`` under ``managed/<run>.json`` (its attempts, its
placement, its policy copy), a move log ``managed/<run>.log`` and a controller process
(``python -m burst.controller run RUN_ID``, ``burst.controller``) that holds ``managed/<run>.lock``.

This module starts controllers (``hand_over``, ``guard``, ``revive``) and reads what they write
(``load``, ``moves``, ``follow``); it imports nothing of what a controller does, so the CLI, the
API and a plain run's follower (``burst.lifecycle.runs``) can hand a run over without depending on it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field

from ..home import state
from ..errors import BurstError
from ..home.records import Damaged, ensure_dir, read_record, write_json_atomic
from ..home.state import BudgetUsd, ClusterHandle, HourlyUsd, Pid, RunRecord, Timestamp
from ..targets.base import QUIET, Reporter

if TYPE_CHECKING:
    from ..placement.request import PlacementRequest

FINAL_STATES = ("SUCCEEDED", "FAILED", "FAILED_QUALITY", "STOPPED", "STOPPED_BUDGET", "LOST")


class Attempt(BaseModel):
    """One cluster a managed run ran on: where, from when to when, how it ended, what it cost."""

    model_config = ConfigDict(allow_inf_nan=False)

    number: int = Field(ge=1, le=10_000)
    cluster: str
    own: bool = True                 # started by the run (the controller takes it down)
    provider: str = ""
    region: Optional[str] = None
    preemptible: bool = False
    hourly_usd: HourlyUsd = 0.0
    started: Timestamp = Field(default_factory=time.time)  # the attempt began (planning, up)
    cluster_created: Optional[Timestamp] = None             # its cluster's cost accrues from here
    cluster_id: Optional[str] = None  # the attempt's own cluster: a later one of the same name is never acted on
    cluster_up: Optional[Timestamp] = None                  # the cluster was up (or found) and the attempt could submit
    submitted: Optional[Timestamp] = None
    last_seen: Optional[Timestamp] = None                   # the last look that reached its job (recorded when it ends)
    first_step: Optional[Timestamp] = None
    ended: Optional[Timestamp] = None
    how: Optional[str] = None
    cost_usd: float = Field(0.0, ge=0, le=1e12)

    def owns(self, handle: Optional[ClusterHandle]) -> bool:
        """``handle`` (a record loaded by the attempt's cluster name) is this attempt's cluster, not a
        later one of the same name (taken down, then brought up again by someone)."""
        if handle is None:
            return False
        if self.cluster_id is not None:
            return handle.cluster_id == self.cluster_id
        return self.cluster_created is None or handle.created == self.cluster_created  # an attempt recorded before ids were kept

    def cost_until(self, at: float) -> float:
        """The cluster's price from its creation (a cluster the run found running: from the attempt's start) until ``at``."""
        if self.cluster_created is None:
            return 0.0
        since = self.cluster_created if self.own else max(self.cluster_created, self.started)
        return self.hourly_usd * max(0.0, at - since) / 3600


class ManagedRun(BaseModel):
    """What a controller needs to carry a run to its end, kept beside the run's record."""

    model_config = ConfigDict(allow_inf_nan=False)

    run_id: str
    request: dict                     # the TrainRequest, as the user gave it
    placement: dict = Field(default_factory=dict)  # the first attempt's placement request (``PlacementRequest.flags``) and its lease, "hours"
    policy: Optional[str] = None      # a copy of the policy, taken when the run was handed over
    cluster: str                      # the first cluster's name; moves add -2, -3, ...
    own_first: bool = True            # the first cluster was started for the run
    recover: bool = True
    budget_usd: Optional[BudgetUsd] = None
    cwd: str = Field(default_factory=os.getcwd)  # where the run's directory (burst-runs/) goes
    phase: Literal["starting", "running", "finished"] = "starting"
    attempts: list[Attempt] = Field(default_factory=list)
    avoid: list[str] = Field(default_factory=list)
    controller_pid: Optional[Pid] = None
    created: Timestamp = Field(default_factory=time.time)

    def first_request(self) -> "PlacementRequest":
        """The placement request the run was handed over with (its lease, ``hours``, apart)."""
        from ..placement.request import PlacementRequest

        return PlacementRequest.from_flags({k: v for k, v in self.placement.items() if k != "hours"})

    def spent(self, at: Optional[float] = None) -> float:
        at = time.time() if at is None else at
        return sum(a.cost_usd if a.ended is not None else a.cost_until(at) for a in self.attempts)


def managed_dir() -> Path:
    return ensure_dir(state.home() / "managed", "the managed runs' directory", private=True)


def managed_file(key: str, suffix: str) -> Path:
    return managed_dir() / f"{state.check_name(key, 'run')}{suffix}"


def load(run_id: str) -> Optional[ManagedRun]:
    path = managed_file(run_id, ".json")
    fix = (f"stop its controller if one still runs (`pkill -f 'burst.controller run {run_id}'`), then remove the record "
           f"(rm -r {path}); the run's own record and directory stay")
    try:
        return read_record(path, "managed-run record", fix, ManagedRun)
    except FileNotFoundError:
        return None


def save(m: ManagedRun) -> None:
    write_json_atomic(managed_file(m.run_id, ".json"), m.model_dump(mode="json"), private=True)


def load_all(damaged: Optional[list[Damaged]] = None) -> list[ManagedRun]:
    """Every managed run's record; a damaged one goes to ``damaged`` when a list is given, else is raised."""
    out = []
    for path in sorted(managed_dir().glob("*.json")):
        if path.name.endswith(".policy.json"):
            continue
        try:
            m = load(path.stem)
        except BurstError as exc:  # damaged, or a file whose name no run has
            if damaged is None:
                raise
            damaged.append(exc if isinstance(exc, Damaged) else Damaged("managed-run record", path, str(exc), f"remove it (rm -r {path})"))
            continue
        if m is not None:
            out.append(m)
    return out


def moves(run_id: str) -> list[str]:
    """The run's move lines, oldest first."""
    path = managed_file(run_id, ".log")
    return path.read_text().splitlines() if path.exists() else []


def say_move(run_id: str, text: str) -> None:
    line = f"{time.strftime('%H:%M:%S')} {text}"
    with open(managed_file(run_id, ".log"), "a") as fh:
        fh.write(line + "\n")
    print(line, flush=True)


def take_lock(lock_path: Path) -> Optional[FileLock]:
    """The lock, held by this process; None while another live process holds it (a killed holder's lock is free again)."""
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock


def lock_held(lock_path: Path) -> bool:
    """True while a live process holds the lock."""
    lock = take_lock(lock_path)
    if lock is None:
        return True
    lock.release()
    return False


def controller_alive(run_id: str, pid: Optional[int] = None) -> bool:
    """True while the run's controller holds its lock, or its process ``pid`` is still starting."""
    return lock_held(managed_file(run_id, ".lock")) or is_controller(pid)


def is_controller(pid: Optional[int]) -> bool:
    import psutil

    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and "burst.controller" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def spawn_controller(kind: str, key: str, cwd: str, out: Path) -> int:
    """Start ``python -m burst.controller KIND KEY`` in a session of its own, detached from this terminal."""
    with open(out, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "burst.controller", kind, key], cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy())
    return proc.pid


def hand_over(request, placement: dict, policy, *, own_first: bool, budget_usd: Optional[float], report: Reporter = QUIET) -> RunRecord:
    """Record a managed run and start its controller; returns the run's record (PENDING)."""
    from ..placement import policy as policy_mod

    if request.resume:
        raise BurstError("--managed starts a new run; a managed run resumes by itself, and `burst train --resume RUN` without "
                         "--managed goes on with one")
    if own_first and state.load(ClusterHandle, request.cluster) is not None:
        raise BurstError(f"cluster {request.cluster!r} is already up, started by another command; a managed run starts a cluster of "
                         f"its own: pass another --name, or use `burst train --managed --cluster {request.cluster}`")
    run_id = state.new_run_id(request.workload)
    pol_copy = None
    if policy is not None:
        pol = policy if isinstance(policy, policy_mod.Policy) else policy_mod.load(Path(policy))
        pol_copy = str(managed_file(run_id, ".policy.json"))
        write_json_atomic(Path(pol_copy), pol.model_dump(mode="json", exclude_defaults=True), private=True)
    request = request.model_copy(update={"run_id": run_id, "managed": True})
    record = RunRecord(run_id=run_id, workload=request.workload, cluster=request.cluster, provider=placement.get("provider") or "?",
                       state="PENDING", managed=True, message="handed to its controller")
    m = ManagedRun(run_id=run_id, request=request.model_dump(mode="json"), placement=placement, policy=pol_copy, cluster=request.cluster,
                   own_first=own_first, budget_usd=budget_usd)
    with state.locked():
        state.save(record)
    save(m)
    m.controller_pid = spawn_controller("run", run_id, m.cwd, managed_file(run_id, ".out"))
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
                      cluster_created=handle.created, cluster_id=handle.cluster_id, submitted=time.time())
    m = ManagedRun(run_id=record.run_id, request={}, cluster=handle.name, own_first=False, recover=False, budget_usd=budget_usd,
                   phase="running", attempts=[attempt])
    save(m)
    m.controller_pid = spawn_controller("run", record.run_id, m.cwd, managed_file(record.run_id, ".out"))
    save(m)
    report.say(f"a controller (PID {m.controller_pid}) now enforces the budget of run {record.run_id} "
               f"(${budget_usd:,.2f}) and collects its results, with no CLI attached")


def revive(damaged: Optional[list[Damaged]] = None, only: Optional[str] = None) -> list[str]:
    """Start again the controller of every unfinished managed run (or of run ``only``) whose controller
    is gone; their ids. A damaged record starts nothing: it goes to ``damaged`` when a list is given
    (``burst status`` shows it)."""
    started = []
    for m in load_all(damaged if damaged is not None else []):
        if only is not None and m.run_id != only:
            continue
        if m.phase != "finished" and not controller_alive(m.run_id, m.controller_pid):
            m.controller_pid = spawn_controller("run", m.run_id, m.cwd, managed_file(m.run_id, ".out"))
            save(m)
            started.append(m.run_id)
    return started


def follow(run_id: str, report: Reporter, poll_s: float = 1.0) -> RunRecord:
    """Print a managed run's moves and progress until it ends (Ctrl-C leaves it to its controller)."""
    shown, last_progress = 0, None
    while True:
        lines = moves(run_id)
        for line in lines[shown:]:
            report.say(line.split(" ", 1)[1] if " " in line else line)
        shown = len(lines)
        m, record = load(run_id), state.load(RunRecord, run_id)
        if record is None:
            raise BurstError(f"no run named {run_id!r}; `burst status` lists them")
        progress = (record.progress or {}).get("epoch")
        if progress is not None and progress != last_progress:
            report.say(f"epoch {progress}/{record.progress.get('epochs')} ({record.cluster})")
            last_progress = progress
        if m is None or m.phase == "finished":
            return record
        if not controller_alive(run_id, m.controller_pid):
            revive()
        time.sleep(poll_s)
