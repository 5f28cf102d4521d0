"""The CaloChallenge dataset-2 geometry and file layout.

Concentric cylinders along z: 45 layers, each of 16 angular (alpha) by 9 radial cells, 6480
voxels. A file holds ``incident_energies`` (N, 1) in MeV and ``showers`` (N, 6480) in MeV, the
voxels flattened in the order (radial, angular, layer) with the radial index running fastest:
index = layer * 144 + alpha * 9 + r. Electrons of 1 GeV to 1 TeV, log-uniform.
"""

from __future__ import annotations

import numpy as np

LAYERS, ALPHA_BINS, RADIAL_BINS = 45, 16, 9
VOXELS = LAYERS * ALPHA_BINS * RADIAL_BINS
ENERGY_KEY, SHOWER_KEY = "incident_energies", "showers"
ENERGY_RANGE_MEV = (1.0e3, 1.0e6)
RADIAL_CELL_MM = 4.65  # radial cell size (dataset 3 halves it: 18 cells of 2.325 mm)
R_EDGES_MM = np.arange(RADIAL_BINS + 1) * RADIAL_CELL_MM
R_CENTRES_MM = (R_EDGES_MM[:-1] + R_EDGES_MM[1:]) / 2
ALPHA_CENTRES = (np.arange(ALPHA_BINS) + 0.5) * 2 * np.pi / ALPHA_BINS


def cells(showers: np.ndarray) -> np.ndarray:
    """(N, 6480) -> (N, layer, alpha, r)."""
    return np.asarray(showers).reshape(len(showers), LAYERS, ALPHA_BINS, RADIAL_BINS)


def cell_xy_mm() -> tuple[np.ndarray, np.ndarray]:
    """x and y of every cell centre of a layer, (alpha, r) each: the plane's coordinates, which the
    CaloChallenge evaluation calls eta and phi."""
    r, a = np.meshgrid(R_CENTRES_MM, ALPHA_CENTRES)
    return r * np.cos(a), r * np.sin(a)
