"""Files burst writes and later reads back (state, cost, metrics, provenance, scan tables).

Every write goes to a temporary file in the same directory and is renamed over the old one, so a
reader sees the old file or the new one, never half of one, whatever kills the writer. A file that
is damaged all the same (a full disk, a sync tool, a hand edit) is read back through one loader,
``read_record``: it checks the kind of path (a file, not a directory), the size, the text and the
JSON, and, given a pydantic model, the values (finite, positive where a price, speed or size must
be); whatever is wrong is one line (``Damaged``) naming the file and the fix, never a traceback and
never a number that cannot be true passed on. ``ensure_dir`` does the same for the directories
burst keeps its records in.
"""

from __future__ import annotations

import json
import os
import tempfile
import stat
from pathlib import Path
from typing import Any, Optional, Type, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import BurstError

M = TypeVar("M", bound=BaseModel)
MAX_RECORD_BYTES = 16 << 20  # the largest record burst writes (a long run's history) is well under 1 MiB


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _read_umask()  # read once, at import: os.umask is process-wide and another thread may be creating files


def write_text_atomic(path: Path, text: str, private: bool = False) -> None:
    """``text`` in ``path``, all or nothing; ``private``: readable by the user only (else as a plain write leaves it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if not private:
            os.chmod(tmp, 0o666 & ~UMASK)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any, indent: int = 2, private: bool = False) -> None:
    write_text_atomic(path, json.dumps(data, indent=indent, default=str), private)


class Damaged(BurstError):
    """A file or directory burst reads back is not what it wrote: ``path``, ``why`` and the ``fix``, one line."""

    def __init__(self, what: str, path: Path, why: str, fix: str):
        super().__init__(f"{what} {path} is damaged ({why}); {fix}", exit_code=1)
        self.what, self.path, self.why, self.fix = what, Path(path), why, fix


def ensure_dir(path: Path, what: str, private: bool = False) -> Path:
    """``path`` as a directory, created (user-only with ``private``) when missing; ``Damaged`` when
    something else stands there (a file a sync tool left, a dangling link)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True, **({"mode": 0o700} if private else {}))
    except FileExistsError:
        raise Damaged(what, path, "a file stands where a directory must be",
                      f"move it away (mv {path} {path}.damaged) and run the command again") from None
    except OSError as exc:
        raise Damaged(what, path, exc.strerror or str(exc), "check the path and its permissions") from None
    return path


def _problem(loc: tuple, message: str) -> str:
    where = ".".join(str(part) for part in loc)
    return f"{where}: {message}" if where else message


def read_file(path: Path, what: str, fix: str, limit: Optional[int] = MAX_RECORD_BYTES) -> bytes:
    """The bytes of ``path`` once it is known to be a regular file (not a directory, a pipe that would
    block the reader, or a file where one of its directories must be) under ``limit`` bytes;
    ``Damaged`` otherwise. A missing file is ``FileNotFoundError``, for the caller to decide."""
    path = Path(path)
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise Damaged(what, path, "a directory, not a file", fix)
        if not stat.S_ISREG(info.st_mode):
            raise Damaged(what, path, "not a regular file", fix)
        if limit is not None and info.st_size > limit:
            raise Damaged(what, path, f"{info.st_size} bytes, over {limit >> 20} MiB", fix)
        return path.read_bytes()
    except FileNotFoundError:
        raise
    except NotADirectoryError:  # a file stands where one of its directories must be
        parent = next(p for p in path.parents if p.exists() and not p.is_dir())
        raise Damaged("the directory", parent, "a file stands where a directory must be",
                      f"move it away (mv {parent} {parent}.damaged) and run the command again") from None
    except OSError as exc:
        raise Damaged(what, path, exc.strerror or str(exc), fix) from None


def read_record(path: Path, what: str, fix: str, model: Optional[Type[M]] = None) -> Any:
    """The JSON record at ``path`` (an instance of ``model`` when given), read and checked.

    One loader for every record burst reads back (state, run directories, bench and calibration
    records): what ``read_file`` refuses, bytes that are not UTF-8 JSON, and values the model
    refuses (wrong type, NaN or infinite, negative, out of range) each raise ``Damaged`` naming the
    file and ``fix``. A missing file is ``FileNotFoundError``, for the caller to decide.
    """
    data = read_file(path, what, fix)
    if not data.strip():
        raise Damaged(what, path, "empty", fix)
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Damaged(what, path, f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}", fix) from None
    except (ValueError, RecursionError) as exc:
        raise Damaged(what, path, f"not valid JSON: {str(exc)[:120]}", fix) from None
    if model is None:
        return raw
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise Damaged(what, path, _problem(first["loc"], first["msg"]), fix) from None


def read_json(path: Path, what: str, fix: str = "remove it or collect the run again", model: Optional[Type[M]] = None) -> Any:
    """The JSON in ``path`` (checked by ``read_record``); one line (exit code 1) when it is missing or damaged."""
    try:
        return read_record(path, what, fix, model)
    except FileNotFoundError:
        raise BurstError(f"{what} {path} is missing", exit_code=1) from None
