"""What the server does to a member's cluster or run on its own account, run as that member with the
member's state directory: ``python -m burst.server.act stop NAME REASON`` (the team's money ran
out, an admin stopped it) and ``python -m burst.server.act revive RUN`` (the run's controller is
gone: its lock in the database is free, ``burst.server.guard.RunKeeper``).

A stop asks every run training on the cluster to stop first (the request the budget guard writes:
the workers agree on a step and checkpoint it); the cluster goes when they have, or when the
checkpoint reserve has passed."""

from __future__ import annotations

import sys
import time

from ..errors import BurstError
from ..home import state
from ..home.state import ClusterHandle, RunRecord
from ..lifecycle.budget import CHECKPOINT_RESERVE_S


def stop(name: str, reason: str, poll_s: float = 1.0) -> int:
    from .. import api
    from ..runtime.job import BUDGET_REQUEST, RunFiles

    handle = state.load(ClusterHandle, name)
    if handle is None:
        print(f"cluster {name} is gone already")
        return 0
    training = [r.run_id for r in state.load_all(RunRecord, []) if r.cluster == name and r.state == "RUNNING"]
    for run_id in training:
        try:
            RunFiles(handle.storage_uri, run_id).ask_to_stop(BUDGET_REQUEST)
            print(f"run {run_id}: asked to checkpoint and stop ({reason})")
        except Exception as exc:  # noqa: BLE001 - whatever the store said: the cluster goes at the reserve's end all the same
            print(f"run {run_id}: the stop request could not be written ({exc.__class__.__name__}); the cluster goes at once")
    deadline = time.time() + (CHECKPOINT_RESERVE_S if training else 0)
    while time.time() < deadline:
        records = {r.run_id: r for r in state.load_all(RunRecord, [])}
        if all(records.get(run_id) is None or records[run_id].state != "RUNNING" for run_id in training):
            break
        time.sleep(poll_s)
    if state.load(ClusterHandle, name) is None:  # the run's own follower took it down after its final checkpoint
        print(f"cluster {name} taken down by its run ({reason})")
        return 0
    try:
        api.down(name)
    except BurstError as exc:
        print(f"cluster {name} could not be taken down: {exc}")
        return 1
    print(f"cluster {name} taken down ({reason})")
    return 0


def revive(run_id: str) -> int:
    """Start the run's controller again unless one runs (the member's own checks, as ``burst status`` makes them)."""
    from ..unattended import managed

    for started in managed.revive(only=run_id):
        print(f"the controller of managed run {started} started again")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "stop":
        sys.exit(stop(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 3 and sys.argv[1] == "revive":
        sys.exit(revive(sys.argv[2]))
    sys.exit("usage: python -m burst.server.act stop NAME REASON | revive RUN")
