"""The shape of a hyper-parameter scan, for the plan: how many trials, how many at once, on how many
GPUs each, and what ASHA is expected to save.

ASHA (asynchronous successive halving) lets every trial train ``grace_period`` epochs, then keeps
one in ``reduction_factor`` at each rung (grace, grace·η, grace·η², ... epochs); the others stop
there. The plan assumes exactly that fraction passes each rung. It is an assumption, stated with
every scan estimate: asynchronous promotion lets early trials through more often, and a scan
whose knobs barely matter stops fewer trials than one whose knobs matter a lot.

On a cluster of fixed size the scan's wall time is the larger of one full trial (the critical
path) and the expected trial-epochs shared over the trials running at once; the cluster is
billed for all of it, idle GPUs included once fewer trials remain than fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ScanShape:
    trials: int
    gpus_per_trial: Optional[int] = None  # None: 1 GPU on GPU targets, CPUs on this machine
    concurrent: Optional[int] = None      # None: every trial at once
    grace_period: int = 1
    reduction_factor: int = 2

    @property
    def at_once(self) -> int:
        return min(self.trials, self.concurrent or self.trials)

    @property
    def devices_per_trial(self) -> int:
        return self.gpus_per_trial or 1

    @property
    def gpus(self) -> int:
        """Accelerators of the cluster the scan asks for."""
        return self.devices_per_trial * self.at_once

    def rungs(self, epochs: int) -> list[int]:
        out, r = [], min(self.grace_period, epochs)
        while r < epochs:
            out.append(r)
            r *= self.reduction_factor
        return out

    def trial_epochs(self, epochs: int) -> float:
        """Expected epochs trained over all trials: everyone up to the first rung, 1/η of them to the next, ..."""
        total, share, done = 0.0, 1.0, 0
        for rung in self.rungs(epochs):
            total += share * (rung - done)
            done = rung
            share /= self.reduction_factor
        total += share * (epochs - done)
        return self.trials * total

    def wall_epochs(self, epochs: int, at_once: Optional[int] = None) -> float:
        """Epochs of one trial's length the scan takes end to end with ``at_once`` trials side by side."""
        return max(float(epochs), self.trial_epochs(epochs) / (at_once or self.at_once))

    def note(self, epochs: int) -> str:
        full = self.trials * epochs
        return (f"scan of {self.trials} trial(s), {self.at_once} at a time on {self.devices_per_trial} device(s) each: ASHA (grace "
                f"{self.grace_period}, reduction factor {self.reduction_factor}) assumed to train {self.trial_epochs(epochs):.1f} of "
                f"{full} trial-epochs ({1 - self.trial_epochs(epochs) / full:.0%} saved), 1/{self.reduction_factor} of the trials "
                "passing each rung")
