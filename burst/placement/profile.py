"""A workload's performance profile: measured epoch times, the scaling fit, accelerator speeds.

The fit is Amdahl's law per epoch, ``epoch_s(N) = A / N + B``, made at load time from the
measured table in the profile file, so the table and the model can never disagree.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .. import state
from ..errors import BurstError

WORKLOAD_PROFILES = {"gan3d": Path(__file__).resolve().parents[2] / "workloads" / "gan3d" / "profile.yaml"}


class AcceleratorSpeed(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    speed: Optional[float] = Field(None, gt=0)
    epoch_s: Optional[float] = Field(None, gt=0)
    from_: Optional[str] = Field(None, alias="from")
    ratio: Optional[float] = Field(None, gt=0)
    basis: str

    @model_validator(mode="after")
    def _one_kind(self):
        kinds = [self.speed is not None, self.epoch_s is not None, self.from_ is not None]
        if sum(kinds) != 1 or (self.from_ is not None) != (self.ratio is not None):
            raise ValueError("give exactly one of: speed, epoch_s, or from + ratio")
        return self


class Scaling(BaseModel):
    model_config = ConfigDict(extra="forbid")
    accelerator: str
    measured: dict[int, float]


class LocalDefault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    events_per_s: float = Field(gt=0)
    basis: str


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workload: str
    preset: str
    events: int = Field(gt=0)
    dataset_gb: float = Field(ge=0)
    checkpoint_gb: float = Field(ge=0)
    epochs: int = Field(gt=0)
    batch_per_replica: int = Field(gt=0)
    checkpoint_every_epochs: int = Field(1, gt=0)
    scaling: Scaling
    accelerators: dict[str, AcceleratorSpeed]
    local_default: LocalDefault

    # ------------------------------------------------------------------ the fit

    def fit(self) -> tuple[float, float]:
        """(A, B) of ``epoch_s = A / N + B`` from the measured table."""
        return fit_amdahl(self.scaling.measured)

    def speed(self, accelerator: str) -> float:
        """Throughput relative to one device of the scaling table's accelerator."""
        seen = set()
        factor, name = 1.0, accelerator
        while True:
            entry = self.accelerators.get(name)
            if entry is None:
                raise BurstError(f"workload {self.workload} has no speed for accelerator {name!r} in its profile")
            if name in seen:
                raise BurstError(f"profile: accelerator speeds refer to each other in a loop at {name!r}")
            seen.add(name)
            if entry.speed is not None:
                return factor * entry.speed
            if entry.epoch_s is not None:
                a, b = self.fit()
                return factor * a / max(entry.epoch_s - b, 1e-9)
            factor *= entry.ratio
            name = entry.from_

    def epoch_seconds(self, accelerator: str, devices: int, events: Optional[int] = None) -> float:
        """Seconds per epoch on ``devices`` accelerators (TPU: slices) for ``events`` events."""
        if devices < 1:
            raise BurstError("need at least one device")
        a, b = self.fit()
        scale = (events or self.events) / self.events
        return scale * (a / (self.speed(accelerator) * devices) + b)

    def basis(self, accelerator: str) -> str:
        entry = self.accelerators.get(accelerator)
        return entry.basis if entry else "unknown"

    def measured_accelerator(self, accelerator: str) -> bool:
        entry = self.accelerators.get(accelerator)
        return bool(entry) and entry.from_ is None


def fit_amdahl(measured: dict[int, float]) -> tuple[float, float]:
    """Weighted least squares (relative error) of ``t = A / N + B``; B is kept non-negative."""
    if len(measured) < 2:
        raise BurstError("the scaling fit needs at least two measured points")
    # Normal equations of sum(((A/N + B) - t) / t)^2, a 2x2 system.
    s11 = s12 = s22 = r1 = r2 = 0.0
    for n, t in measured.items():
        x1, x2, w = 1.0 / n / t, 1.0 / t, 1.0
        s11 += x1 * x1
        s12 += x1 * x2
        s22 += x2 * x2
        r1 += x1 * w
        r2 += x2 * w
    det = s11 * s22 - s12 * s12
    a = (r1 * s22 - r2 * s12) / det
    b = (s11 * r2 - s12 * r1) / det
    if b < 0:  # no serial part: a pure 1/N fit
        a, b = r1 / s11, 0.0
    return a, b


def load(workload: str = "gan3d", path: Optional[Path] = None) -> Profile:
    if path is None:
        if workload not in WORKLOAD_PROFILES:
            raise BurstError(f"unknown workload {workload!r}; choose one of: {', '.join(WORKLOAD_PROFILES)}")
        path = WORKLOAD_PROFILES[workload]
    try:
        raw = yaml.safe_load(Path(path).read_text())
        return Profile.model_validate(raw)
    except OSError as exc:
        raise BurstError(f"cannot read workload profile {path}: {exc.strerror}") from None
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()
        raise BurstError(f"workload profile {path} is invalid: {' '.join(first[:3])}") from None


# ---------------------------------------------------------------------- this machine (burst bench)


def bench_path(workload: str) -> Path:
    return state.home() / "bench" / f"{workload}.json"


def record_local(workload: str, result: dict) -> Path:
    path = bench_path(workload)
    state.write_json_atomic(path, {**result, "recorded_at": time.time()})
    return path


def local_throughput(profile: Profile) -> tuple[float, str]:
    """Events per second of the paper preset on this machine, and where the figure comes from."""
    path = bench_path(profile.workload)
    if path.exists():
        try:
            rec = json.loads(path.read_text())
            return float(rec["events_per_s"]), f"measured by `burst bench` ({rec.get('cpus', '?')} CPUs)"
        except (ValueError, KeyError, TypeError):
            raise BurstError(f"bench record {path} is corrupt; run `burst bench` again") from None
    return profile.local_default.events_per_s, f"profile default ({profile.local_default.basis}); run `burst bench` to measure this machine"
