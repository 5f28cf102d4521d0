"""Shower features in NumPy: measured angle, moments, profiles, hit counts.

These are the quantities of the authors' physics analysis. They take images in stored units
(ECAL × 50 GeV, linear, no power transform) with shape (N, x, y, z) and are vectorised over
events. The measured-angle algorithm is the one the data files' ``mtheta`` key holds and the
discriminator's weightless angle head computes (``model.ecal_angle`` is its TensorFlow twin).
"""

from __future__ import annotations

import numpy as np

EPSILON = 1e-7  # Keras K.epsilon(), used by the reference algorithm
EMPTY_ANGLE = 100.0  # the reference's value for an empty image


def measured_angle(images: np.ndarray) -> np.ndarray:
    """Inclination θ (radians) measured from each image, as in ``GANutils.measPython``.

    The shower direction is measured in the y–(x, z) plane: per layer the transverse barycentre
    relative to the global barycentre gives a slope, converted to an angle and averaged over
    layers weighted by depth. Events with no energy get 100.
    """
    e = np.asarray(images, dtype=np.float64)
    _, nx, ny, nz = e.shape
    xi = np.arange(nx) + 0.5
    yi = np.arange(ny) + 0.5
    zi = np.arange(nz) + 0.5
    total = e.sum(axis=(1, 2, 3))
    safe_total = np.where(total == 0, 1.0, total)
    x_ref = np.einsum("nxyz,x->n", e, xi) / safe_total
    y_ref = np.einsum("nxyz,y->n", e, yi) / safe_total
    z_ref = np.einsum("nxyz,z->n", e, zi) / safe_total
    layer_sum = e.sum(axis=(1, 2))  # (N, z)
    filled = layer_sum > 0
    safe_layer = np.where(filled, layer_sum, 1.0)
    x_mid = np.where(filled, np.einsum("nxyz,x->nz", e, xi) / safe_layer, 0.0)
    y_mid = np.where(filled, np.einsum("nxyz,y->nz", e, yi) / safe_layer, 0.0)
    zproj = np.sqrt(np.maximum((x_mid - x_ref[:, None]) ** 2 + (zi[None, :] - z_ref[:, None]) ** 2, EPSILON))
    slope = (y_mid - y_ref[:, None]) / zproj
    slope = np.where(zi[None, :] < z_ref[:, None], -slope, slope)
    angle = np.where(filled, np.pi / 2 - np.arctan(slope), 0.0)
    weight = zi[None, :] * filled
    weight_sum = weight.sum(axis=1)
    theta = (angle * weight).sum(axis=1) / np.where(weight_sum == 0, 1.0, weight_sum)
    return np.where(total == 0, EMPTY_ANGLE, theta)


def rebin(images: np.ndarray, factors: tuple[int, int]) -> np.ndarray:
    """Sum blocks of ``factors`` transverse cells; (N, X, Y, Z) → (N, X//fx, Y//fy, Z).

    When X is not a multiple of fx the outermost cells are dropped symmetrically (51 → 17 for
    fx = 3 needs none).
    """
    fx, fy = factors
    if (fx, fy) == (1, 1):
        return images
    n, nx, ny, nz = images.shape
    ox, oy = (nx % fx) // 2, (ny % fy) // 2
    cut = images[:, ox : ox + (nx // fx) * fx, oy : oy + (ny // fy) * fy, :]
    return cut.reshape(n, nx // fx, fx, ny // fy, fy, nz).sum(axis=(2, 4))


def profiles(images: np.ndarray) -> dict[str, np.ndarray]:
    """Energy projected on each axis: {'x': (N, X), 'y': (N, Y), 'z': (N, Z)}."""
    return {
        "x": images.sum(axis=(2, 3)),
        "y": images.sum(axis=(1, 3)),
        "z": images.sum(axis=(1, 2)),
    }


def moments(images: np.ndarray) -> dict[str, np.ndarray]:
    """First (barycentre) and second (central) moments along x, y, z from the projections.

    Integer cell indices 0..n-1 as in the reference analysis. Returns {'m1_x': (N,), ...}.
    """
    out: dict[str, np.ndarray] = {}
    for axis, proj in profiles(images).items():
        idx = np.arange(proj.shape[1], dtype=np.float64)
        tot = proj.sum(axis=1)
        tot = np.where(tot == 0, 1.0, tot)
        m1 = proj @ idx / tot
        m2 = (proj * (idx[None, :] - m1[:, None]) ** 2).sum(axis=1) / tot
        out[f"m1_{axis}"] = m1
        out[f"m2_{axis}"] = m2
    return out


def hit_counts(images_gev: np.ndarray, threshold_gev: float = 3e-4) -> np.ndarray:
    """Number of cells above ``threshold_gev`` per event (images in GeV)."""
    return (images_gev > threshold_gev).sum(axis=(1, 2, 3))
