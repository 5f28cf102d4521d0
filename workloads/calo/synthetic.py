"""Synthetic Monte Carlo in the CaloChallenge dataset-2 file layout, so that the workload runs
end to end with no download.

Not Geant4: a parametrised electromagnetic shower (the Grindhammer-Peters form) in a
tungsten-silicon sampling calorimeter, with the fluctuations that make the evaluation
meaningful. Per event: the incident energy, log-uniform in 1 GeV - 1 TeV; the deposited
(silicon) energy, a sampling fraction of 1.5 % with a 20 %/sqrt(E/GeV) stochastic term; a
longitudinal Gamma profile in radiation lengths (half an X0 per layer) whose maximum sits at
ln(E/Ec) - 0.5 with Ec = 8 MeV, jittered event by event; a radial two-component profile (core
0.3 and tail 1.2 Moliere radii of 9.3 mm, the tail widening with depth); an event-wide tilt in
alpha. Cells are filled by a Poisson number of energy spots around their expectation (0.05 MeV
each), and readings below 15 keV are zero, so showers are sparse far from their core as real
ones are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .geometry import (ALPHA_BINS, ALPHA_CENTRES, ENERGY_KEY, ENERGY_RANGE_MEV, LAYERS, R_EDGES_MM, RADIAL_BINS, SHOWER_KEY,
                       VOXELS)

SAMPLING_FRACTION = 0.015
STOCHASTIC = 0.20           # relative spread of the deposited energy at 1 GeV, falling as 1/sqrt(E)
X0_PER_LAYER = 0.5
CRITICAL_MEV = 8.0
MOLIERE_MM = 9.3
SPOT_MEV = 0.05
THRESHOLD_MEV = 0.015


def _radial_shares(depth_x0: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, layers, r): each layer's energy share per radial cell (Grindhammer-Peters core + tail)."""
    core = 0.3 * MOLIERE_MM * (1 + 0.05 * rng.standard_normal((n, 1)))
    tail = MOLIERE_MM * (0.8 + 0.06 * depth_x0[None, :])  # (1, layers): widens with depth
    p_core = np.clip(0.8 - 0.015 * depth_x0[None, :], 0.2, 0.9)

    def cdf(r, scale):  # the integral of 2 r s^2 / (r^2 + s^2)^2
        return r ** 2 / (r ** 2 + scale ** 2)

    edges = R_EDGES_MM[None, None, :]
    inner = p_core[..., None] * cdf(edges, core[..., None]) + (1 - p_core[..., None]) * cdf(edges, tail[..., None])
    shares = np.diff(inner, axis=-1)
    return shares / shares.sum(-1, keepdims=True)


def generate_events(n: int, seed: int = 0, energy_range: tuple[float, float] = ENERGY_RANGE_MEV) -> tuple[np.ndarray, np.ndarray]:
    """(incident energies (n, 1) MeV, showers (n, 6480) MeV)."""
    rng = np.random.default_rng(seed)
    lo, hi = np.log(energy_range[0]), np.log(energy_range[1])
    e_inc = np.exp(rng.uniform(lo, hi, n))
    deposited = SAMPLING_FRACTION * e_inc * np.clip(1 + STOCHASTIC / np.sqrt(e_inc / 1e3) * rng.standard_normal(n), 0.3, None)
    depth = (np.arange(LAYERS) + 0.5) * X0_PER_LAYER
    t_max = np.log(e_inc / CRITICAL_MEV) - 0.5 + 0.4 * rng.standard_normal(n)
    b = 0.5
    a = b * np.clip(t_max, 0.5, None) + 1
    long = np.exp((a[:, None] - 1) * np.log(b * depth[None, :]) - b * depth[None, :])
    long /= long.sum(1, keepdims=True)
    radial = _radial_shares(depth, rng, n)
    tilt = rng.uniform(0, 2 * np.pi, n)
    strength = 0.3 * rng.uniform(0, 1, n)
    angular = 1 + strength[:, None] * np.cos(ALPHA_CENTRES[None, :] - tilt[:, None])
    angular /= angular.sum(1, keepdims=True)
    expected = deposited[:, None, None, None] * long[:, :, None, None] * angular[:, None, :, None] * radial[:, :, None, :]
    showers = rng.poisson(expected / SPOT_MEV).astype(np.float64) * SPOT_MEV
    showers *= rng.gamma(20.0, 1 / 20.0, showers.shape)  # the spread of one spot's deposit
    showers[showers < THRESHOLD_MEV] = 0.0
    assert showers.shape == (n, LAYERS, ALPHA_BINS, RADIAL_BINS)
    return e_inc[:, None].astype(np.float32), showers.reshape(n, VOXELS).astype(np.float32)


def write_dataset(out_dir: Path, n_events: int, seed: int = 0, events_per_file: int = 1000,
                  energy_range: tuple[float, float] = ENERGY_RANGE_MEV, overwrite: bool = False) -> list[Path]:
    """Write ``n_events`` in files of ``events_per_file`` (h5py, gzip, the CaloChallenge keys)."""
    import h5py

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, start in enumerate(range(0, n_events, events_per_file)):
        path = out_dir / f"calo_ds2_{i:03d}.h5"
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} exists; pass overwrite=True or choose another directory")
        energies, showers = generate_events(min(events_per_file, n_events - start), seed=seed * 1000 + i, energy_range=energy_range)
        with h5py.File(path, "w") as f:
            f.create_dataset(ENERGY_KEY, data=energies, compression="gzip")
            f.create_dataset(SHOWER_KEY, data=showers, compression="gzip")
        paths.append(path)
    return paths
