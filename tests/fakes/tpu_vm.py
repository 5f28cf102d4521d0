"""A TPU VM's cloud boundary, for running a rendered startup script on this machine: the metadata
server (``curl``; host 0 of a one-host slice), Secret Manager and Cloud Storage (``gcloud``), and
``python3`` whose ``-m pip`` installs nothing (burst and Ray are installed here already) and whose
``-m infra.keeper`` is recorded, not started (it would delete the slice through the TPU API).
Every call is appended to one log, one line each, named by its tool."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

CURL = """#!/bin/sh
echo "curl $*" >> "$FAKE_TPU_LOG"
case "$*" in
  *agent-worker-number*) echo 0 ;;
  *worker-network-endpoints*) echo "w0:0:127.0.0.1" ;;
  *) exit 22 ;;
esac
"""
# Secret Manager answers with the secret's value; storage copies nothing.
GCLOUD = """#!/bin/sh
echo "gcloud $*" >> "$FAKE_TPU_LOG"
case "$*" in
  "secrets versions access latest --secret=$FAKE_SECRET_ID --project=$FAKE_PROJECT") cat "$FAKE_SECRET_FILE" ;;
  "storage cp "*) exit 0 ;;
  *) echo "gcloud: unexpected call: $*" >&2; exit 1 ;;
esac
"""
PYTHON3 = f"""#!/bin/sh
echo "python3 $*" >> "$FAKE_TPU_LOG"
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "infra.keeper" ]; then exit 0; fi
exec {sys.executable} "$@"
"""


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def boundary(directory: Path, secret_id: str, project: str, secret: str) -> dict[str, str]:
    """Write the stand-ins into ``directory/bin``; returns the environment that puts them first on
    ``PATH`` (then this Python's own ``bin``, where ``ray`` is) and names the log ``directory/calls.log``."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("curl", CURL), ("gcloud", GCLOUD), ("python3", PYTHON3)):
        executable(bin_dir / name, text)
    (directory / "secret").write_text(secret)
    return {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "FAKE_TPU_LOG": str(directory / "calls.log"),
            "FAKE_SECRET_ID": secret_id, "FAKE_PROJECT": project, "FAKE_SECRET_FILE": str(directory / "secret")}


def calls(directory: Path) -> list[str]:
    log = directory / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


# `pgrep` as procps answers `pgrep -x raylet` on a host whose raylet died: nothing found, exit 1.
PGREP_NO_RAYLET = """#!/bin/sh
echo "pgrep $*" >> "$FAKE_TPU_LOG"
exit 1
"""


def stop_watchers(directory: Path) -> int:
    """End what a script run with ``boundary(directory, ...)`` left running in the background (the
    startup script's Ray watcher, ``keep_ray``, runs for the slice's life); how many were ended."""
    import psutil

    log = str(directory / "calls.log")
    ended = 0
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "keep-ray" in (proc.info["cmdline"] or []) and proc.environ().get("FAKE_TPU_LOG") == log:
                for child in proc.children(recursive=True):
                    child.kill()
                proc.kill()
                ended += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return ended
