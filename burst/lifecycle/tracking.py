"""A recorded run of either kind as its cluster says it is now: the one entry point for `burst
status` and `burst report`, which hands a scan to ``burst.lifecycle.scans`` and a training run to
``burst.lifecycle.runs`` (so that neither of those has to know the other's records)."""

from __future__ import annotations

from typing import Optional

from . import runs, scans
from ..home.state import ClusterHandle, RunRecord


def _module(record: RunRecord):
    return scans if record.kind == "scan" else runs


def refresh(record: RunRecord, handles: dict[str, ClusterHandle], reached: bool = False) -> RunRecord:
    """Ask the cluster for the state of a run or scan that is not finished yet (see ``runs.refresh``)."""
    return _module(record).refresh(record, handles, reached)


def collect_finished(record: RunRecord, handle: Optional[ClusterHandle] = None) -> RunRecord:
    """Fetch the results of a run or scan that succeeded while nothing followed it."""
    return _module(record).collect_finished(record, handle)
