"""A workload's performance profile: measured epoch tables, the time model fitted to them, accelerator speeds.

The time model (form and reasons in the profile file) is

    epoch_s = steps x (a_acc x b + t_step + hop_net x (N - 1) [when the N replicas span more than one node])
    steps   = events / (N x b)

with ``b`` the batch per replica, ``a_acc`` the seconds one replica of an accelerator spends per event,
``t_step`` the per-step cost that does not depend on the batch, and ``hop_net`` the per-step cost of
each further replica in the all-reduce ring once it crosses the network. It is linear in its
parameters, so the fit is a weighted (relative-error) linear least squares, made at load time from
the tables in the profile file: the tables and the model can never disagree.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from ..home import state
from ..errors import BurstError
from ..home.records import read_record
from .names import canonical

_SLICE = re.compile(r"^(tpu-v[0-9a-z]+?)-(\d+)$")  # tpu-v3-32 → family tpu-v3


class MixedPrecision(BaseModel):
    """The 16-bit format an accelerator runs fast, and how much faster the workload's step is in it."""

    model_config = ConfigDict(extra="forbid")
    precision: Literal["mixed_bfloat16", "mixed_float16"]
    speedup: float = Field(gt=0)  # per-event seconds in float32 (the tables) / in ``precision``
    basis: str


