"""Files burst writes and later reads back (state, cost, metrics, provenance, scan tables).

Every write goes to a temporary file in the same directory and is renamed over the old one, so a
reader sees the old file or the new one, never half of one, whatever kills the writer. A file that
is damaged all the same (a full disk, an editor) is one line naming it, not a traceback.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import BurstError


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


def read_json(path: Path, what: str) -> Any:
    """The JSON in ``path``; one line (exit code 1) when it is missing or damaged."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BurstError(f"{what} {path} is missing", exit_code=1) from None
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else f"not valid JSON: {exc}"
        raise BurstError(f"{what} {path} is unreadable ({why}); remove it or collect the run again", exit_code=1) from None

