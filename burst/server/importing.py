"""``burst server admin import USER --from DIR``: a member's own ``~/.burst`` taken into the server,
so that what they ran alone (finished runs, their history and reports, clusters on the group's
targets, the datasets they staged) is theirs on the server too, and charged to their team from now.

Only what the server can take over is taken, and only records whose paths are the member's own
directory or the site's storage (a record naming another member's directory or a server file, or
a link among its files, would hand those to the member's processes): a run still going, or a local cluster, is controlled
on the machine it came from, and importing it would put two controllers on one run; each is named
in one line with what to do, and nothing of it is copied. A name the member already has on the
server is left as it is there."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from pydantic import ValidationError
from sqlalchemy.orm import Session

from ..errors import BurstError
from ..home import state
from ..home.records import Damaged
from ..home.staged import FILE as STAGED_FILE
from ..home.state import ClusterHandle, RunRecord
from ..lifecycle.runs import FINISHED
from . import accounts, ledger
from .verbs import home_of

STAYS_WHERE_IT_RUNS = ("local",)  # a cluster of processes on the machine it was started from


def _site_storage(data_dir: Path) -> list[Path]:
    """The directories of the server's machine the site's policy names as storage (its admins')."""
    from .site_policy import site_document

    site = site_document(data_dir)
    named = [(site.get("onprem") or {}).get("storage")] + list(((site.get("stores") or {}).get("named") or {}).values())
    return [d for d in map(_local_dir, named) if d is not None]


def _local_dir(value) -> Optional[Path]:
    """A directory of this machine that a store names (a path or a file:// URI); None for a bucket or nothing."""
    text = str(value or "")
    if text.lower().startswith("file://"):
        text = text[len("file://"):]
    return Path(text).resolve() if text.startswith("/") else None


@contextmanager
def _as_member(home: Path) -> Iterator[None]:
    """burst's state functions on the member's directory (this admin command is one process, one thread)."""
    before = os.environ.get("BURST_HOME")
    os.environ["BURST_HOME"] = str(home)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("BURST_HOME", None)
        else:
            os.environ["BURST_HOME"] = before


def _moved(value, old: str, new: str):
    """Every path inside a record that pointed into the old directory, pointing into the member's on the server."""
    if isinstance(value, str):
        return new + value[len(old):] if value == old or value.startswith(old + os.sep) else value
    if isinstance(value, dict):
        return {k: _moved(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_moved(v, old, new) for v in value]
    return value


def _paths_in(value, at: str = "") -> Iterator[tuple[str, str]]:
    """(field, path) for every path of this machine inside a record: an absolute path, or a file:// URI."""
    if isinstance(value, str):
        if value.startswith("/") or value.lower().startswith("file://"):
            yield at, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _paths_in(v, f"{at}.{k}" if at else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths_in(v, f"{at}[{i}]")


def _elsewhere(record: dict, allowed: list[Path]) -> Optional[str]:
    """The first path of ``record`` outside ``allowed`` (the member's directory on the server, the
    site's storage the admins named), as ``field path``; None when there is none. A record names
    the files its member's processes read and write: one naming another member's directory or a
    server file would hand it to them."""
    for field, path in _paths_in(record):
        resolved = _local_dir(path)
        if resolved is not None and not any(resolved == root or root in resolved.parents for root in allowed):
            return f"{field} {path}"
    return None


def _no_links(directory: str, names: list[str]) -> list[str]:
    """What ``copytree`` leaves out of a member's files: links, which would copy (or point at) what they point to."""
    return [n for n in names if os.path.islink(os.path.join(directory, n))]


def import_home(db: Session, data_dir: Path, user_name: str, source: Path) -> list[str]:
    """Take ``source`` (a burst state directory) into ``user_name``'s directory on the server; returns what was done, line by line."""
    user = accounts.user_named(db, user_name)
    source = source.expanduser().resolve()
    if not (source / "runs").is_dir() and not (source / "clusters").is_dir():
        raise BurstError(f"{source} is not a burst state directory (no runs/ or clusters/ in it): give the member's ~/.burst")
    home = home_of(data_dir, user.uid).resolve()
    old, new = str(source), str(home)
    allowed = [home] + _site_storage(data_dir)
    said: list[str] = []
    with _as_member(home):
        for path in sorted((source / "runs").glob("*.json")):
            try:
                run = RunRecord.model_validate_json(path.read_text())
            except (ValidationError, ValueError, OSError) as exc:
                said.append(f"run record {path.name}: damaged ({exc.__class__.__name__}), not imported")
                continue
            if run.state not in FINISHED:
                said.append(f"run {run.run_id} is {run.state} on that machine: not imported; let it end there (or stop it), then import again")
                continue
            if state.load(RunRecord, run.run_id) is not None:
                said.append(f"run {run.run_id}: already on the server, left as it is")
                continue
            record = _moved(run.model_dump(mode="json"), old, new)
            outside = _elsewhere(record, allowed)
            if outside is not None:
                said.append(f"run {run.run_id}: its record names {outside}, outside the member's directory and the site's storage: not imported")
                continue
            with state.locked():
                state.save(RunRecord.model_validate(record))
            managed = source / "managed" / f"{run.run_id}.json"
            if managed.is_file():
                (home / "managed").mkdir(mode=0o700, exist_ok=True)
                shutil.copy2(managed, home / "managed" / managed.name)
            said.append(f"run {run.run_id} ({run.state}) imported")
        for path in sorted((source / "clusters").glob("*.json")):
            try:
                handle = ClusterHandle.model_validate_json(path.read_text())
            except (ValidationError, ValueError, OSError):
                said.append(f"cluster record {path.name}: damaged, not imported")
                continue
            if handle.provider in STAYS_WHERE_IT_RUNS:
                said.append(f"cluster {handle.name} ({handle.provider}) runs on that machine: not imported; `burst down {handle.name}` there")
                continue
            try:
                taken = state.load(ClusterHandle, handle.name)
            except Damaged:
                taken = True
            if taken is not None:
                said.append(f"cluster {handle.name}: the member has one of that name on the server already; not imported")
                continue
            record = _moved(handle.model_dump(mode="json"), old, new)
            outside = _elsewhere(record, allowed)
            if outside is not None:
                said.append(f"cluster {handle.name}: its record names {outside}, outside the member's directory and the site's storage: "
                            "not imported")
                continue
            files = source / "clusters" / handle.name
            if files.is_dir():
                shutil.copytree(files, home / "clusters" / handle.name, dirs_exist_ok=False, ignore=_no_links)
            with state.locked():
                state.save(ClusterHandle.model_validate(record))
            said.append(f"cluster {handle.name} ({handle.provider}, ${handle.hourly_usd:,.2f}/h) imported: charged to team from its start")
        staged = source / STAGED_FILE
        if staged.is_file() and not (home / STAGED_FILE).exists():
            shutil.copy2(staged, home / STAGED_FILE)
            said.append("the datasets staged from that machine imported (plans price them as staged)")
    ledger.sync(db, user, home)
    return said
