"""Reading a workload's HDF5 files: finding them, opening them, and reading one key checked, each
failure one ``DataError`` naming the file and the key (the job turns it into "bad input data: ...")."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class DataError(ValueError):
    """A data file that cannot be used; the message names the file and the key."""


def list_files(path: Path, patterns: tuple[str, ...] = ("*.h5",)) -> list[Path]:
    """The files in a directory matching any of ``patterns`` (sorted), or the single file given."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise DataError(f"{path}: no such file or directory")
    files = sorted({f for pattern in patterns for f in path.glob(pattern)})
    if not files:
        raise DataError(f"{path}: no {' or '.join(patterns)} files found")
    return files


def open_file(path: Path):
    import h5py

    try:
        return h5py.File(path, "r")
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable HDF5 file ({exc.__class__.__name__}: {exc})") from None


def read_finite(f, path: Path, key: str, sl: slice) -> np.ndarray:
    """``f[key][sl]`` as float32, or a DataError naming the file and key (unreadable, NaN or inf)."""
    try:
        arr = np.asarray(f[key][sl], dtype=np.float32)
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: cannot read key {key!r} (truncated or corrupt file: {exc})") from None
    if not np.all(np.isfinite(arr)):
        raise DataError(f"{path}: key {key!r} contains NaN or infinite values")
    return arr
