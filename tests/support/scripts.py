"""A test's script run in a process group of its own, so that a hang ends as a readable failure.

``subprocess.run(timeout=...)`` kills only the script: the Ray head, raylets and workers it started
live on, holding the machine's two cores for the rest of the suite, and the failure shows the
command, not what the script had printed. Here the whole group goes and the failure quotes the tail.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Sequence

import pytest


def run_script(command: Sequence[str], *, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``command`` to its end (stdout and stderr as text), or fail the test after ``timeout``
    seconds with the last 6,000 characters it printed and nothing of it left running."""
    proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the script did not finish in {timeout:.0f} s; it printed, last:\n{(out + err)[-6000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything it started and left behind
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
