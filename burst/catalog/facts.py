"""What each cloud really offers, as data: zones per accelerator, spot-only and retired shapes,
GPU driver branches, TPU runtime images, quota metrics, and the figures of the plan's time and cost
model (``model``: provisioning, restarts, preemption, egress, storage, PUE), one file per provider
(``burst/catalog/data/facts/*.yaml``).

Prices live in the catalog; these files hold the facts a price list cannot: which zones of a
region have the accelerator, which shapes are not sold on demand, which sizes were retired, what
driver and runtime a node needs. Every row names its source and the day it was checked. The
catalog is checked against them on load, the layout takes its zones from them, and the stacks
receive driver and runtime choices made here (``infra/`` never reads these files itself).
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import BurstError
from ..home.userfile import compose_yaml, key_lines, key_path, read_text

FACTS_DIR = Path(__file__).with_name("data") / "facts"


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str = Field(min_length=3)
    checked: dt.date


class ZoneRow(_Row):
    accelerator: str
    region: str
    zones: tuple[str, ...] = Field(min_length=1)


class ShapeRow(_Row):
    instance_type: str


class RetiredRow(_Row):
    instance_type: str
    retired_on: dt.date
    replacement: str


class DriverRow(_Row):
    accelerator: str
    gke_driver: Literal["DEFAULT", "LATEST"]
    why: str


class QuotaRow(_Row):
    accelerator: str
    on_demand: str
    spot: str


class QuotaFamilyRow(_Row):
    instance_type: str
    family: str
    vcpus: int = Field(gt=0)


class RuntimeRow(_Row):
    tensorflow: str
    generations: tuple[str, ...] = Field(min_length=1)
    single_host: str
    multi_host: str


class DevicePlugin(_Row):
    image: str


class AfterLease(_Row):
    """What a cluster still costs once its keeper has ended it at its lease's end, until `burst down`:
    what cannot scale to zero (a control plane's fee, a system node pool)."""

    usd_per_hour: float = Field(ge=0, le=1000)
    what: str = Field(min_length=3)


class InterRegion(BaseModel):
    """What moving a GB between two regions of one cloud costs, by the continents of the two (the
    clouds price inter-region transfer by continent, not by the pair's distance)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    same_continent_usd_per_gb: float = Field(ge=0)
    other_continent_usd_per_gb: float = Field(ge=0)
    continents: dict[str, tuple[str, ...]] = Field(min_length=1)  # continent -> its regions (a name ending in '-' is a prefix)
    source: str = Field(min_length=3)
    checked: dt.date

    def continent(self, region: str) -> Optional[str]:
        """The continent a region is on; None when this file does not say."""
        for continent, names in self.continents.items():
            if any(region == n or (n.endswith("-") and region.startswith(n)) for n in names):
                return continent
        return None


class CostModel(BaseModel):
    """The time and cost model's figures for a cloud (from its public documentation; latencies are
    defaults derived from issue reports about provisioning times: override them in your copy)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    provision_minutes: float = Field(ge=0)
    restart_minutes: float = Field(ge=0)
    teardown_minutes: float = Field(ge=0)
    preemption_rate_per_hour: float = Field(ge=0)
    max_preemptible_hours: Optional[float] = Field(default=None, gt=0)
    egress_usd_per_gb: float = Field(ge=0)  # out of the cloud: to the internet, a site, another cloud
    inter_region: InterRegion
    storage_usd_per_gb_month: float = Field(ge=0)
    pue: float = Field(ge=1)

    def between_regions(self, src: str, dst: str) -> tuple[float, str]:
        """($/GB, how it is priced) for moving data from region ``src`` to ``dst`` of this cloud."""
        if src == dst:
            return 0.0, f"within {src}: free"
        rates = self.inter_region
        a, b = rates.continent(src), rates.continent(dst)
        if a is None or b is None:
            unknown = src if a is None else dst
            return rates.other_continent_usd_per_gb, (f"{src} -> {dst}: continent of {unknown} unknown, priced as between "
                                                      f"continents, {rates.other_continent_usd_per_gb:g} $/GB")
        if a == b:
            return rates.same_continent_usd_per_gb, f"{src} -> {dst}, within {a}: {rates.same_continent_usd_per_gb:g} $/GB"
        return rates.other_continent_usd_per_gb, f"{src} -> {dst}, {a} to {b}: {rates.other_continent_usd_per_gb:g} $/GB"


