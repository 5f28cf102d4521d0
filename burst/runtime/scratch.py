"""Where a node keeps a run's copies and temporary files: ``<tmp>/burst-<uid>/<kind>/<run-id>``.

A shared node's temp directory belongs to everybody: a fixed path there could have been made
beforehand by another user (who could then read or swap what burst writes), or hold a partial copy
that a killed worker left. So the root is created private (mode 0700) and checked to be this
user's own before every use, and a copy is used only when it is marked complete (the mark is
written after the files, and the copy appears under its name in one rename), else made again.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable

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


def run_path(kind: str, run_id: str) -> Path:
    """``<root>/<kind>/<run_id>`` (its parents private; the directory itself is not made)."""
    return private_dir(root() / kind) / run_id


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
