"""Where a managed run goes on after losing its cluster: the policy's ``recovery.strategy``.

``next_target`` plans again without every target lost so far (SkyPilot's ``EAGER_NEXT_REGION``):
right for a site that cancelled the allocation or a region out of stock. ``same_first`` starts the
target just lost once more before moving on (SkyPilot's ``FAILOVER``): spot capacity often comes
back in the same region, where the run's store and staged data already are, so the move costs no
egress; a second loss there moves the run as ``next_target`` would.
"""

from __future__ import annotations

from typing import Optional

from .managed import Attempt


def _lost_there(attempt: Attempt, other: Attempt) -> bool:
    return (other.provider, other.region) == (attempt.provider, attempt.region) and (other.how or "").startswith(("lost", "could not start"))


def start_again(strategy: str, ended: list[Attempt]) -> Optional[Attempt]:
    """The ended attempt whose target the next attempt starts again on, or None: plan elsewhere.
    ``ended``: the run's attempts so far, oldest first, the one just lost last."""
    if strategy != "same_first" or not ended:
        return None
    last = ended[-1]
    if not last.provider or not (last.how or "").startswith("lost"):
        return None  # a target that could not even start is not tried again
    return last if sum(1 for a in ended if _lost_there(last, a)) == 1 else None
