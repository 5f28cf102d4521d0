"""A process census independent of burst's own process finder.

burst finds a cluster's processes by a marker in their environment; a check that uses the same
finder cannot see a process that lost the marker. The census instead snapshots every process on
the machine (PID and start time) and later lists those started since that are still alive,
whatever their environment, ignoring only the descendants of processes the caller exempts
(a cluster that is meant to outlive the test). It counts the processes a test of this project can
start: anything run from this Python environment, and Ray's own binaries and renamed workers
(``raylet``, ``gcs_server``, ``ray::...``), not a shell that someone else started meanwhile.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil

_OURS = (sys.prefix, str(Path(sys.executable).parent))


def _ours(info: dict) -> bool:
    cmdline = " ".join(info.get("cmdline") or [])
    name = info.get("name") or ""
    return any(root in cmdline for root in _OURS) or name.startswith(("ray", "raylet", "gcs_server")) or cmdline.startswith("ray")


def snapshot() -> set[tuple[int, float]]:
    found = set()
    for p in psutil.process_iter(["pid", "create_time"]):
        found.add((p.info["pid"], p.info["create_time"]))
    return found


def _exempt(proc: psutil.Process, roots: set[int]) -> bool:
    try:
        return proc.pid in roots or any(a.pid in roots for a in proc.parents())
    except psutil.Error:
        return True  # gone while we looked


def _kernel_thread(proc: psutil.Process) -> bool:
    try:
        return proc.pid == 2 or proc.ppid() == 2
    except psutil.Error:
        return True


def survivors(before: set[tuple[int, float]], exempt_roots=()) -> list[str]:
    """Processes started after ``before`` that are alive now (zombies excluded), as 'pid name cmdline'."""
    roots = set(exempt_roots)
    me = psutil.Process()
    out = []
    for p in psutil.process_iter(["pid", "create_time", "name", "cmdline", "status"]):
        if (p.info["pid"], p.info["create_time"]) in before or p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == me.pid:
            continue
        if _kernel_thread(p) or not _ours(p.info):
            continue
        if _exempt(p, roots):
            continue
        out.append(f"{p.pid} {p.info['name']} {' '.join(p.info['cmdline'] or [])[:120]}")
    return out


def assert_none_left(before: set[tuple[int, float]], exempt_roots=(), settle_s: float = 15.0) -> None:
    """Wait (bounded) for processes that are already exiting, then fail on any that stayed."""
    deadline = time.monotonic() + settle_s
    left = survivors(before, exempt_roots)
    while left and time.monotonic() < deadline:
        time.sleep(0.3)
        left = survivors(before, exempt_roots)
    assert not left, f"processes left behind: {left}"
