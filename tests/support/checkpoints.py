"""Checkpoint directories as the trainers write them, and a directory tree's contents: what the
store and controller tests write into stores and compare after a copy."""

from __future__ import annotations

import json
import os
from pathlib import Path


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def checkpoint(root: Path, name: str, epochs: int, step: int = 0, complete: bool = True) -> Path:
    """A checkpoint directory as the trainers write it: history.json and a TensorFlow index and data file."""
    d = root / name
    d.mkdir(parents=True)
    history = {"history": [{"epoch": e + 1} for e in range(epochs)], **({"position": {"step": step}} if step else {})}
    (d / "history.json").write_text(json.dumps(history))
    (d / "gan3d.index").write_bytes(b"index")
    if complete:
        (d / "gan3d.data-00000-of-00001").write_bytes(os.urandom(1000))
    return d
