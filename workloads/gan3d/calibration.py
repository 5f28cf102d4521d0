"""The generator's energy response, calibrated on training events.

A GAN's showers can come out a few per cent too faint or too bright on one seed and right on
another (the default run: 5 to 14 % on three seeds) while their shapes are right; a calorimeter
simulation is calibrated so that its response matches the detector's. So after training, the
generator makes one shower for each of a fixed set of training events' conditions, and the ratio
of the Monte Carlo's summed energy to the generator's, in bins of primary energy, becomes a scale
applied to every shower it generates (linear in energy between the bins' mean energies, constant
beyond them). The fit uses training events only; validation judges the calibrated generator on
held-out events and reports how far from 1 the scale was (``energy_scale_offset``), so a generator
that needed a large correction is visible, and a quality gate can bound it.

The scale depends only on the weights, so the trainer fits it again whenever its weights have
moved since the last fit (``GAN3DTrainer.calibration``), and every checkpoint carries the fit made
with its own weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Training events the fit generates showers for (the first ones of the training files, after the cut).
REFERENCE_EVENTS = 512
#: Bins of primary energy, equally populated; each holds REFERENCE_EVENTS / BINS events.
BINS = 4


@dataclass(frozen=True)
class Reference:
    """The training events a fit compares against: conditions and summed energy (stored units)."""

    energy_gev: np.ndarray
    angle: np.ndarray
    ecal: np.ndarray


@dataclass(frozen=True)
class EnergyCalibration:
    """Scales of the generator's showers at the bins' mean primary energies (GeV)."""

    energies: tuple[float, ...] = (100.0,)
    scales: tuple[float, ...] = (1.0,)
    events: int = 0  # training events the fit used; 0: no fit (the scale is 1)

    def scale(self, energy_gev: np.ndarray) -> np.ndarray:
        """The factor for each shower of these primary energies."""
        return np.interp(np.asarray(energy_gev, np.float64), self.energies, self.scales).astype(np.float32)

    @property
    def offset(self) -> float:
        """How far the raw generator was from the Monte Carlo's response: the largest |scale - 1|."""
        return float(max(abs(s - 1.0) for s in self.scales))

    def as_dict(self) -> dict:
        return {"energies": list(self.energies), "scales": list(self.scales), "events": self.events}

    @classmethod
    def from_dict(cls, d: dict | None) -> "EnergyCalibration":
        if not d:
            return cls()
        return cls(tuple(float(e) for e in d["energies"]), tuple(float(s) for s in d["scales"]), int(d["events"]))

    def describe(self) -> str:
        if not self.events:
            return "not calibrated"
        pairs = ", ".join(f"x{s:.3f} at {e:.0f} GeV" for e, s in zip(self.energies, self.scales))
        return f"energy response calibrated on {self.events} training events: {pairs}"


IDENTITY = EnergyCalibration()


def fit(mc_ecal: np.ndarray, gan_ecal: np.ndarray, energy_gev: np.ndarray, bins: int = BINS) -> EnergyCalibration:
    """The ratio of summed MC to summed generated energy in ``bins`` equally populated bins of
    primary energy. A bin where the generator deposits nothing leaves the scale at 1 (a dead
    generator is not mended by a calibration; its report says so)."""
    energy_gev = np.asarray(energy_gev, np.float64)
    mc_ecal, gan_ecal = np.asarray(mc_ecal, np.float64), np.asarray(gan_ecal, np.float64)
    if len(energy_gev) == 0:
        return IDENTITY
    bins = max(1, min(bins, len(energy_gev)))
    order = np.argsort(energy_gev, kind="stable")
    energies, scales = [], []
    for part in np.array_split(order, bins):
        made = gan_ecal[part].sum()
        ok = np.isfinite(made) and made > 0
        energies.append(float(energy_gev[part].mean()))
        scales.append(float(mc_ecal[part].sum() / made) if ok else 1.0)
    if bins > 1 and not np.all(np.diff(energies) > 0):  # events of one energy (a test beam): one scale
        return fit(mc_ecal, gan_ecal, energy_gev, bins=1)
    return EnergyCalibration(tuple(energies), tuple(scales), len(energy_gev))
