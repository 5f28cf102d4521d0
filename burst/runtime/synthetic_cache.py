"""Synthetic Monte Carlo made once per node and copied into each run's storage.

Generating the default 3,000 events takes 25 s on a 2-core machine (two files at a time), and every new
cluster (``burst run`` starts one per run) has a new storage directory. The job keeps one copy per
node in its private scratch root (``scratch``: ``<tmp>/burst-<uid>/synthetic``), named after the
dataset and a fingerprint of the workload's code, so that a changed generator makes new events
instead of serving stale ones. The run's storage still gets its own copy: what the run trained on
stays with the run, and a corrupted run copy cannot reach the cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from . import scratch


def fingerprint(package_dir: Path) -> str:
    """A short hash of the workload's Python sources (the generator and everything it imports from its package)."""
    h = hashlib.sha256()
    for path in sorted(Path(package_dir).rglob("*.py")):
        h.update(path.relative_to(package_dir).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def prepared(dest: Path, name: str, package_dir: Path, make: Callable[[Path], tuple[Path, Path]]) -> tuple[tuple[Path, Path], bool]:
    """``make(dest)``'s (training, held-out) directories, the events copied from this node's cache
    when it holds them (made there first when not); and whether they were generated just now.

    ``make`` writes the dataset under a directory, or returns at once when it is already there
    (the workloads' ``prepare_synthetic``). A ``dest`` that holds files is left to ``make`` (it
    reuses them or refuses a different dataset). Where the cache cannot be written (a full disk,
    a read-only temp directory), the events are made in ``dest`` directly."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        return make(dest), False
    made = []

    def fill(directory: Path) -> None:
        make(directory)
        made.append(True)

    try:
        cached = scratch.filled(scratch.private_dir(scratch.root() / "synthetic") / f"{name}-{fingerprint(package_dir)}", fill)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
        try:  # copied beside it, then renamed: a copy cut short is never taken for the dataset
            shutil.copytree(cached, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns(scratch.COMPLETE))
            os.rename(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        return make(dest), True
    return make(dest), bool(made)
