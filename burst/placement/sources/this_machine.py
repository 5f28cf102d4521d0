"""Candidates on this machine: its CPUs, at the rate the workload's profile (or `burst bench`) gives."""

from __future__ import annotations

import os

from .. import estimate as est_mod
from ..candidate import Candidate
from ..profile import local_throughput
from .asked import Asked


def candidates(asked: Asked, providers: list[str]) -> list[Candidate]:
    """One candidate, unless the request asks for what this machine has not (GPUs, an accelerator,
    spot capacity, a region, several nodes)."""
    ask = asked.ask
    if not providers or not (asked.gpus is None or asked.cpu_scan) or ask.accelerator is not None or ask.preemptible is True \
            or ask.region is not None or ask.nodes not in (None, 1):
        return []
    rate, basis = local_throughput(asked.profile, asked.policy.precision)
    e = est_mod.local(rate, basis, asked.profile, asked.policy, asked.epochs, ask.events, scan=asked.scan)
    return [Candidate("local", providers[0], "this machine", "cpu", os.cpu_count() or 1, False, e)]
