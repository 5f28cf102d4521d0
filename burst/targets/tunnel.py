"""A tunnel to a Ray head that burst owns for the length of one command: started, waited for,
and stopped (with everything it started) when the command is done."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Callable, Iterator

from ..errors import BurstError
from ..runtime.ray_head import free_port

READY_S = 60.0


@contextmanager
def tunnel(command_for: Callable[[int], list[str]], name: str, hint: str) -> Iterator[str]:
    """Run ``command_for(local_port)`` (a port forward to the head's dashboard) until the head
    answers through it; yields the local dashboard URL."""
    port = free_port()
    proc = subprocess.Popen(command_for(port), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + READY_S
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.stderr else []
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
