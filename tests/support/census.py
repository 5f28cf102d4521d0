"""A process census independent of burst's own process finder.

burst finds a cluster's processes by a marker in their environment; a check that uses the same
finder cannot see a process that lost the marker. The census instead snapshots every process on
the machine (PID and start time) and later lists those started since that are still alive,
whatever their environment, ignoring only the descendants of processes the caller exempts
(a cluster that is meant to outlive the test). It counts the processes a test of this project can
start: anything run from this Python environment, and Ray's own binaries and renamed workers
(``raylet``, ``gcs_server``, ``ray::...``), not a shell that someone else started meanwhile.

Where the machine lets this process make a control group (root, cgroup v2 or v1's ``pids``), each
test process (pytest, or each of pytest-xdist's workers) moves itself into a group of its own at
start (``join_own_group``), and the census then counts only the processes in that group and the
groups below it. A child cannot leave its group by re-parenting, double-forking or dropping its
environment (only by writing to the group files, which nothing burst starts does), so the check
stays as strong, and two test processes can share the machine without either seeing the other's
clusters. Without a group the census is machine-wide, and the suite runs one test at a time.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil

_OURS = (sys.prefix, str(Path(sys.executable).parent))
GROUP_PREFIX = "burst-tests-"
_group: Path | None = None


def _hierarchy() -> Path | None:
    """This process's own cgroup directory, in cgroup v2 or else v1's ``pids`` hierarchy, if writable."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    own = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        own["v2" if controllers == "" else controllers] = path
    for key, fstype, option in (("v2", "cgroup2", None), ("pids", "cgroup", "pids")):
        if key not in own:
            continue
        for mount in mounts:
            fields = mount.split()
            sep = fields.index("-")
            if fields[sep + 1] != fstype or (option and option not in fields[-1].split(",")):
                continue
            root, point, path = fields[3], fields[4], own[key]
            rel = path[len(root):] if root != "/" and path.startswith(root) else path
            found = Path(point + rel.rstrip("/")) if rel not in ("", "/") else Path(point)
            if os.access(found / "cgroup.procs", os.W_OK):
                return found
    return None


def groups_available() -> bool:
    """Whether test processes can be kept apart by control groups here."""
    return _hierarchy() is not None


def join_own_group() -> Path | None:
    """Move this process into a new control group below its own; children it starts follow it."""
    global _group
    parent = _hierarchy()
    if parent is None:
        return None
    for stale in parent.glob(GROUP_PREFIX + "*"):  # left by a test run that was killed: empty ones only
        try:
            if not psutil.pid_exists(int(stale.name[len(GROUP_PREFIX):])):
                _remove_group(stale)
        except (OSError, ValueError):
            pass
    group = parent / f"{GROUP_PREFIX}{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return None
    _group = group
    return group


def leave_own_group() -> None:
    """Back to the parent group, and the group removed if nothing is left in it."""
    global _group
    if _group is None:
        return
    try:
        (_group.parent / "cgroup.procs").write_text(str(os.getpid()))
        _remove_group(_group)
    except OSError:
        pass
    _group = None


def _remove_group(group: Path) -> None:
    for sub in sorted((d for d in group.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
        sub.rmdir()
    group.rmdir()


def group_pids(group: Path) -> set[int]:
    """PIDs in ``group`` and every group below it. The groups below come and go while we look (a
    break's nested pytest removes its own when it ends): ``os.walk`` skips one that vanished
    between its parent's listing and its own, where ``Path.rglob`` raised FileNotFoundError and
    failed the test that only asked."""
    found: set[int] = set()
    for directory, _subgroups, _files in os.walk(group):
        try:
            found.update(int(pid) for pid in Path(directory, "cgroup.procs").read_text().split())
        except OSError:
            continue
    return found


def members() -> set[int] | None:
    """PIDs in this process's group and every group below it (None: no group, count the machine)."""
    return None if _group is None else group_pids(_group)


def cpu_seconds() -> float | None:
    """CPU time used so far by this process's group, every process ever in it and its groups below
    (cgroup v2's ``cpu.stat``, kept by the kernel for exited processes too); None without a v2 group."""
    try:
        for line in (_group / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    except (OSError, TypeError):
        pass
    return None


def _ours(info: dict) -> bool:
    cmdline = " ".join(info.get("cmdline") or [])
    name = info.get("name") or ""
    return any(root in cmdline for root in _OURS) or name.startswith(("ray", "raylet", "gcs_server")) or cmdline.startswith("ray")


def snapshot() -> set[tuple[int, float]]:
    found = set()
    for p in psutil.process_iter(["pid", "create_time"]):
        found.add((p.info["pid"], p.info["create_time"]))
    return found


def started_since(before: set[tuple[int, float]], cmdline: list[str]) -> list[psutil.Process]:
    """This process's group's processes started after ``before`` whose command line is ``cmdline``
    (a stand-in a test left asking): another worker's, or anything else on the machine, are not
    a test's to wait for or kill. Without a group, the machine's."""
    in_group = members()
    return [p for p in psutil.process_iter(["cmdline", "create_time"]) if p.info["cmdline"] == cmdline
            and (p.pid, p.info["create_time"]) not in before and (in_group is None or p.pid in in_group)]


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
    in_group = members()
    out = []
    for p in psutil.process_iter(["pid", "create_time", "name", "cmdline", "status"]):
        if in_group is not None and p.info["pid"] not in in_group:
            continue
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
