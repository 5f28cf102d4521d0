"""Placement policies: what a user allows and wants, as YAML validated by pydantic.

Unknown keys are errors (a misspelt ``budjet_usd`` must not silently mean "no budget"), and
every error names the file, the line and the field.
"""

from __future__ import annotations

import fnmatch
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import BaseModel, Field, ValidationError, field_validator

from .. import targets
from ..values.site import OnPrem, StrictModel as _Strict, amortised_basis, amortised_hourly_usd  # the site a policy describes, handed to targets
from ..errors import BurstError
from ..home.userfile import compose_yaml, key_lines, key_path, read_text

DATA_SITES = ("onprem", "local")  # where data lives outside any cloud: the site, or this machine
Provider = Literal[targets.PROVIDERS]  # type: ignore[valid-type]  # the registry's names, in the JSON Schema too

DEFAULT_POLICY = Path(__file__).resolve().parents[1] / "policies" / "default.yaml"  # installed with the package
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m|min|h|d|w)\s*$")
_UNITS = {"m": 1 / 60, "min": 1 / 60, "h": 1.0, "d": 24.0, "w": 168.0}
MAX_PREEMPTIONS_PER_HOUR = 2.0  # spot capacity reclaimed more often than this is not worth planning on
MAX_DEADLINE_HOURS = 8760.0  # a year


class LocalMachine(_Strict):
    """This machine as a target: its time is not free (power and the hardware's wear), so a run that
    takes weeks here does not win on a rounding of cost."""

    usd_per_hour: Optional[float] = Field(None, ge=0, le=10_000, description="what an hour of this machine costs; absent: derived from the four fields below")
    watts: float = Field(65.0, gt=0, le=100_000, description="what the machine draws while training (65 W: a desktop CPU's TDP)")
    hardware_usd: float = Field(1500.0, ge=0, le=1e7, description="purchase price, for the derived price")
    lifetime_years: float = Field(4.0, gt=0, le=20, description="years the machine is written off over")
    usd_per_kwh: float = Field(0.20, ge=0, le=10, description="what its electricity costs")
    grid_gco2_per_kwh: float = Field(300.0, ge=0, le=2000, description="its grid's carbon intensity; 300 is burst's placeholder, not a measurement: set yours")

    def hourly_usd(self) -> float:
        if self.usd_per_hour is not None:
            return self.usd_per_hour
        return amortised_hourly_usd(self.hardware_usd, self.lifetime_years, self.watts, self.usd_per_kwh)

    def price_basis(self) -> str:
        if self.usd_per_hour is not None:
            return f"${self.usd_per_hour:g}/h from the policy"
        return amortised_basis(self.hardware_usd, self.lifetime_years, self.watts, self.usd_per_kwh, "h")


class BurstWhen(_Strict):
    """When to leave on-prem: any one condition that holds sends the run to the cloud."""

    queue_wait_over_hours: Optional[float] = Field(None, ge=0, le=8760, description="burst when the on-prem queue wait exceeds this many hours")
    deadline_missed: bool = Field(True, description="burst when on-prem cannot meet the deadline")
    over_budget: bool = Field(True, description="burst when on-prem would exceed the budget")


class DataLocation(_Strict):
    location: str = Field("onprem", description="onprem, local, gcp:<region> or azure:<region>")
    size_gb: Optional[float] = Field(None, ge=0, le=1e7, description="dataset size in GB (at most 10 PB); default from the workload profile")
    uplink_gbps: float = Field(1.0, ge=0.001, le=10_000, description="bandwidth from where the data is to a cloud, 1 Mbit/s to 10 Tbit/s")
    egress_usd_per_gb: float = Field(0.0, ge=0, le=100, description="what sending a GB out of the on-prem site costs")

    @field_validator("location")
    @classmethod
    def _location(cls, v: str) -> str:
        cloud, sep, region = v.partition(":")
        if (not sep and v in DATA_SITES) or (cloud in targets.vendors() and re.fullmatch(r"[a-z0-9-]+", region)):
            return v
        raise ValueError(f"must be {', '.join(DATA_SITES)}, or <cloud>:<region> with a cloud of {', '.join(targets.vendors())}")


class Recovery(_Strict):
    """What a managed run (``--managed``) may do when its cluster is lost (preempted, cancelled,
    out of walltime, stocked out): go on from its newest checkpoint on the cluster its ``strategy``
    picks (``burst.unattended.recovery``)."""

    strategy: Literal["next_target", "same_first"] = Field("next_target", description=(
        "next_target: plan again without every target lost so far; same_first: start the target just lost (same provider and "
        "region) once more before moving on, for spot capacity that returns where the run's store and data are"))
    max_restarts: int = Field(3, ge=0, le=100, description="moves to a new cluster before a managed run gives up (0: never move)")
    allow_providers: Optional[list[Provider]] = Field(None, description="targets a managed run may move to (absent: the policy's providers)")
    fallback_on_demand_after: Optional[int] = Field(1, ge=0, le=100, description="after this many lost preemptible clusters, move to on-demand capacity only (absent: never)")
    loss_grace_seconds: float = Field(30.0, ge=2, le=3600, description="a head that answers no look for this long counts as lost (a head under load misses looks; a grace of seconds would move a busy run)")
    blind_grace_minutes: float = Field(10.0, gt=0, le=1440, description="a cluster the controller cannot see (a broken tunnel, an API that does not answer) for this long is ended as lost and taken down; meanwhile the tunnel is reopened and the budget charged by wall time")


