"""One request as every source of candidates reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ...values.placement import Offer
from ..policy import Policy
from ..profile import Profile
from ..request import PlacementRequest
from ..scan import ScanShape


@dataclass
class Asked:
    """One request as every source reads it: the policy, the workload's profile, the catalog's
    offers, the request, and what the planner already settled (epochs, batch, GPUs and the scan's
    shape, the spot choices the policy and flags leave); ``skip`` counts what was left out, and why."""

    policy: Policy
    profile: Profile
    offers: list[Offer]
    ask: PlacementRequest
    epochs: int
    batch: int
    gpus: Optional[int]
    scan: Optional[ScanShape]
    cpu_scan: bool
    spot_choices: list[bool]
    excluded: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.excluded[why] = self.excluded.get(why, 0) + 1


def gpu_counts(max_gpus: int, fixed: Optional[int]) -> list[int]:
    """The GPU counts to consider: the one asked for (when within the cap), else the powers of two up to the cap."""
    if fixed is not None:
        return [fixed] if fixed <= max_gpus else []
    counts, n = [], 1
    while n <= max_gpus:
        counts.append(n)
        n *= 2
    return counts
