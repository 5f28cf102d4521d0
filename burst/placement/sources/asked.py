"""One request as every source of candidates reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from ...values.placement import Offer
from ..filters import FILTERS, SOURCE_RANK
from ..policy import Policy
from ..profile import Profile
from ..request import PlacementRequest
from ..scan import ScanShape

if TYPE_CHECKING:
    from ..candidate import Candidate


@dataclass
class Asked:
    """One request as every source reads it: the policy, the workload's profile, the catalog's
    offers, the request, and what the planner already settled (epochs, batch, GPUs and the scan's
    shape, the spot choices the policy and flags leave); ``excluded`` counts what was left out, and
    why, and ``refusal`` says, for a provider none of whose candidates was kept, why not."""

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
    # provider -> (rank, what refused, the candidates it refused): the furthest any candidate got
    _furthest: dict = field(default_factory=dict)

    def skip(self, why: str, provider: Optional[str] = None, detail: Optional[str] = None) -> None:
        """A candidate the source could not make (``why``, as ``burst plan`` counts it; ``detail``:
        the line a pin of ``provider`` is refused with when nothing else got further)."""
        self.excluded[why] = self.excluded.get(why, 0) + 1
        if provider is not None:
            self._refused(provider, SOURCE_RANK, detail or why, None)

    def admits(self, c: "Candidate", *stages: str) -> bool:
        """Whether every filter of ``stages`` that the request or policy sets keeps ``c`` (the
        first that does not counts it as excluded)."""
        for rank, f in enumerate(FILTERS):
            if f.stage in stages and f.applies(self) and not f.keeps(c, self):
                self.excluded[f.excluded] = self.excluded.get(f.excluded, 0) + 1
                self._refused(c.provider, rank, f, c)
                return False
        return True

    def _refused(self, provider: str, rank: float, what, c: Optional["Candidate"]) -> None:
        best = self._furthest.get(provider)
        if best is None or rank > best[0]:
            self._furthest[provider] = (rank, what, [c] if c is not None else [])
        elif rank == best[0] and c is not None:
            best[2].append(c)

    def refusal(self, provider: str) -> str:
        """Why no candidate of ``provider`` was kept: the words of the filter (or the source) that
        refused the ones that got furthest."""
        best = self._furthest.get(provider)
        if best is None:
            return f"{provider} offers nothing for this request"
        _, what, refused = best
        return what if isinstance(what, str) else what.says(self, refused)


def gpu_counts(max_gpus: int, fixed: Optional[int]) -> list[int]:
    """The GPU counts to consider: the one asked for (the policy's cap is a filter of its own),
    else the powers of two up to the cap."""
    if fixed is not None:
        return [fixed]
    counts, n = [], 1
    while n <= max_gpus:
        counts.append(n)
        n *= 2
    return counts
