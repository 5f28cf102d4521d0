"""Notices: a cluster's warning that capacity is about to go, turned into a checkpoint.

Whatever hears the warning writes one small file, ``NOTICE``, in the cluster's own notice
directory on its storage (``root``: ``<storage>/notices/<cluster id>``; clusters that share a
storage never read each other's notices): the Slurm allocation's batch script on its ``--signal`` before the walltime (or on
``scancel``), a KubeRay pod's preStop hook when Kubernetes ends it (spot reclaim, node drain), a
TPU VM's shutdown script when GCE preempts it. Training workers read it at their regular stop
check and every replica agrees on acting on it (``training.fit_with_events``):

* ``checkpoint``: one node goes (a pod); save a checkpoint where training is, go on. Ray Train
  restarts the lost worker from it, so nothing is trained twice.
* ``stop``: the whole cluster goes (an allocation's end, a slice's preemption); save a checkpoint
  where training is and end the run, so that the next attempt goes on from that very step.

The worker that talks for the job acknowledges a notice once its checkpoint is on storage
(``NOTICE.taken`` holds the notice's id); whoever wrote the notice may wait for that before it
lets the capacity go: ``python -m burst.runtime.notice ROOT --action stop --wait 60``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Literal, Optional

NOTICE_FILE = "NOTICE"
TAKEN_FILE = "NOTICE.taken"
Action = Literal["checkpoint", "stop"]


@dataclass(frozen=True)
class Notice:
    id: str
    action: Action
    source: str
    time: float


def root(storage: str, cluster_id: str) -> str:
    """A cluster's notice directory on its storage: where its hooks post and its runs read."""
    from infra.notice_hook import notice_root  # one definition, shared with the pods' hook

    return notice_root(storage, cluster_id)


def notice_uri(storage: str) -> str:
    from . import storage as store

    return store.join(storage, NOTICE_FILE)


def write(storage: str, action: Action, source: str) -> Notice:
    """Post a notice on the cluster's storage (it replaces an earlier one)."""
    from . import storage as store

    notice = Notice(uuid.uuid4().hex[:12], action, source, time.time())
    store.write_text(notice_uri(storage), json.dumps(notice.__dict__))
    return notice


def read(storage: str) -> Optional[Notice]:
    """The notice on the cluster's storage, or None (also for a file caught half-written)."""
    from . import storage as store

    uri = notice_uri(storage)
    try:
        if not store.exists(uri):
            return None
        raw = json.loads(store.read_text(uri))
        return Notice(str(raw["id"]), raw["action"] if raw.get("action") in ("checkpoint", "stop") else "stop",
                      str(raw.get("source", "")), float(raw.get("time", 0.0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear(storage: str) -> None:
    """A new allocation on the same storage starts with no notice of the previous one."""
    from . import storage as store

    store.remove(notice_uri(storage))
    store.remove(store.join(storage, TAKEN_FILE))


def acknowledge(storage: str, notice: Notice) -> None:
    """Say that the checkpoint this notice asked for is on storage."""
    from . import storage as store

    store.write_text(store.join(storage, TAKEN_FILE), notice.id)


def taken(storage: str, notice: Notice) -> bool:
    from . import storage as store

    uri = store.join(storage, TAKEN_FILE)
    try:
        return store.exists(uri) and store.read_text(uri).strip() == notice.id
    except OSError:
        return False


def wait_taken(storage: str, notice: Notice, seconds: float, alive=lambda: True) -> bool:
    """Until the notice is acknowledged, ``seconds`` pass, or ``alive()`` says no one is left to act on it."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if taken(storage, notice):
            return True
        if not alive():
            return False
        time.sleep(0.5)
    return taken(storage, notice)


class NoticeWatch:
    """A worker's view of the notices: each one is acted on once. A ``checkpoint`` notice already
    posted when the worker starts was for a worker before it (its checkpoint is what this one
    restored); a ``stop`` notice is acted on whenever it is seen (the cluster is going)."""

    def __init__(self, storage: Optional[str]):
        self.storage = storage  # the cluster's notice directory (None: no one posts notices to this run)
        first = read(storage) if storage else None
        self.seen: set[str] = {first.id} if first is not None and first.action == "checkpoint" else set()
        self.acting: Optional[Notice] = None  # the notice being acted on (acknowledged after its checkpoint)

    def _new(self, action: Action) -> bool:
        notice = read(self.storage) if self.storage else None
        if notice is None or notice.id in self.seen or notice.action != action:
            return False
        self.seen.add(notice.id)
        self.acting = notice
        return True

    def checkpoint_now(self) -> bool:
        return self._new("checkpoint")

    def stop_now(self) -> bool:
        return self._new("stop")

    def done(self) -> None:
        """The checkpoint asked for is on storage."""
        if self.acting is not None:
            acknowledge(self.storage, self.acting)
            self.acting = None


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m burst.runtime.notice", description="post a notice on a cluster's storage")
    parser.add_argument("storage")
    parser.add_argument("--action", choices=["checkpoint", "stop"], default="checkpoint")
    parser.add_argument("--source", default="")
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the workers' checkpoint")
    a = parser.parse_args(argv)
    notice = write(a.storage, a.action, a.source)
    if a.wait > 0:
        got = wait_taken(a.storage, notice, a.wait)
        print(f"notice {notice.id}: {'checkpoint taken' if got else 'no checkpoint within the wait'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
