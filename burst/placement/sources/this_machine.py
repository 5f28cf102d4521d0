"""Candidates on this machine: its CPUs, at the rate the workload's profile (or `burst bench`) gives."""

from __future__ import annotations

import os

from .. import estimate as est_mod
from ..candidate import Candidate
from ..profile import local_throughput
from .asked import Asked


def candidates(asked: Asked, providers: list[str]) -> list[Candidate]:
    """One candidate, unless a filter refuses what this machine is (one node of CPUs, no region,
    no spot capacity: ``filters.FILTERS``)."""
    if not providers:
        return []
    c = Candidate("local", providers[0], "this machine", "cpu", os.cpu_count() or 1, False, None)
    if not asked.admits(c, "shape", "layout"):
        return []
    rate, basis = local_throughput(asked.profile, asked.policy.precision)
    c.estimate = est_mod.local(rate, basis, asked.profile, asked.policy, asked.epochs, asked.ask.events, scan=asked.scan)
    return [c]
