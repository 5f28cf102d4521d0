"""What this machine has staged where: the record that lets ``burst plan`` price staging at 0 h and
$0 for a store that already holds a dataset, without asking any cloud (the plan stays fast and
offline) and without hashing tens of GB again.

A dataset directory is known by a signature of its files' paths, sizes and modification times
(cheap: a ``stat`` per file); the first staging hashes its content (``client.datasets``) and
records signature -> key, and key -> the stores holding it. A record is only a hint for the plan:
the staging itself always checks the store's completion marker, so a store emptied behind burst's
back costs a copy, never a wrong dataset.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from . import state
from .records import read_json, write_json_atomic
from .state import Timestamp

FILE = "staged.json"
MAX_SIGNATURES = 1000  # the newest are kept


class Staging(BaseModel):
    model_config = ConfigDict(extra="forbid")

    store: str
    key: str
    bytes: int = Field(ge=0)
    staged_at: Timestamp


class StagedIndex(BaseModel):
    model_config = ConfigDict(extra="forbid")

    signatures: dict[str, str] = {}  # dataset directory signature -> content key
    stagings: list[Staging] = []


def signature(src: Path) -> str:
    """Paths, sizes and modification times of every file under ``src`` (no content read)."""
    h = hashlib.sha256()
    root = Path(src).resolve()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:32]


def _path() -> Path:
    return state.home() / FILE


def _load() -> StagedIndex:
    path = _path()
    if not path.exists():
        return StagedIndex()
    return read_json(path, "the record of staged datasets", f"remove it (rm {path}); the next staging writes it again", model=StagedIndex)


def _norm(store: str) -> str:
    return str(store).rstrip("/")


def remember(src: Path, key: str, store: str, nbytes: int, staged_at: Optional[float] = None) -> None:
    """``src`` (content key ``key``) is complete on ``store``, copied there at ``staged_at`` (a reuse
    keeps the copy's own time: the store's lifecycle counts its files' age from it, not from this run)."""
    with state.locked():
        index = _load()
        index.signatures.pop(signature(src), None)
        index.signatures[signature(src)] = key
        if len(index.signatures) > MAX_SIGNATURES:
            index.signatures = dict(list(index.signatures.items())[-MAX_SIGNATURES:])
        index.stagings = [s for s in index.stagings if not (s.key == key and _norm(s.store) == _norm(store))]
        index.stagings.append(Staging(store=_norm(store), key=key, bytes=nbytes, staged_at=staged_at or time.time()))
        write_json_atomic(_path(), index.model_dump(mode="json"))


def forget(store: str, key: str) -> None:
    """``key`` is no longer on ``store`` (``burst datasets --remove``)."""
    with state.locked():
        index = _load()
        index.stagings = [s for s in index.stagings if not (s.key == key and _norm(s.store) == _norm(store))]
        write_json_atomic(_path(), index.model_dump(mode="json"))


def holding(src: Optional[str]) -> tuple[tuple[str, float], ...]:
    """(store, staged_at) of every store this machine staged the dataset at ``src`` on, as far as
    burst's record knows (nothing for a bucket URI, a directory burst never staged, or one changed since)."""
    if src is None or "://" in str(src) or not Path(src).is_dir():
        return ()
    index = _load()
    key = index.signatures.get(signature(Path(src)))
    return tuple((s.store, s.staged_at) for s in index.stagings if s.key == key) if key else ()
