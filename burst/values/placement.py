"""What passes from placement to a target: catalog offers, node layouts, the estimate behind a
choice, and the placement itself (what a target's ``up`` receives).

Plain values with the arithmetic that belongs to them (a layout's price, its zones, the same nodes
laid out again without a zone out of capacity). Deciding which offer or layout to take is
``burst.placement``'s; building it is ``burst.targets``'.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import Iterable, Optional, Protocol

from ..errors import BurstError
from .site import OnPrem


@dataclass(frozen=True)
class Offer:
    """One node shape in one region, with its on-demand and (optional) spot price per hour."""

    provider: str
    region: str
    zone: str
    instance_type: str
    accelerator: str
    accelerator_count: int
    vcpus: Optional[int]
    memory_gib: Optional[float]
    price_od: float
    price_spot: Optional[float]
    unit: str
    quality: str
    source: str
    fetched_at: str
    note: str = ""
    line: int = 0
    zones: tuple[str, ...] = ()  # zones of the region offering the accelerator (provider facts)
    accelerator_memory_gb: Optional[float] = None  # one GPU's (one TPU chip's) memory, as its maker gives it; None: unknown
    on_demand: bool = True  # False: sold as spot/flex-start only (provider facts)

    @property
    def is_tpu(self) -> bool:
        return self.unit == "tpu-slice"

    def price(self, preemptible: bool) -> float:
        if not preemptible and not self.on_demand:
            raise BurstError(f"{self.instance_type} is not sold on demand (spot or flex-start only)")
        if preemptible:
            if self.price_spot is None:
                raise BurstError(f"{self.instance_type} in {self.region} has no spot price")
            return self.price_spot
        return self.price_od

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("line")
        d["zones"] = list(self.zones)
        return d


@dataclass(frozen=True)
class Pool:
    offer: Offer
    nodes: int
    zone: str = ""

    @property
    def gpus_per_node(self) -> int:
        return self.offer.accelerator_count

    def to_dict(self) -> dict:
        return {"instance_type": self.offer.instance_type, "accelerator": self.offer.accelerator,
                "gpus_per_node": self.gpus_per_node, "nodes": self.nodes, "zone": self.zone}


@dataclass(frozen=True)
class Layout:
    provider: str
    region: str
    accelerator: str
    pools: tuple[Pool, ...] = field(default_factory=tuple)
    max_gpus_per_zone: Optional[int] = None  # the spreading limit it was laid out under

    def without_zones(self, avoid: Iterable[str]) -> Optional["Layout"]:
        """The same nodes laid out again over the zones offering them minus ``avoid`` (a zone out of
        capacity); None when no zone is left. Prices are regional: cost and time do not change."""
        avoid = set(avoid)
        zones = [z for z in self.pools[0].offer.zones if z not in avoid]
        if not zones:
            return None
        nodes: dict[str, list] = {}
        for p in self.pools:
            nodes.setdefault(p.offer.instance_type, [p.offer, 0])[1] += p.nodes
        pools = spread([(o, n) for o, n in nodes.values()], self.count, self.max_gpus_per_zone, zones=tuple(zones))
        return Layout(self.provider, self.region, self.accelerator, pools, self.max_gpus_per_zone)

    @property
    def count(self) -> int:
        return sum(p.nodes * p.gpus_per_node for p in self.pools)

    @property
    def nodes(self) -> int:
        return sum(p.nodes for p in self.pools)

    @property
    def is_tpu(self) -> bool:
        return self.pools[0].offer.is_tpu

    @property
    def gpus_per_worker(self) -> int:
        """Ray Train gives every worker the same GPUs: the largest count that divides every node."""
        return reduce(math.gcd, (p.gpus_per_node for p in self.pools))

    @property
    def has_spot(self) -> bool:
        return all(p.offer.price_spot is not None for p in self.pools)

    @property
    def has_on_demand(self) -> bool:
        return all(p.offer.on_demand for p in self.pools)

    @property
    def zones(self) -> list[str]:
        return list(dict.fromkeys(p.zone for p in self.pools if p.zone))

    @property
    def quality(self) -> str:
        order = ("catalog", "corrected", "derived", "estimate")
        return max((p.offer.quality for p in self.pools), key=lambda q: order.index(q) if q in order else 3)

    def hourly_usd(self, preemptible: bool) -> float:
        return sum(p.nodes * p.offer.price(preemptible) for p in self.pools)

    def describe(self) -> str:
        spread = len(self.zones) > 1
        return " + ".join(f"{p.nodes}x {p.offer.instance_type}" + ("" if p.offer.is_tpu else f" ({p.gpus_per_node} {p.offer.accelerator})")
                          + (f" in {p.zone}" if spread else "") for p in self.pools)

    def to_dict(self) -> dict:
        return {"provider": self.provider, "region": self.region, "accelerator": self.accelerator, "count": self.count,
                "nodes": self.nodes, "gpus_per_worker": self.gpus_per_worker, "zones": self.zones, "pools": [p.to_dict() for p in self.pools],
                "description": self.describe()}


def zones_of(offer: Offer) -> tuple[str, ...]:
    return offer.zones or (offer.zone,)


def spread(pools: list[tuple[Offer, int]], gpus: int, max_gpus_per_zone: Optional[int],
           zones: Optional[tuple[str, ...]] = None) -> tuple[Pool, ...]:
    """Place pools in zones: all in the first zone that offers them, or, above the per-zone limit,
    the nodes of each shape dealt over as few zones as the limit needs (one pool per zone)."""
    zones = zones or zones_of(pools[0][0])
    wanted = 1 if not max_gpus_per_zone or gpus <= max_gpus_per_zone else min(len(zones), math.ceil(gpus / max_gpus_per_zone))
    use = zones[:wanted]
    load = dict.fromkeys(use, 0)  # GPUs placed per zone
    out: list[Pool] = []
    for offer, nodes in pools:
        share = dict.fromkeys(use, 0)
        for _ in range(nodes):  # each node to the zone holding the fewest GPUs so far
            zone = min(use, key=lambda z: (load[z], use.index(z)))
            share[zone] += 1
            load[zone] += offer.accelerator_count
        out.extend(Pool(offer, n, zone) for zone, n in share.items() if n)
    return tuple(out)


@dataclass
class Estimate:
    """The breakdown behind one candidate's hours and dollars."""

    epoch_s: float
    provision_h: float = 0.0
    queue_h: float = 0.0
    queue_source: str = "policy"  # where queue_h comes from: the policy, or the site's scheduler asked now
    staging_h: float = 0.0
    training_h: float = 0.0
    preemption_h: float = 0.0
    hourly_usd: float = 0.0
    compute_usd: float = 0.0
    storage_usd: float = 0.0
    egress_usd: float = 0.0
    notes: list[str] = field(default_factory=list)
    feasible: bool = True
    batch: int = 0                      # batch per replica the estimate is for
    energy_kwh: float = 0.0             # accelerators x PUE over the training (and re-training) hours
    grid_g_per_kwh: Optional[float] = None  # None: no figure for where the run draws its power
    price_basis: str = ""               # where the hourly price comes from (local/on-prem)
    precision: str = "float32"          # what the run computes in (the policy's, auto resolved for the accelerator)

    @property
    def kgco2e(self) -> Optional[float]:
        """Kilograms of CO2-equivalent: kWh x grams per kWh / 1000."""
        return None if self.grid_g_per_kwh is None else self.energy_kwh * self.grid_g_per_kwh / 1000.0

    @property
    def hours(self) -> float:
        return self.queue_h + self.provision_h + self.staging_h + self.training_h + self.preemption_h

    @property
    def cost_usd(self) -> float:
        return self.compute_usd + self.storage_usd + self.egress_usd