class AcceleratorSpeed(BaseModel):
    """One accelerator family: measured (it has tables) or derived from another one by a ratio.
    ``mixed``: the 16-bit format it runs fast (none: float32 is its fastest)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    kind: Literal["gpu", "tpu", "cpu-node"] = "gpu"
    network: str = "ethernet"           # what its multi-node all-reduce crosses (a network of the fit)
    from_: Optional[str] = Field(None, alias="from")
    ratio: Optional[float] = Field(None, gt=0)  # per-replica speed relative to ``from``
    replicas_per_chip: int = Field(1, gt=0)    # TPU: TensorCores TensorFlow sees as replicas
    chips_per_host: int = Field(1, gt=0)       # TPU: chips per host VM (a slice above it spans hosts)
    watts: float = Field(gt=0)                 # board power under training load, per chip / GPU / node
    watts_basis: str
    basis: str = "measured (the tables below)"
    mixed: Optional[MixedPrecision] = None

    @model_validator(mode="after")
    def _ratio_with_from(self):
        if (self.from_ is None) != (self.ratio is None):
            raise ValueError("give both from and ratio (a derived speed), or neither (a measured one)")
        return self


class Table(BaseModel):
    """Measured epoch times of one accelerator on one system: rows of [replicas, nodes, batch per replica, epoch seconds]."""

    model_config = ConfigDict(extra="forbid")
    name: str
    accelerator: str
    source: str
    held_out: bool = False              # never fitted: the benchmark's check of the model on data it has not seen
    network: Optional[str] = None       # default: the accelerator's
    rows: list[tuple[int, int, int, float]]

    @model_validator(mode="after")
    def _rows(self):
        for n, nodes, b, t in self.rows:
            if not (n >= 1 and 1 <= nodes <= n and b >= 1 and t > 0):
                raise ValueError(f"table {self.name}: a row needs 1 <= nodes <= replicas, batch >= 1 and seconds > 0, got {[n, nodes, b, t]}")
        return self


class Scaling(BaseModel):
    model_config = ConfigDict(extra="forbid")
    form: str
    tables: list[Table]


class LocalDefault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    events_per_s: float = Field(gt=0)
    basis: str


@dataclass(frozen=True)
class Point:
    """One measured epoch, as the model sees it."""

    table: str
    accelerator: str
    network: str
    replicas: int
    nodes: int
    batch: int
    seconds: float


@dataclass(frozen=True)
class Fit:
    """The fitted parameters: seconds per event per replica, per step, and per ring hop per step."""

    per_event: dict[str, float]
    per_step: float
    per_hop: dict[str, float]

    def epoch_s(self, per_event: float, network: str, replicas: int, nodes: int, batch: int, events: int) -> float:
        hop = self.per_hop.get(network, self.per_hop.get("ethernet", 0.0)) * (replicas - 1) if nodes > 1 else 0.0
        return events / (replicas * batch) * (per_event * batch + self.per_step + hop)


def fit_points(points: list[Point], events: int) -> Fit:
    """Relative-error least squares of the model over ``points``; every parameter kept >= 0.

    A parameter that the unconstrained solution makes negative is pinned at 0 and the rest refitted
    (the TPU interconnect's hop cost, for one, is below what two slice sizes can resolve); a
    negative per-event time pins the per-step cost instead (epochs of a few steps on a busy machine,
    where the larger batch came out no faster per event), since every accelerator spends time per event.
    """
    accs = sorted({p.accelerator for p in points})
    nets = sorted({p.network for p in points if p.nodes > 1})
    names = [("event", a) for a in accs] + [("step", "")] + [("hop", n) for n in nets]
    rows = []
    for p in points:
        steps = events / (p.replicas * p.batch)
        x = [steps * p.batch if ("event", p.accelerator) == k else 0.0 for k in names[:len(accs)]]
        x.append(steps)
        x += [steps * (p.replicas - 1) if p.nodes > 1 and p.network == n else 0.0 for _, n in names[len(accs) + 1:]]
        rows.append([v / p.seconds for v in x])
    free = list(range(len(names)))
    while True:
        coef = [0.0] * len(names)
        for i, v in zip(free, _least_squares([[r[i] for i in free] for r in rows], [1.0] * len(rows))):
            coef[i] = v
        negative = [i for i in free if coef[i] < 0]
        if not negative:
            break
        others = [i for i in negative if names[i][0] != "event"]
        step = names.index(("step", ""))
        if others:
            free.remove(min(others, key=lambda i: coef[i]))
        elif step in free:  # an accelerator's per-event time must stay: the per-step cost is pinned first (noisy epochs of few steps)
            free.remove(step)
        else:
            free.remove(min(negative, key=lambda i: coef[i]))
    values = dict(zip(names, coef))
    missing = [a for a in accs if values[("event", a)] <= 0]
    if missing:
        raise BurstError(f"the time model cannot be fitted: no positive per-event time for {', '.join(missing)}")
    return Fit({a: float(values[("event", a)]) for a in accs}, float(values[("step", "")]),
               {n: float(values[("hop", n)]) for n in nets})


def _least_squares(x: list[list[float]], y: list[float]) -> list[float]:
    """argmin |x b - y|, by the normal equations on unit-norm columns (a handful of parameters;
    pure Python so that `burst plan` does not import NumPy)."""
    cols = len(x[0]) if x else 0
    norms = [max(sum(r[j] ** 2 for r in x) ** 0.5, 1e-300) for j in range(cols)]
    a = [[sum(r[i] * r[j] for r in x) / (norms[i] * norms[j]) for j in range(cols)] + [sum(r[i] * v for r, v in zip(x, y)) / norms[i]]
         for i in range(cols)]
    for c in range(cols):  # Gauss-Jordan with partial pivoting
        pivot = max(range(c, cols), key=lambda r: abs(a[r][c]))
        if abs(a[pivot][c]) < 1e-12:
            raise BurstError("the time model cannot be fitted: the measured tables do not determine every parameter")
        a[c], a[pivot] = a[pivot], a[c]
        for r in range(cols):
            if r != c and a[r][c]:
                f = a[r][c] / a[c][c]
                a[r] = [u - f * w for u, w in zip(a[r], a[c])]
    return [a[i][cols] / a[i][i] / norms[i] for i in range(cols)]


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workload: str
    preset: str
    events: int = Field(gt=0)
    dataset_gb: float = Field(ge=0)
    checkpoint_gb: float = Field(ge=0)
    epochs: int = Field(gt=0)
    checkpoint_every_epochs: int = Field(1, gt=0)
    scaling: Scaling
    accelerators: dict[str, AcceleratorSpeed]
    local_default: LocalDefault
    _fit: Optional[Fit] = PrivateAttr(None)  # made once per loaded profile: every candidate's estimate asks for it

    @model_validator(mode="after")
    def _names(self):
        for t in self.scaling.tables:
            if t.accelerator not in self.accelerators:
                raise ValueError(f"table {t.name}: accelerator {t.accelerator!r} has no entry under accelerators")
            if self.accelerators[t.accelerator].from_ is not None:
                raise ValueError(f"table {t.name}: {t.accelerator} is measured, so it cannot also be derived (drop from/ratio)")
        for name, acc in self.accelerators.items():
            if acc.from_ is None and not any(t.accelerator == name and not t.held_out for t in self.scaling.tables):
                raise ValueError(f"accelerator {name}: no measured table fits it; derive it with from + ratio")
        return self

    # ------------------------------------------------------------------ the fit

    def points(self, held_out: bool = False) -> list[Point]:
        """The measured epochs the fit uses (``held_out``: the ones it must never see)."""
        return [Point(t.name, t.accelerator, t.network or self.accelerators[t.accelerator].network, n, nodes, b, s)
                for t in self.scaling.tables if t.held_out == held_out for n, nodes, b, s in t.rows]

    def fit(self) -> Fit:
        if self._fit is None:
            self._fit = fit_points(self.points(), self.events)
        return self._fit

    def family(self, accelerator: str) -> str:
        """The profile's entry for a catalog name: ``tpu-v3-32`` is a slice of the ``tpu-v3`` family."""
        accelerator = canonical(accelerator)  # a site policy's `A100` is the A100-40GB
        if accelerator in self.accelerators:
            return accelerator
        m = _SLICE.match(accelerator)
        if m and m.group(1) in self.accelerators:
            return m.group(1)
        raise BurstError(f"workload {self.workload} has no speed for accelerator {accelerator!r} in its profile")

    def knows(self, accelerator: str) -> bool:
        """Whether the profile has a speed (measured or derived) for ``accelerator``."""
        try:
            self.family(accelerator)
        except BurstError:
            return False
        return True

    def per_event_s(self, accelerator: str, fit: Optional[Fit] = None) -> float:
        """Seconds one replica spends per event (measured, or derived through the ``from`` chain)."""
        fit = fit or self.fit()
        measured_here = calibration(self)  # a speed measured on this site's runs; derived speeds follow it
        seen: set[str] = set()
        factor, name = 1.0, self.family(accelerator)
        while True:
            if name in seen:
                raise BurstError(f"profile: accelerator speeds refer to each other in a loop at {name!r}")
            seen.add(name)
            if name in measured_here:
                return measured_here[name]["per_event_s"] / factor
            entry = self.accelerators.get(name)
            if entry is None:
                raise BurstError(f"profile: {name!r} is named as a base speed but has no entry")
            if entry.from_ is None:
                return fit.per_event[name] / factor
            factor *= entry.ratio
            name = entry.from_

    def precision(self, accelerator: str, asked: str = "auto") -> tuple[str, float, str]:
        """(the precision a run on ``accelerator`` computes in, its speed-up over the float32 tables,
        where the figure comes from). ``auto`` is the accelerator's fast 16-bit format, if it has one."""
        mixed = self.accelerators[self.family(accelerator)].mixed
        if asked == "auto":
            asked = mixed.precision if mixed else "float32"
        if asked == "float32":
            return asked, 1.0, "float32, as the tables were measured"
        if mixed is None or mixed.precision != asked:
            return asked, 1.0, f"no speed-up counted: {accelerator} does not run {asked} fast"
        return asked, mixed.speedup, mixed.basis

    def speed(self, accelerator: str) -> float:
        """Per-replica throughput relative to one V100 replica (for tables and explanations)."""
        return self.per_event_s("V100") / self.per_event_s(accelerator)

    def replicas(self, accelerator: str, count: int) -> int:
        """TensorFlow replicas of ``count`` devices (TPU: chips × TensorCores per chip)."""
        return count * self.accelerators[self.family(accelerator)].replicas_per_chip

    def hosts(self, accelerator: str, count: int, nodes: int) -> int:
        acc = self.accelerators[self.family(accelerator)]
        return max(nodes, -(-count // acc.chips_per_host)) if acc.kind == "tpu" else nodes

    def epoch_seconds(self, accelerator: str, count: int, nodes: int = 1, batch: Optional[int] = None,
                      events: Optional[int] = None, precision: str = "float32") -> float:
        """Seconds per epoch on ``count`` devices (GPUs, TPU chips or CPU nodes) over ``nodes`` hosts,
        computing in ``precision`` (its speed-up shortens the per-event term; the per-step and
        all-reduce terms stay: the gradients are all-reduced in float32 either way)."""
        if count < 1 or nodes < 1:
            raise BurstError("need at least one device on one node")
        fit = self.fit()
        acc = self.accelerators[self.family(accelerator)]
        speedup = self.precision(accelerator, precision)[1]
        return fit.epoch_s(self.per_event_s(accelerator, fit) / speedup, acc.network, self.replicas(accelerator, count),
                           self.hosts(accelerator, count, nodes), batch or self.default_batch(), events or self.events)

    def default_batch(self) -> int:
        """The batch per replica `burst train` uses for the profile's preset."""
        from .. import workloads  # presets are plain data: no TensorFlow

        return workloads.get(self.workload).default_batch(self.preset)

    def watts(self, accelerator: str) -> float:
        return self.accelerators[self.family(accelerator)].watts

    def basis(self, accelerator: str) -> str:
        try:
            name = self.family(accelerator)
        except BurstError:
            return "unknown"
        if name in calibration(self):
            return calibration(self)[name]["basis"]
        return self.accelerators[name].basis

    def measured_accelerator(self, accelerator: str) -> bool:
        try:
            name = self.family(accelerator)
        except BurstError:
            return False
        return self.accelerators[name].from_ is None or name in calibration(self)


def load(workload: str, path: Optional[Path] = None) -> Profile:
    """The placement profile of ``workload`` (``profile.yaml`` in its package), or the file at ``path``."""
    if path is None:
        from .. import workloads

        path = workloads.get(workload).profile_path
    try:
        raw = yaml.safe_load(Path(path).read_text())
        return Profile.model_validate(raw)
    except OSError as exc:
        raise BurstError(f"cannot read workload profile {path}: {exc.strerror}") from None
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()
        raise BurstError(f"workload profile {path} is invalid: {' '.join(first[:3])}") from None


# ---------------------------------------------------------------------- measured here (burst calibrate)


def calibration_path(workload: str) -> Path:
    return state.home() / "calibration" / f"{workload}.json"


PROFILED = "measured by `burst profile`"  # how this machine's speed measured by `burst profile` begins its basis (placement.derive)


# Speeds a plan may rest on: finite, above zero, and within what any machine could measure.
Speed = Field(gt=0, le=1e9, allow_inf_nan=False)


class _Calibrated(BaseModel):
    per_event_s: float = Speed
    basis: str


class CalibrationRecord(BaseModel):
    """``calibration/<workload>.json``, written by `burst calibrate`."""

    accelerators: dict[str, _Calibrated]


class BenchRecord(BaseModel):
    """``bench/<workload>.json``, written by `burst bench`: this machine's events per second (in
    float32), and in every precision it measured."""

    events_per_s: float = Speed
    cpus: Optional[int] = Field(None, ge=1, le=1_000_000)
    by_precision: dict[str, Annotated[float, Speed]] = Field(default_factory=dict)


def calibration(profile: Profile) -> dict[str, dict]:
    """Accelerator speeds refitted from this site's own runs by `burst calibrate` (family → record)."""
    path = calibration_path(profile.workload)
    try:
        rec = read_record(path, "calibration record", f"run `burst calibrate` again or remove it (rm -r {path})", CalibrationRecord)
    except FileNotFoundError:
        return {}
    return {k: {"per_event_s": v.per_event_s, "basis": v.basis} for k, v in rec.accelerators.items()}


def record_calibration(profile: Profile, family: str, per_event_s: float, basis: str, runs: list[str]) -> Path:
    path = calibration_path(profile.workload)
    calibration(profile)  # a damaged record is said, not overwritten with this one accelerator
    current = json.loads(path.read_text()) if path.exists() else {"accelerators": {}}
    current["accelerators"][family] = {"per_event_s": per_event_s, "basis": basis, "runs": runs, "recorded_at": time.time()}
    state.write_json_atomic(path, current)
    return path


# ---------------------------------------------------------------------- this machine (burst bench)


def bench_path(workload: str) -> Path:
    return state.home() / "bench" / f"{workload}.json"


def record_local(workload: str, result: dict) -> Path:
    path = bench_path(workload)
    state.write_json_atomic(path, {**result, "recorded_at": time.time()})
    return path


def local_throughput(profile: Profile, precision: str = "float32") -> tuple[float, str]:
    """Events per second of the paper preset on this machine in ``precision`` (``auto``: what this
    CPU runs fast), and where the figure comes from."""
    from workloads.common import precision as precisions  # light: names and /proc/cpuinfo

    if precision == precisions.AUTO:
        precision = precisions.for_cpu(precisions.cpu_flags())[0]
    path = bench_path(profile.workload)
    try:
        rec = read_record(path, "bench record", f"run `burst bench` again or remove it (rm -r {path})", BenchRecord)
    except FileNotFoundError:
        basis = profile.local_default.basis
        if basis.startswith(PROFILED):  # this machine's own measurement already
            return profile.local_default.events_per_s, basis
        from .. import workloads

        w = workloads.get(profile.workload)
        how = "`burst bench`" if w.bench_command(1, 1, 1) is not None else f"`burst profile {getattr(w, 'spec', None) or w.name}`"
        return profile.local_default.events_per_s, f"profile default ({basis}, float32); run {how} to measure this machine"
    if precision in rec.by_precision:
        return rec.by_precision[precision], f"measured by `burst bench` in {precision} ({rec.cpus or '?'} CPUs)"
    return rec.events_per_s, f"measured by `burst bench` in float32 ({rec.cpus or '?'} CPUs; {precision} not measured)"
