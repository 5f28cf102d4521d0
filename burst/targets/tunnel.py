"""A tunnel to a Ray head that burst owns for the length of one command: started, waited for,
and stopped (with everything it started) when the command is done."""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from contextlib import contextmanager
from typing import IO, Callable, Iterator

from ..errors import BurstError
from ..runtime.ray_head import free_port

READY_S = 60.0
STDERR_LINES = 20  # the tunnel's last lines of stderr kept for the error message


def _drain(stream: IO[bytes], last: deque) -> threading.Thread:
    """Read the tunnel's stderr as it comes, keeping only its last lines: a pipe nobody reads
    blocks the writer once 64 KiB pile up (a long port-forward logs a line per broken connection)."""

    def read() -> None:
        for line in iter(stream.readline, b""):
            last.append(line.decode(errors="replace").rstrip())
        stream.close()

    thread = threading.Thread(target=read, name="tunnel-stderr", daemon=True)
    thread.start()
    return thread


@contextmanager
def tunnel(command_for: Callable[[int], list[str]], name: str, hint: str) -> Iterator[str]:
    """Run ``command_for(local_port)`` (a port forward to the head's dashboard) until the head
    answers through it; yields the local dashboard URL."""
    port = free_port()
    proc = subprocess.Popen(command_for(port), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    last: deque = deque(maxlen=STDERR_LINES)
    reader = _drain(proc.stderr, last)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + READY_S
        while True:
            if proc.poll() is not None:
                reader.join(5)  # its last words
                err = [line for line in last if line.strip()]
                raise BurstError(f"the tunnel to cluster {name!r} closed: {(err or ['no output'])[-1]}", exit_code=1)
            try:
                with urllib.request.urlopen(url + "/api/version", timeout=2):
                    break
            except urllib.error.HTTPError:
                break  # the head answered (e.g. 401 without a token): the tunnel is up
            except (urllib.error.URLError, OSError):
                if time.time() > deadline:
                    raise BurstError(f"the Ray head of {name!r} did not answer through the tunnel within {READY_S:.0f} s; {hint}",
                                     exit_code=1) from None
                time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
