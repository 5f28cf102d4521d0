"""Where a managed run goes on after losing its cluster: the policy's ``recovery.strategy``, one
named strategy each (SkyPilot's ``recovery_strategy.py`` keeps its own so).

``next_target`` plans again without every target lost so far (SkyPilot's ``EAGER_NEXT_REGION``):
right for a site that cancelled the allocation or a region out of stock. ``same_first`` starts the
target just lost once more before moving on (SkyPilot's ``FAILOVER``): spot capacity often comes
back in the same region, where the run's store and staged data already are, so the move costs no
egress; a second loss there moves the run as ``next_target`` would. Each answers two questions of
the controller: which ended attempt's target to start again (if any), and the placement request
the next attempt is planned with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Optional, Sequence

from .. import targets
from .managed import Attempt

if TYPE_CHECKING:
    from ..placement.request import PlacementRequest


def _lost_there(attempt: Attempt, other: Attempt) -> bool:
    return (other.provider, other.region) == (attempt.provider, attempt.region) and (other.how or "").startswith(("lost", "could not start"))


class NextTarget:
    """Plan again, without every target lost so far."""

    name: ClassVar[str] = "next_target"

    def start_again(self, ended: Sequence[Attempt], allowed: Sequence[str]) -> Optional[Attempt]:
        """The ended attempt whose target the next attempt starts again on, or None: plan elsewhere.
        ``ended``: the run's attempts so far, oldest first, the one just lost last; ``allowed``: the
        providers recovery may use."""
        return None

    def next_request(self, moving: "PlacementRequest", ended: Sequence[Attempt], allowed: Sequence[str], avoid: Sequence[str],
                     on_demand: bool) -> "PlacementRequest":
        """What the next attempt is planned with: ``moving`` (the run's first request less what bound
        it to a target), narrowed by this strategy; ``on_demand``: enough spot clusters were lost."""
        return moving.but(avoid=tuple(avoid))


class SameFirst(NextTarget):
    """Start the target just lost once more (on demand once enough spot was lost), then move on."""

    name: ClassVar[str] = "same_first"

    def start_again(self, ended: Sequence[Attempt], allowed: Sequence[str]) -> Optional[Attempt]:
        if not ended:
            return None
        last = ended[-1]
        if not last.provider or not (last.how or "").startswith("lost") or last.provider not in allowed:
            return None  # a target that could not even start is not tried again, nor one recovery does not allow
        return last if sum(1 for a in ended if _lost_there(last, a)) == 1 else None

    def next_request(self, moving: "PlacementRequest", ended: Sequence[Attempt], allowed: Sequence[str], avoid: Sequence[str],
                     on_demand: bool) -> "PlacementRequest":
        again = self.start_again(ended, allowed)
        if again is None:
            return super().next_request(moving, ended, allowed, avoid, on_demand)
        cloud = targets.get(again.provider).kind == "cloud"
        return moving.but(provider=again.provider, region=again.region if cloud else None, preemptible=False if on_demand else None)


#: every strategy a policy may name (``recovery.strategy``), by name
STRATEGIES: dict[str, NextTarget] = {s.name: s for s in (NextTarget(), SameFirst())}


def strategy(name: str) -> NextTarget:
    return STRATEGIES[name]
