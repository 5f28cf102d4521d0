"""Where a node keeps a run's copies and temporary files: ``<tmp>/burst-<uid>/<kind>/<run-id>``.

A shared node's temp directory belongs to everybody: a fixed path there could have been made
beforehand by another user (who could then read or swap what burst writes), or hold a partial copy
that a killed worker left. So the root is created private (mode 0700) and checked to be this
user's own before every use, and a copy is used only when it is marked complete (the mark is
written after the files, and the copy appears under its name in one rename), else made again.

A run's processes remove its scratch when they end, but a killed one cannot: Slurm SIGKILLs a
cancelled allocation after its KillWait, a keeper ends a cluster at its lease's end, a node's
worker is lost. Each process that asks for a run's scratch therefore holds a shared lock on
``<root>/held/<run-id>`` until it exits (the kernel releases it however the process ends), and
``sweep`` removes the scratch of every run that no living process holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from ..errors import BurstError

COMPLETE = ".complete"


def private_dir(path: Path) -> Path:
    """``path`` as a directory of this user's that nobody else may enter (made so when missing)."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.lstat()  # a symlink planted at the path is refused, not followed
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else f"owner uid {st.st_uid}, mode {oct(st.st_mode & 0o777)}"
        raise BurstError(f"{path} is not a directory private to this user ({kind}); remove it, or set TMPDIR "
                         f"(XDG_RUNTIME_DIR for Ray's sockets) to a directory of yours", exit_code=1)
    return path


def root() -> Path:
    """This user's private scratch root on this node."""
    return private_dir(Path(tempfile.gettempdir()) / f"burst-{os.getuid()}")


# A run's scratch, by kind (``<root>`` also holds ``synthetic``, events kept across runs, and, where
# XDG_RUNTIME_DIR is unset, Ray's session directories: neither is a run's, neither is swept).
KINDS = ("checkpoints", "data", "work", "tpu-checkpoints", "pod-data")
_held: dict[Path, int] = {}  # a run's lock -> its open descriptor, held while this process lives


def run_path(kind: str, run_id: str) -> Path:
    """``<root>/<kind>/<run_id>`` (its parents private; the directory itself is not made), held by
    this process from now on, so that no ``sweep`` removes it while this process lives."""
    assert kind in KINDS and "/" not in run_id and not run_id.startswith(".") and run_id
    hold(run_id)
    return private_dir(root() / kind) / run_id


def hold(run_id: str) -> None:
    """Hold ``run_id``'s scratch on this node for the rest of this process (``hold_lock``)."""
    hold_lock(private_dir(root() / "held") / run_id)


def hold_lock(lock: Path) -> None:
    """A shared lock on the file ``lock`` for the rest of this process: the kernel lets it go however
    the process ends. A sweep that took the lock first removes the file; a lock then taken on the
    removed file is let go and taken again on the new one."""
    if lock in _held:
        return
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if _is_current(fd, lock):
            _held[lock] = fd
            return
        os.close(fd)  # swept between our open and our lock


def _is_current(fd: int, lock: Path) -> bool:
    try:
        return os.stat(lock).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def unheld(lock: Path) -> Iterator[bool]:
    """True, holding ``lock`` exclusively, when no living process holds it (it is removed on the
    way out: remove what it guards inside); False when one does."""
    if lock in _held:
        yield False  # this process's own
        return
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False  # a living process holds it
            return
        if not _is_current(fd, lock):
            yield False  # another sweep removed it, and a process may hold the new one
            return
        yield True
        lock.unlink(missing_ok=True)
    finally:
        os.close(fd)


def release_all() -> None:
    """Let go of every hold of this process (it is ending), and remove every lock on this node that
    nobody holds and that guards no scratch (its workers' too, which ended before it). Scratch
    that is left stays for the next sweep (a run whose results could not be published keeps its
    work copy until then)."""
    for lock in list(_held):
        os.close(_held.pop(lock))
    base = root()
    for lock in private_dir(base / "held").iterdir():
        if not any((base / kind / lock.name).exists() for kind in KINDS):
            with unheld(lock):
                pass


def sweep() -> list[str]:
    """Remove the scratch of every run on this node that no living process holds; returns the run
    ids removed. Safe beside runs in progress: a held run is left."""
    base = root()
    kinds = [base / kind for kind in KINDS if (base / kind).is_dir()]
    held_dir = private_dir(base / "held")
    names = {entry.name for kind in kinds for entry in kind.iterdir() if not entry.name.startswith(".")}  # `.x.*`: a copy being filled
    names |= {entry.name for entry in held_dir.iterdir()}
    removed = []
    for name in sorted(names):
        with unheld(held_dir / name) as free:
            if free:
                for kind in kinds:
                    shutil.rmtree(kind / name, ignore_errors=True)
                    for partial in kind.glob(f".{name}.*"):  # a copy a killed worker was filling
                        shutil.rmtree(partial, ignore_errors=True)
                removed.append(name)
    return removed


def fresh(path: Path) -> Path:
    """``path`` empty and private: whatever an earlier attempt left there is removed first."""
    shutil.rmtree(path, ignore_errors=True)
    return private_dir(path)


def filled(dest: Path, fill: Callable[[Path], None]) -> Path:
    """``dest`` holding what ``fill(directory)`` writes, made once per node and reused while complete.

    Several workers of a node may ask at once: each fills a temporary directory beside ``dest`` and
    the first rename wins; a copy without the mark (cut short) is replaced.
    """
    if (dest / COMPLETE).exists():
        return dest
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        fill(tmp)
        (tmp / COMPLETE).touch()
        if dest.exists() and not (dest / COMPLETE).exists():
            shutil.rmtree(dest, ignore_errors=True)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / COMPLETE).exists():  # not another worker's finished copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
