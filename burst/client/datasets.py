"""Datasets staged once per store: a training set copied to a store (a directory, a bucket, a site
claim) goes under its content hash, ``<store>/datasets/<key>/files/``, with a completion marker,
``COMPLETE``, written last. Later runs, scan trials, resumes and moves into that store find the
marker and copy nothing once they have checked that every file it counts is there (a store's
lifecycle deletes objects by their own age, so a marker written last can outlive the files: then
the dataset is copied again). A copy old enough for that lifecycle to delete it before the cluster
that stages it ends its lease is copied again too, so that its files' age starts over: a dataset in
use never expires under its run. A copy cut short (a killed CLI, a lost connection) has no marker and
is never taken for complete: the next run copies again, over it.

The key is a sha256 over every file's relative path and full content, so two datasets that differ
in one byte never share a copy.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from ..runtime import storage

MARKER = "COMPLETE"
KEY_HEX = 20  # 80 bits of the sha256: no two datasets of one group collide
DAY_S = 86400.0
#: Lifecycle ages count whole days and rules run once a day or so: a copy is taken as expiring a day
#: before its rule's days are over.
EXPIRY_MARGIN_S = DAY_S


@dataclass(frozen=True)
class Staged:
    """A dataset on a store: where its files are, its key and the bytes this staging copied (0: it was there)."""

    uri: str
    key: str
    bytes_total: int
    bytes_copied: int
    staged_at: float = 0.0  # when the copy on the store was made (its files' age, which the store's lifecycle counts)
    renewed_from: float | None = None  # the previous copy's time when it was copied again before it could expire


def _files(src: Path) -> list[Path]:
    return sorted(p for p in src.rglob("*") if p.is_file())


def content_key(src: Path) -> str:
    """The dataset's content hash: relative paths and bytes of every file under ``src``."""
    h = hashlib.sha256()
    for f in _files(src):
        h.update(str(f.relative_to(src)).encode() + b"\0")
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:KEY_HEX]


def location(store: str, key: str) -> str:
    return storage.join(store, "datasets", key)


@dataclass(frozen=True)
class Listed:
    """A dataset found on a store: complete (its marker read back) or a copy cut short."""

    store: str
    key: str
    uri: str
    complete: bool
    bytes: int = 0
    files: int = 0
    staged_at: float | None = None
    source: str | None = None


def listed(store: str) -> list[Listed]:
    """The datasets on ``store``, complete or not."""
    out = []
    for key in storage.list_dirs(storage.join(store, "datasets")):
        where = location(store, key)
        marker = storage.join(where, MARKER)
        info = _read_marker(marker) if storage.exists(marker) else None  # a damaged marker: not complete
        if info is not None:
            out.append(Listed(store, key, storage.join(where, "files"), True, info["bytes"], int(info.get("files") or 0),
                              info.get("staged_at"), info.get("source")))
        else:
            out.append(Listed(store, key, storage.join(where, "files"), False))
    return out


def remove(store: str, key: str) -> None:
    """Delete a dataset from a store: its marker first, so that what is half deleted is never taken for complete."""
    where = location(store, key)
    storage.remove(storage.join(where, MARKER))
    storage.remove_tree(where)


def expires_before(staged_at: float, days: int | None, until: float | None) -> bool:
    """Whether a copy made at ``staged_at`` may be deleted by a lifecycle of ``days`` before ``until``
    (None days: the store deletes nothing; None until: no end known, so nothing is checked)."""
    return days is not None and until is not None and staged_at + days * DAY_S - EXPIRY_MARGIN_S < until


def stage(src: Path, store: str, *, in_use_until: float | None = None, datasets_days: int | None = None) -> Staged:
    """The local dataset directory ``src`` on ``store``: copied under its key unless a complete copy
    is already there that the store's lifecycle (``datasets_days``) keeps until ``in_use_until`` (the
    lease's end of the cluster that reads it); an older one is copied again, its files overwritten
    with the same bytes, which starts their age over (GCS counts an object's age from its creation,
    Azure from its last modification), and its marker written last with the new time."""
    src = Path(src).resolve()
    key = content_key(src)
    where = location(store, key)
    files = storage.join(where, "files")
    local = _files(src)
    total = sum(f.stat().st_size for f in local)
    marker = storage.join(where, MARKER)
    renewed_from = None
    if storage.exists(marker):
        info = _read_marker(marker)
        if info is not None and storage.tree_stats(files) == (int(info.get("files") or 0), int(info.get("bytes") or 0)):
            staged_at = float(info.get("staged_at") or 0.0)
            if not expires_before(staged_at, datasets_days, in_use_until):
                return Staged(files, key, total, 0, staged_at)
            renewed_from = staged_at  # whole but expiring: the marker stays, every file is rewritten with the same bytes
        else:
            storage.remove(marker)  # the marker outlived files the store's lifecycle deleted: copied again, the marker last
    now = time.time()
    storage.copy_dir(str(src), files)
    storage.write_text(marker, json.dumps({"key": key, "bytes": total, "files": len(local), "source": str(src), "staged_at": now}))
    return Staged(files, key, total, total, now, renewed_from)


def _read_marker(marker: str) -> dict | None:
    """A marker's record; None for a damaged one (not complete)."""
    try:
        info = json.loads(storage.read_text(marker))
    except (ValueError, UnicodeDecodeError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("bytes"), int) else None