class Stores(_Strict):
    """Where runs keep checkpoints, staged datasets and results, apart from any cluster: a store
    outlives every cluster that used it (``burst down`` never deletes one). A cloud region without a
    named store gets burst's own bucket there, made once per project and region by a stack of its
    own with the lifecycle below."""

    named: dict[str, str] = Field(default_factory=dict, description="a store per target: `local` (this machine) or `<cloud provider>[:<region>]` -> a directory, gs:// or abfs:// URI")
    checkpoints_days: int = Field(30, ge=1, le=3650, description="burst's own buckets delete checkpoints this many days after they are written")
    datasets_days: int = Field(90, ge=1, le=3650, description="burst's own buckets delete staged datasets this many days after they are staged (a later run stages again)")
    notices_days: int = Field(7, ge=1, le=3650, description="burst's own buckets delete capacity notices this many days after they are posted")

    @field_validator("named")
    @classmethod
    def _named(cls, v: dict[str, str]) -> dict[str, str]:
        for where, uri in v.items():
            provider, _, region = where.partition(":")
            target = targets.get(provider) if provider in targets.PROVIDERS else None
            if target is not None and target.kind == "local" and not region:
                continue
            if target is None or target.kind != "cloud":
                raise ValueError(f"{where}: a store is named for `local` or a cloud provider ({', '.join(targets.names_of_kind('cloud'))}), optionally with `:<region>`")
            if region and not re.fullmatch(r"[a-z0-9-]+", region):
                raise ValueError(f"{where}: a region is lowercase letters, digits and dashes")
            scheme = uri.split("://", 1)[0] if "://" in uri else ""
            if scheme not in targets.get(provider).store_schemes:
                raise ValueError(f"{where}: {uri!r} is not a bucket of {provider}'s cloud (give a {' or '.join(s + '://' for s in targets.get(provider).store_schemes)} URI)")
        return v

    def named_for(self, provider: str, region: Optional[str]) -> Optional[str]:
        """The store the policy names for a target in a region (the region's entry first), or None."""
        return self.named.get(f"{provider}:{region}") if region and f"{provider}:{region}" in self.named else self.named.get(provider)