class ProviderFacts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    provider: str
    model: Optional[CostModel] = None  # a cloud's figures for the plan's time and cost
    # True: ``zones`` lists every region offering each accelerator (a catalog row elsewhere is
    # wrong); False: it covers the regions burst ships, and a row elsewhere keeps its own zone.
    zones_complete: bool = False
    max_gpus_per_zone: Optional[int] = Field(default=None, gt=0)
    zones: tuple[ZoneRow, ...] = ()
    spot_only: tuple[ShapeRow, ...] = ()
    retired: tuple[RetiredRow, ...] = ()
    drivers: tuple[DriverRow, ...] = ()
    quotas: tuple[QuotaRow, ...] = ()
    quota_families: tuple[QuotaFamilyRow, ...] = ()
    runtimes: tuple[RuntimeRow, ...] = ()
    infiniband: tuple[ShapeRow, ...] = ()
    device_plugin: Optional[DevicePlugin] = None
    after_lease: Optional[AfterLease] = None
    price_list: Optional[str] = None  # the public price list its catalog rows are renewed from (``refresh.PRICE_LISTS``)

    # ------------------------------------------------------------------ questions the code asks

    def zones_for(self, accelerator: str, region: str) -> Optional[tuple[str, ...]]:
        """Zones of ``region`` offering ``accelerator``; None when the file does not say."""
        for row in self.zones:
            if row.accelerator.lower() == accelerator.lower() and row.region == region:
                return row.zones
        return None

    def is_spot_only(self, instance_type: str) -> bool:
        return any(r.instance_type == instance_type for r in self.spot_only)

    def has_infiniband(self, instance_type: str) -> bool:
        return any(r.instance_type == instance_type for r in self.infiniband)

    def retirement(self, instance_type: str) -> Optional[RetiredRow]:
        return next((r for r in self.retired if r.instance_type == instance_type), None)

    def gke_driver(self, accelerator: str) -> str:
        row = next((r for r in self.drivers if r.accelerator == accelerator), None)
        return row.gke_driver if row else "DEFAULT"

    def quota_metrics(self, accelerator: str) -> Optional[QuotaRow]:
        return next((r for r in self.quotas if r.accelerator == accelerator), None)

    def quota_family(self, instance_type: str) -> Optional[QuotaFamilyRow]:
        return next((r for r in self.quota_families if r.instance_type == instance_type), None)

    def tpu_runtime(self, tensorflow: str, accelerator: str) -> str:
        """The TPU VM image for TensorFlow ``tensorflow`` on slice ``accelerator`` (``tpu-v3-32``)."""
        name = accelerator.removeprefix("tpu-")
        generation = name.rsplit("-", 1)[0]
        multi_host = tpu_hosts(accelerator) > 1
        for row in self.runtimes:
            if row.tensorflow == tensorflow and generation in row.generations:
                return row.multi_host if multi_host else row.single_host
        known = sorted({r.tensorflow for r in self.runtimes})
        raise BurstError(f"no TPU runtime image is known for TensorFlow {tensorflow} on {name}; known TensorFlow versions: "
                         f"{', '.join(known)} (add a row to {FACTS_DIR / (self.provider + '.yaml')})")


def tpu_hosts(accelerator: str) -> int:
    """How many TPU VM hosts a slice has. Every generation's single-host slice is size 8 (v2-8,
    v3-8, v4-8, v5p-8 count TensorCores, 4 chips on one host; v5litepod-8 and v6e-8 count chips, 8
    on one host); a larger slice spans hosts of 4 chips each (cloud.google.com/tpu/docs/system-architecture-tpu-vm)."""
    size = int(accelerator.rsplit("-", 1)[1])
    if size <= 8:
        return 1
    chips = size // 2 if any(accelerator.startswith(f"tpu-{g}-") for g in ("v2", "v3", "v4", "v5p")) else size
    return max(1, chips // 4)


def parse(text: str, source: str) -> ProviderFacts:
    node, raw = compose_yaml(text, source)
    if not isinstance(raw, dict):
        raise BurstError(f"{source}:1: a facts file is a mapping (provider, zones, ...)")
    try:
        return ProviderFacts.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        lines = key_lines(node)
        where = ".".join(str(p) for p in err["loc"])
        raise BurstError(f"{source}:{lines.get(key_path(lines, err['loc']), 1)}: {where}: {err['msg']}") from None


@lru_cache(maxsize=None)
def _load(path: str) -> ProviderFacts:
    return parse(read_text(Path(path), "provider facts"), path)


def providers() -> tuple[str, ...]:
    """The providers with a facts file: the clouds a catalog prices."""
    return tuple(sorted(p.stem for p in FACTS_DIR.glob("*.yaml")))


def load(provider: str) -> ProviderFacts:
    """The facts of ``provider`` (an empty set for a provider without a file: on-prem, local)."""
    path = FACTS_DIR / f"{provider}.yaml"
    if not path.exists():
        return ProviderFacts(provider=provider)
    facts = _load(str(path))
    if facts.provider != provider:
        raise BurstError(f"{path}: says provider {facts.provider!r}, but is the file of {provider!r}")
    return facts
