"""The price catalog: node shapes and their hourly prices, as data (``burst/catalog/data/catalog.csv``).

One row is one node a cluster can be built from: a VM with its GPUs, or a Cloud TPU slice. The
loader checks every row (positive prices, spot not above on-demand, no placeholder prices) and
holds it against the provider facts (``facts.py``: no retired shape, a zone that offers the
accelerator), so a user-supplied catalog with a bad row fails with its file and line instead of
skewing a plan or failing at ``burst up``. Each offer carries the zones of its region that offer
its accelerator and whether the shape is sold on demand at all.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Iterable, Optional

from . import facts
from ..errors import BurstError
from ..home.userfile import read_text
from ..values.placement import Offer

DEFAULT_PATH = Path(__file__).with_name("data") / "catalog.csv"
COLUMNS = ("provider", "region", "zone", "instance_type", "accelerator", "accelerator_count", "vcpus", "memory_gib",
           "price_od", "price_spot", "unit", "quality", "source", "fetched_at", "note")
PLACEHOLDER_PRICES = (700.0,)  # SkyPilot's TPU_V6E_MAX_PRICE stands for "no price"
# Upper bounds no real row comes near (the largest TPU pod slice is a few $10,000 an hour): a value
# past one is a slipped digit or a unit mix-up, not a price.
LIMITS = {"price_od": 1e6, "price_spot": 1e6, "accelerator_count": 100_000, "vcpus": 100_000, "memory_gib": 1e7,
          "accelerator_memory_gb": 10_000}
#: columns a catalog may leave out (one written before they were added): empty is unknown
OPTIONAL_COLUMNS = ("accelerator_memory_gb",)





def _number(text: str, where: str, field: str, kind=float, required: bool = True):
    if text == "" or text is None:
        if required:
            raise BurstError(f"{where}: column {field} is empty; give a number")
        return None
    try:
        value = kind(text)
    except ValueError:
        raise BurstError(f"{where}: column {field} is {text!r}, not a number") from None
    if not math.isfinite(value):
        raise BurstError(f"{where}: column {field} is {text!r}, not a finite number; give the real figure")
    if value < 0 or value > LIMITS.get(field, math.inf):
        raise BurstError(f"{where}: column {field} is {text!r}, outside 0 to {LIMITS.get(field, math.inf):g}; give the real figure")
    return value


def _row(raw: dict, path: Path, lineno: int, clouds: tuple[str, ...]) -> Offer:
    where = f"{path}:{lineno}"
    missing = [c for c in COLUMNS if c not in raw]
    if missing:
        raise BurstError(f"{where}: missing column(s) {', '.join(missing)}; the header must be {','.join(COLUMNS)}")
    od = _number(raw["price_od"], where, "price_od")
    spot = _number(raw["price_spot"], where, "price_spot", required=False)
    count = _number(raw["accelerator_count"], where, "accelerator_count", int)
    for name, value in (("price_od", od), ("price_spot", spot)):
        if value is not None and (value <= 0 or value in PLACEHOLDER_PRICES):
            raise BurstError(f"{where}: {name} {value} is a placeholder or not positive; remove the row or give the real price")
    if spot is not None and spot > od:
        raise BurstError(f"{where}: spot price {spot} is above the on-demand price {od}; fix or drop the spot price")
    if count < 1:
        raise BurstError(f"{where}: accelerator_count must be at least 1")
    if raw["provider"] not in clouds:
        raise BurstError(f"{where}: provider {raw['provider']!r} is not one of {', '.join(clouds)}")
    if raw["unit"] not in ("node", "tpu-slice"):
        raise BurstError(f"{where}: unit must be node or tpu-slice, got {raw['unit']!r}")
    for field in ("region", "instance_type", "accelerator", "source", "fetched_at"):
        if not raw[field]:
            raise BurstError(f"{where}: column {field} is empty")
    known = facts.load(raw["provider"])
    retired = known.retirement(raw["instance_type"])
    if retired:
        raise BurstError(f"{where}: {raw['instance_type']} was retired on {retired.retired_on} ({retired.source}); "
                         f"remove the row (replacement: {retired.replacement})")
    zones = known.zones_for(raw["accelerator"], raw["region"])
    if zones is None and known.zones and (known.zones_complete or not raw["zone"]):
        raise BurstError(f"{where}: the {raw['provider']} facts list no zone of {raw['region']} offering {raw['accelerator']}; "
                         f"drop the row or add the zones to {facts.FACTS_DIR / (raw['provider'] + '.yaml')}")
    if zones is not None and raw["zone"] and raw["zone"] not in zones:
        raise BurstError(f"{where}: zone {raw['zone']} does not offer {raw['accelerator']} (zones that do: {', '.join(zones)})")
    return Offer(
        provider=raw["provider"], region=raw["region"], zone=raw["zone"], instance_type=raw["instance_type"],
        accelerator=raw["accelerator"], accelerator_count=count,
        vcpus=_number(raw["vcpus"], where, "vcpus", int, required=False),
        memory_gib=_number(raw["memory_gib"], where, "memory_gib", required=False),
        accelerator_memory_gb=_number(raw.get("accelerator_memory_gb") or "", where, "accelerator_memory_gb", required=False),
        price_od=od, price_spot=spot, unit=raw["unit"], quality=raw["quality"] or "catalog",
        source=raw["source"], fetched_at=raw["fetched_at"], note=raw.get("note") or "", line=lineno,
        zones=zones or ((raw["zone"],) if raw["zone"] else ()), on_demand=not known.is_spot_only(raw["instance_type"]),
    )


def refreshed_path() -> Path:
    """Where `burst catalog refresh` writes: the catalog every command reads once it exists."""
    from ..home.state import home_path

    return home_path() / "catalog.csv"


def default_path() -> Path:
    """The refreshed catalog where there is one, else the packaged one."""
    refreshed = refreshed_path()
    return refreshed if refreshed.exists() else DEFAULT_PATH


def load(path: Optional[Path] = None) -> list[Offer]:
    """Read and check a catalog file (``#`` lines are comments); by default ``default_path()``."""
    path = Path(path) if path else default_path()
    text = read_text(path, "catalog")
    numbered = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip() and not line.lstrip().startswith("#")]
    if not numbered:
        raise BurstError(f"catalog {path} has no rows")
    reader = csv.DictReader([line for _, line in numbered])
    offers = []
    clouds = facts.providers()  # the providers a catalog prices: the clouds with facts
    try:
        for (lineno, _), raw in zip(numbered[1:], reader):
            offers.append(_row(raw, path, lineno, clouds))
    except csv.Error as exc:
        raise BurstError(f"catalog {path} is not valid CSV: {exc}") from None
    if not offers:
        raise BurstError(f"catalog {path} has a header and no offers; add rows ({','.join(COLUMNS)})")
    return offers


def accelerators(offers: Iterable[Offer]) -> list[str]:
    return sorted({o.accelerator for o in offers})
