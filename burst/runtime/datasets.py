"""Datasets staged once per store: a training set copied to a store (a directory, a bucket, a site
claim) goes under its content hash, ``<store>/datasets/<key>/files/``, with a completion marker,
``COMPLETE``, written last. Later runs, scan trials, resumes and moves into that store find the
marker and copy nothing once they have checked that every file it counts is there (a store's
lifecycle deletes objects by their own age, so a marker written last can outlive the files: then
the dataset is copied again); a copy cut short (a killed CLI, a lost connection) has no marker and
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

from . import storage

MARKER = "COMPLETE"
KEY_HEX = 20  # 80 bits of the sha256: no two datasets of one group collide


@dataclass(frozen=True)
class Staged:
    """A dataset on a store: where its files are, its key and the bytes this staging copied (0: it was there)."""

    uri: str
    key: str
    bytes_total: int
    bytes_copied: int
    staged_at: float = 0.0  # when the copy on the store was made (its files' age, which the store's lifecycle counts)


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


def stage(src: Path, store: str) -> Staged:
    """The local dataset directory ``src`` on ``store``: copied under its key unless a complete copy
    is already there."""
    src = Path(src).resolve()
    key = content_key(src)
    where = location(store, key)
    files = storage.join(where, "files")
    total = sum(f.stat().st_size for f in _files(src))
    marker = storage.join(where, MARKER)
    if storage.exists(marker):
        info = _read_marker(marker)
        if info is not None and storage.tree_stats(files) == (int(info.get("files") or 0), int(info.get("bytes") or 0)):
            return Staged(files, key, total, 0, float(info.get("staged_at") or 0.0))
        storage.remove(marker)  # the marker outlived files the store's lifecycle deleted: copied again, the marker last
    now = time.time()
    storage.copy_dir(str(src), files)
    storage.write_text(marker, json.dumps({"key": key, "bytes": total, "files": len(_files(src)), "source": str(src), "staged_at": now}))
    return Staged(files, key, total, total, now)


def _read_marker(marker: str) -> dict | None:
    """A marker's record; None for a damaged one (not complete)."""
    try:
        info = json.loads(storage.read_text(marker))
    except (ValueError, UnicodeDecodeError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("bytes"), int) else None
