"""Grid carbon intensity per cloud region, and the emissions of a run from its energy.

Energy is the accelerators' rated power x the data centre's PUE x the hours they are held for
training (and re-training after preemptions); emissions are energy x the grid's intensity where
the run draws it. Location-based figures: what the grid emits, not what a provider offsets.
"""

from __future__ import annotations

from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import BurstError

CARBON_FACTS = Path(__file__).with_name("data") / "carbon.yaml"


class ProviderCarbon(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: Optional[str] = None
    checked: Optional[date] = None
    regions: dict[str, float] = Field(default_factory=dict)
    same_as: Optional[str] = None


@lru_cache(maxsize=1)
def _facts() -> dict[str, ProviderCarbon]:
    try:
        raw = yaml.safe_load(CARBON_FACTS.read_text())
        return {k: ProviderCarbon.model_validate(v) for k, v in raw.items()}
    except (OSError, yaml.YAMLError, ValidationError, AttributeError) as exc:
        raise BurstError(f"carbon facts {CARBON_FACTS} are invalid: {str(exc).splitlines()[0]}") from None


def intensity(provider: str, region: str) -> Optional[tuple[float, str]]:
    """(gCO2e per kWh, source) of a cloud region; None when burst has no figure for it."""
    facts = _facts()
    entry = facts.get(provider)
    if entry is not None and entry.same_as:
        entry = facts.get(entry.same_as)
    if entry is None or region not in entry.regions:
        return None
    return entry.regions[region], f"{entry.source}, checked {entry.checked}"