class StoreLifecycle(Protocol):
    """How long burst's own buckets keep what they hold (the policy's ``stores``)."""

    checkpoints_days: int
    datasets_days: int
    notices_days: int


@dataclass(frozen=True)
class Placement:
    """Where a cluster goes: what a target's ``up`` receives, chosen by the plan or pinned by flags."""

    provider: str
    region: str
    accelerator: str
    count: int                          # GPUs, TPU chips, or (local) CPUs
    preemptible: bool
    hourly_usd: float
    layout: Optional[Layout] = None     # cloud node pools
    gpus: Optional[int] = None          # local: GPUs of this machine to offer; on-prem: GPUs one run may use
    nodes: Optional[int] = None         # on-prem scheduler: nodes to allocate
    storage: Optional[str] = None       # local, clouds: the store for checkpoints, datasets and results (None: the target's default)
    stores: Optional[StoreLifecycle] = None  # the policy's stores (a cloud's own region store takes its lifecycle)
    site: Optional[OnPrem] = None       # on-prem: the policy's description of the site
    estimate: Optional[Estimate] = None
    notes: tuple[str, ...] = ()         # what the user should know (a pinned choice the plan would not make)
    image: Optional[str] = None         # cloud: a prebuilt runtime image the nodes run (None: stock Ray image)
    bundle: Optional[str] = None        # on-prem: a `burst pack` bundle on shared storage the nodes install from

    def describe(self) -> str:
        e = self.estimate
        when = f" ({e.hours:.1f} h, ${e.cost_usd:,.2f})" if e is not None else f" (${self.hourly_usd:,.2f}/h)"
        return f"{self.provider} {self.region} {self.accelerator} x{self.count}{' preemptible' if self.preemptible else ''}{when}"
