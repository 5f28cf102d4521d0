"""A cluster's watcher: a process of its own (``python -m burst.controller cluster NAME``) that
takes its cluster down when no job has run on it for ``burst up --idle-minutes`` minutes, or when
its lease ends, whether or not a CLI is running. Every cloud cluster with a lease gets one.
"""

from __future__ import annotations

import os
import time
from typing import Optional

from ..home import state
from .. import targets
from .backoff import Backoff, reason_of
from .managed import managed_dir, lock_held, is_controller, spawn_controller, take_lock
from ..home.state import ClusterHandle
from ..targets.base import QUIET, Reporter
from ..monitor import stop as stop_monitor

WATCH_POLL_S = 5.0     # a watcher's look at its cluster
DOWN_RETRY_S = (30.0, 60.0, 120.0, 300.0)  # after a failed `down`: the waits before trying again (then the last, for ever)


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
        current.watcher_pid = spawn_controller("cluster", handle.name, os.getcwd(), managed_dir() / f"cluster-{handle.name}.out")
        state.save(current)
    what = [f"after {idle_minutes:g} idle minute(s)"] if idle_minutes is not None else []
    if current.expires is not None and target.provisions:
        what.append(f"at its lease's end ({time.strftime('%Y-%m-%d %H:%M', time.localtime(current.expires))})")
    report.say(f"cluster {handle.name} is taken down {' or '.join(what)} by its watcher (PID {current.watcher_pid}), with or without a CLI")
    return current


def wants_watcher(handle: ClusterHandle) -> bool:
    """A cluster ``watch_cluster`` gave a watcher (its idle stop or lease end is burst's to enforce)."""
    return bool(handle.watcher_pid) and handle.provider in targets.PROVIDERS and handle.state in ("running", "starting")


def revive_watchers() -> list[str]:
    """Start again the watcher of every cluster that wants one and whose watcher is gone (a reboot,
    a killed process); the clusters' names. Any burst command that looks at clusters calls this."""
    started = []
    for handle in state.load_all(ClusterHandle, []):
        if not wants_watcher(handle) or lock_held(managed_dir() / f"cluster-{handle.name}.lock"):
            continue
        with state.locked():
            current = state.load(ClusterHandle, handle.name)
            if current is None or current.cluster_id != handle.cluster_id or lock_held(managed_dir() / f"cluster-{handle.name}.lock"):
                continue
            current.watcher_pid = spawn_controller("cluster", handle.name, os.getcwd(), managed_dir() / f"cluster-{handle.name}.out")
            state.save(current)
        started.append(handle.name)
    return started


def stop_watcher(handle: ClusterHandle) -> None:
    """After ``down``: the watcher has nothing left to watch (it would see that at its next look)."""
    import psutil

    pid = handle.watcher_pid
    if not pid or pid == os.getpid() or not is_controller(pid):
        return
    try:
        proc = psutil.Process(pid)
        proc.terminate()
        proc.wait(timeout=10)
    except (psutil.Error, psutil.TimeoutExpired):
        pass


def job_activity(handle: ClusterHandle) -> tuple[bool, float]:
    """(a job is pending or running, when the last job ended) on the cluster, from its Jobs API."""
    from ..client import jobs

    with targets.get(handle.provider).reach(handle) as reachable:
        listed = jobs.client(reachable).list_jobs()
    busy = any(getattr(j.status, "value", str(j.status)) in ("PENDING", "RUNNING") for j in listed)
    ends = [j.end_time / 1000 for j in listed if getattr(j, "end_time", None)]
    return busy, max(ends, default=0.0)


def watch(name: str) -> int:
    """The watcher's loop: down at the lease's end, or after ``idle_minutes`` with no job."""
    lock = take_lock(managed_dir() / f"cluster-{state.check_name(name)}.lock")  # held (referenced) until the watcher ends
    if lock is None:
        return 0  # another watcher has it
    handle = state.load(ClusterHandle, name)
    if handle is None:
        return 0
    # idle counted from the first answer (a Slurm job that waited hours in the queue is not idle
    # the moment it starts), or from its last job's end
    cluster_id, last_active = handle.cluster_id, None
    log = managed_dir() / f"cluster-{name}.log"
    retry = Backoff(DOWN_RETRY_S)
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
            except Exception:  # noqa: BLE001 - a tunnel that broke, a head that does not answer: not asked this time
                busy = None
                if _ended_by_keeper(current):  # the platform says the Ray part is gone: the rest goes now
                    busy_ago = None if last_active is None else now - last_active
                    if busy_ago is not None and busy_ago < current.idle_minutes * 60:  # it had work within its idle time
                        why = (f"its Ray cluster is gone ({_gone_reason(current)}) {busy_ago:.0f} s after it last had work, not at "
                               "its keeper's idle end; the rest of it is taken down")
                    else:  # the keeper beside the head ended it, idle
                        why = "its keeper ended its Ray cluster (no job for its idle time); the rest of it is taken down"
            if busy is not None:  # the idle decision only on a fresh answer: a busy cluster behind a broken tunnel stays up
                if busy:
                    last_active = now
                elif last_active is None:  # the first answer: idle since its last job ended, or (none yet) from now
                    last_active = last_end or now
                else:
                    last_active = max(last_active, last_end)
                if now - last_active >= current.idle_minutes * 60:
                    why = f"no job for {current.idle_minutes:g} minute(s)"
        if why is not None:
            _note(log, f"cluster {name} taken down by its watcher: {why}")
            try:
                targets.get(current.provider).down(current, QUIET)
                stop_monitor(name)  # its Prometheus and the tunnel it scrapes through go with it
            except Exception as exc:  # noqa: BLE001 - Pulumi's own errors too: a watcher that dies leaves the cluster up
                wait = retry.next_wait()
                _note(log, f"error: taking cluster {name} down failed ({reason_of(exc)}); trying again in {wait:g} s")
                time.sleep(wait)  # try again later: a cluster left up costs money
                continue
            return 0
        time.sleep(WATCH_POLL_S)


def _gone_reason(handle: ClusterHandle) -> str:
    """The platform's words for a cluster that is gone; what was asked, where it cannot say."""
    try:
        return targets.get(handle.provider).stopped_reason(handle)
    except Exception:  # noqa: BLE001 - the same API that said "gone" did not answer again
        return "the platform says so"


def _ended_by_keeper(handle: ClusterHandle) -> bool:
    """The target knows the cluster's Ray part has ended (a keeper deleted its RayCluster, none of its
    processes is left) without reaching its head; an error asking is "cannot tell"."""
    try:
        return targets.get(handle.provider).is_gone(handle)
    except Exception:  # noqa: BLE001 - the API server did not answer: asked again at the next look
        return False


def _note(log, line: str) -> None:
    with open(log, "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")
