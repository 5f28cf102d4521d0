"""One target the plan could place a run on, with its estimate and, once checked, why it is or is
not feasible: what every source of candidates makes and the planner ranks."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from . import estimate as est_mod
from ..catalog import facts
from .layout import Layout
from .reasons import code_of


@dataclass
class Candidate:
    target: str            # the target's kind: local | onprem | cloud
    provider: str          # a provider of the target registry
    region: str
    accelerator: str
    count: int
    preemptible: bool
    estimate: Optional[est_mod.Estimate]  # None until the filters that read no price have kept it
    layout: Optional[Layout] = None
    reasons: list[str] = field(default_factory=list)
    feasible: bool = True
    violation: float = 0.0  # how far past the tightest constraint (1.0 = exactly at it)
    nodes: int = 1          # nodes the layout spans (on-prem: what the scheduler allocates)

    @property
    def layout_text(self) -> str:
        if self.layout is not None:
            return self.layout.describe()
        return f"{self.count} {self.accelerator}" if self.target == "onprem" else f"{os.cpu_count()} CPUs"

    def after_lease(self):
        """What the cluster still costs an hour once its keeper has ended it at its lease's end (clouds), or None."""
        return facts.load(self.provider).after_lease if self.target == "cloud" else None

    def to_dict(self) -> dict:
        e = self.estimate
        after = self.after_lease()
        return {
            "after_lease_usd_per_hour": None if after is None else after.usd_per_hour,
            "target": self.target, "provider": self.provider, "region": self.region, "accelerator": self.accelerator,
            "count": self.count, "layout": self.layout.to_dict() if self.layout else {"description": self.layout_text},
            "preemptible": self.preemptible, "batch_per_replica": e.batch, "precision": e.precision, "est_epoch_s": round(e.epoch_s, 2), "est_hours": round(e.hours, 3),
            "est_cost_usd": round(e.cost_usd, 2), "hourly_usd": round(e.hourly_usd, 4),
            "est_kgco2e": None if e.kgco2e is None else round(e.kgco2e, 3), "energy_kwh": round(e.energy_kwh, 3),
            "grid_gco2_per_kwh": e.grid_g_per_kwh, "feasible": self.feasible,
            "reasons": self.reasons,
            "reason_codes": [code_of(r).value for r in self.reasons],
            "queue_wait_h": round(e.queue_h, 3) if self.target == "onprem" else None,
            "queue_source": e.queue_source if self.target == "onprem" else None,
            "breakdown": {"queue_h": round(e.queue_h, 3), "provision_h": round(e.provision_h, 3), "staging_h": round(e.staging_h, 3),
                          "training_h": round(e.training_h, 3), "preemption_h": round(e.preemption_h, 3),
                          "compute_usd": round(e.compute_usd, 2), "storage_usd": round(e.storage_usd, 2), "egress_usd": round(e.egress_usd, 2)},
        }
