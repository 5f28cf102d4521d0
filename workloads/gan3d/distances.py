"""The 3DGAN showers' high-level features, the rows the sample distances (FPD, KPD, classifier
AUC in ``workloads.common.distances``) are computed on: energy per layer, total energy over the
incident energy, barycentre and width along x, y and z, and the number of hits, the features the
CaloChallenge evaluation and the ``jetnet`` metrics use."""

from __future__ import annotations

import numpy as np

from ..common.distances import distances, frechet_distance  # noqa: F401  (the sample distances, as this workload reports them)
from .features import hit_counts, moments


def high_level_features(images_gev: np.ndarray, energy_gev: np.ndarray, hit_threshold_gev: float) -> np.ndarray:
    """(N, x, y, z) showers in GeV → (N, z + 8) features: layer energies, E_sum/E_p, barycentres,
    widths, hits."""
    e = np.asarray(images_gev, np.float64)
    layers = e.sum(axis=(1, 2))
    m = moments(e)
    cols = [layers, (e.sum(axis=(1, 2, 3)) / energy_gev)[:, None]]
    cols += [m[f"m1_{a}"][:, None] for a in "xyz"]
    cols += [np.sqrt(m[f"m2_{a}"])[:, None] for a in "xyz"]
    cols.append(hit_counts(e, hit_threshold_gev)[:, None].astype(np.float64))
    return np.concatenate(cols, axis=1)
