"""`burst calibrate RUN...`: refit an accelerator's speed from this site's own measured runs.

A run's cost.json holds what the plan predicted (accelerator, devices, nodes, batch) and the
epoch time measured. The time model's per-step cost and network terms stay as fitted to the
published tables; only the accelerator's seconds per event are solved from the measurement:

    per_step_measured = epoch_s / steps,   a_acc = (per_step_measured - t_step - hop) / b

averaged over the runs given, and written to the state directory, where every later plan uses it
and says "measured here".
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from ..errors import BurstError
from ..placement import profile as profile_mod


@dataclass
class Calibration:
    accelerator: str
    per_event_s: float
    before_s: float
    runs: list[str]
    path: Path

    @property
    def speed_change(self) -> float:
        return self.before_s / self.per_event_s


def _measured(run_id: str) -> dict:
    from . import runs

    record = runs.load_run(run_id)
    if not record.run_dir:
        raise BurstError(f"run {run_id} has no results on this machine yet (state {record.state}); calibrate from finished runs")
    from .rundir import read_cost

    cost = read_cost(Path(record.run_dir) / "cost.json", run_id)
    plan, measured = cost.plan, cost.measured.epoch_s
    if not plan:
        raise BurstError(f"run {run_id} ran on a cluster started without a plan (a pinned local machine); "
                         "this machine's speed is measured by `burst bench`")
    if measured is None:
        raise BurstError(f"run {run_id} measured no epoch time")
    if cost.predicted.epoch_s is None or cost.predicted.events_per_epoch is None:
        raise BurstError(f"run {run_id} is not comparable with the time model: {cost.predicted.why}")
    return {"run": run_id, "workload": record.workload, "plan": plan, "epoch_s": measured, "events": cost.predicted.events_per_epoch,
            "precision": _precision_of(Path(record.run_dir), plan)}


def _precision_of(run_dir: Path, plan: dict) -> str:
    """What the run computed in: as its worker decided (provenance), else as planned, else float32 (runs before precision)."""
    import json

    try:
        machine = json.loads((run_dir / "provenance.json").read_text()).get("machine", {})
    except (OSError, ValueError):
        machine = {}
    return machine.get("precision") or plan.get("precision") or "float32"


def calibrate(run_ids: list[str]) -> Calibration:
    """Solve the accelerator's seconds per event from the runs (all on one accelerator) and record it."""
    if not run_ids:
        raise BurstError("name at least one finished run: burst calibrate RUN [RUN...]")
    measured = [_measured(r) for r in run_ids]
    names = {m["workload"] for m in measured}
    if len(names) != 1:
        raise BurstError(f"the runs trained {', '.join(sorted(names))}; calibrate one workload at a time")
    prof = profile_mod.load(names.pop())
    families = {prof.family(m["plan"]["accelerator"]) for m in measured}
    if len(families) != 1:
        raise BurstError(f"the runs trained on {', '.join(sorted(families))}; calibrate one accelerator at a time")
    family = families.pop()
    fit = prof.fit()
    network = prof.accelerators[family].network
    solved = []
    for m in measured:
        p = m["plan"]
        replicas = prof.replicas(p["accelerator"], p["count"])
        nodes = prof.hosts(p["accelerator"], p["count"], p["nodes"])
        b = p["batch_per_replica"]
        steps = m["events"] / (replicas * b)
        hop = fit.per_hop.get(network, fit.per_hop.get("ethernet", 0.0)) * (replicas - 1) if nodes > 1 else 0.0
        a = (m["epoch_s"] / steps - fit.per_step - hop) / b
        if a <= 0:
            raise BurstError(f"run {m['run']}: its steps ({m['epoch_s'] / steps:.3f} s) are shorter than the model's fixed per-step "
                             f"cost; it cannot calibrate {family}")
        # the profile's speeds are float32's; a run in a 16-bit precision was faster by its speed-up
        solved.append(a * prof.precision(p["accelerator"], m["precision"])[1])
    before = prof.per_event_s(family, fit)
    per_event = statistics.mean(solved)
    sixteen = sorted({m["precision"] for m in measured} - {"float32"})
    basis = (f"measured here: {len(solved)} run(s) ({', '.join(run_ids)}), calibrated {date.today().isoformat()}"
             + (f" (runs in {', '.join(sixteen)}, scaled to float32 by the profile's speed-up)" if sixteen else ""))
    path = profile_mod.record_calibration(prof, family, per_event, basis, list(run_ids))
    return Calibration(family, per_event, before, list(run_ids), path)