class Policy(_Strict):
    """Where a run may go and what it should optimise."""

    objective: Literal["min_cost", "min_time", "min_carbon"] = Field("min_cost", description="what the plan minimises: total cost, time to result, or estimated emissions (kgCO2e)")
    deadline: Optional[Union[float, str]] = Field(None, description="hours from now (48, '48h', '3d') or an ISO 8601 time")
    budget_usd: Optional[float] = Field(None, gt=0, le=1e8, description="total spend allowed for the run, all providers")
    max_kgco2e: Optional[float] = Field(None, gt=0, le=1e9, description="most estimated emissions allowed for the run, kgCO2e")
    max_slowdown: float = Field(10.0, ge=1, le=1e6, description="never choose an option more than this many times slower than the fastest feasible one to save cost or carbon")
    providers: list[Provider] = Field(default_factory=lambda: list(targets.PROVIDERS), description="targets the plan may choose from")
    regions: list[str] = Field(default_factory=lambda: ["*"], description="region patterns, e.g. europe-* (data residency)")
    preemptible: Literal["never", "prefer", "only"] = Field("prefer", description="spot/preemptible capacity: never, prefer it when it wins, or only")
    accelerators: Optional[list[str]] = Field(None, description="allow-list of accelerator patterns, e.g. [V100, A100-*, tpu-v3-*]")
    max_gpus: int = Field(128, gt=0, le=100_000, description="most accelerators one run may hold at once")
    max_gpus_per_zone: Optional[int] = Field(None, gt=0, le=100_000, description="spread a cloud request above this many GPUs over zones of the region (default: the provider facts', 64 on gcp)")
    tolerance: float = Field(0.05, ge=0, le=1, description="options within this fraction of the best objective value count as equal; the other measure (time or cost) decides")
    epochs: Optional[int] = Field(None, gt=0, le=100_000, description="default: the workload profile's")
    preemption_rate_per_hour: dict[Provider, float] = Field(default_factory=dict, description="expected preemptions per node-hour, per provider (overrides the built-in figures)")
    onprem: Optional[OnPrem] = Field(None, description="the site's own cluster: capacity, queue wait, price, how to reach it")
    local: LocalMachine = Field(default_factory=LocalMachine, description="this machine as a target")
    burst_when: Optional[BurstWhen] = Field(None, description="when to leave on-prem for a cloud")
    data: DataLocation = Field(default_factory=DataLocation, description="where the training data is and what moving it costs")
    recovery: Recovery = Field(default_factory=Recovery, description="how a managed run recovers from a lost cluster")
    stores: Stores = Field(default_factory=Stores, description="where runs keep checkpoints, datasets and results, apart from clusters")
    max_price_age_days: int = Field(90, gt=0, le=3650, description="a plan whose price row was read longer ago than this says so (`burst catalog refresh` renews Azure's rows)")
    checkpoint_every_steps: Optional[int] = Field(None, gt=0, le=10_000_000, description="also checkpoint inside an epoch every this many steps (default: whole epochs only; a notice of lost capacity checkpoints either way)")
    precision: str = Field("auto", description="what a run's layers compute in: auto (what the target's hardware runs fast: bfloat16 on TPUs and A100/L4/H100; float16 on V100/T4; float32 on CPUs and elsewhere), float32, mixed_bfloat16 or mixed_float16; a run's --precision wins")

    @field_validator("precision")
    @classmethod
    def _precision(cls, v):
        from workloads.common import precision  # light: names only

        return precision.check(v)

    @field_validator("deadline")
    @classmethod
    def _deadline(cls, v):
        if v is None:
            return v
        _deadline_hours(v, datetime.now(timezone.utc))  # raises ValueError with the reason
        return v

    @field_validator("providers")
    @classmethod
    def _providers(cls, v):
        if not v:
            raise ValueError("allow at least one provider")
        return v

    @field_validator("preemption_rate_per_hour")
    @classmethod
    def _rates(cls, v):
        for k, rate in v.items():
            if not targets.get(k).supports_spot:
                raise ValueError(f"{k}: has no preemptible capacity; rates apply to {', '.join(targets.names_where('supports_spot'))}")
            if not 0 <= rate <= MAX_PREEMPTIONS_PER_HOUR:
                raise ValueError(f"{k}: a rate per node-hour between 0 and {MAX_PREEMPTIONS_PER_HOUR} (one preemption every 30 minutes)")
        return v

    def deadline_hours(self, now: Optional[datetime] = None) -> Optional[float]:
        if self.deadline is None:
            return None
        return _deadline_hours(self.deadline, now or datetime.now(timezone.utc))

    def region_allowed(self, region: str) -> bool:
        return any(fnmatch.fnmatchcase(region, pattern) for pattern in self.regions)

    def accelerator_allowed(self, accelerator: str) -> bool:
        from .names import canonical

        return self.accelerators is None or any(fnmatch.fnmatchcase(accelerator, canonical(p)) for p in self.accelerators)


def _deadline_in_range(hours: float) -> float:
    if not hours > 0:  # also NaN
        raise ValueError("must be positive")
    if hours > MAX_DEADLINE_HOURS:
        raise ValueError(f"more than a year ({MAX_DEADLINE_HOURS:.0f} h) away; plans do not look that far")
    return hours


def _deadline_hours(value, now: datetime) -> float:
    if isinstance(value, bool):
        raise ValueError("give hours (48), a duration ('48h', '3d') or an ISO 8601 time")
    if isinstance(value, (int, float)):
        return _deadline_in_range(float(value))
    m = _DURATION.match(value)
    if m:
        return _deadline_in_range(float(m.group(1)) * _UNITS[m.group(2)])
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("give hours (48), a duration ('48h', '3d') or an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return (when - now).total_seconds() / 3600  # may be negative: a past deadline is infeasible, not malformed


# ---------------------------------------------------------------------- loading with line numbers


def parse(text: str, source: str = "<policy>") -> Policy:
    """Validate a policy document; errors are one line: ``file:line: field: what is wrong``."""
    node, raw = compose_yaml(text, source)
    if raw is None or raw == {}:
        raise BurstError(f"{source}: the policy is empty; give at least one field, e.g. `objective: min_cost` "
                         f"(fields: {', '.join(Policy.model_fields)}; examples in policies/)")
    if not isinstance(raw, dict):
        raise BurstError(f"{source}:1: a policy is a mapping of fields (objective, deadline, budget_usd, ...)")
    lines = key_lines(node) if node is not None else {}
    try:
        return Policy.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        path = key_path(lines, err["loc"])
        line = lines.get(path) or lines.get((), 1)
        field = ".".join(str(p) for p in path) or "(top level)"
        if err["type"] == "extra_forbidden":
            msg = f"unknown field {field!r}; allowed here: {', '.join(_allowed(path))}"
        else:
            msg = f"{field}: {err['msg']}"
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise BurstError(f"{source}:{line}: {msg}{more}") from None


def _allowed(path: tuple) -> list[str]:
    model: type[BaseModel] = Policy
    for part in path[:-1]:
        field = model.model_fields.get(str(part))
        ann = getattr(field, "annotation", None)
        inner = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not inner:
            break
        model = inner[0]
    return list(model.model_fields)


def load(path: Optional[Path] = None) -> Policy:
    path = Path(path) if path else DEFAULT_POLICY
    return parse(read_text(path, "policy", hint="; the examples are in policies/"), str(path))


def schema() -> dict:
    return Policy.model_json_schema()
