"""Reading CaloChallenge HDF5 files, the model's representation of a shower, and the tf.data input.

Representation: each voxel's share of the incident energy, f = E_voxel / E_inc, on a log scale,
x = (ln(f + 1e-7) + 13) / 3, so an empty cell sits near -1 and a shower's core near +2; the
condition is c = log10(E_inc / 1 GeV) / 3, in [0, 1] over the dataset's range. The inverse maps
generated cells below the readout threshold (15.15 keV, as in the dataset) back to zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ..common import hdf5
from ..common.hdf5 import DataError, open_file, read_finite
from .geometry import ENERGY_KEY, SHOWER_KEY, VOXELS

EPS = 1e-7
LOG_MEAN, LOG_SCALE = -13.0, 3.0
THRESHOLD_MEV = 0.01515
READ_CHUNK = 2000


def list_files(path: Path) -> list[Path]:
    """The HDF5 files of a directory (``*.h5`` and ``*.hdf5``, as the CaloChallenge names them), or the one file given."""
    return hdf5.list_files(path, ("*.h5", "*.hdf5"))


def check_file(path: Path) -> int:
    """The CaloChallenge layout (both keys, dataset-2 voxel count, one energy per shower) and the
    incident energies (finite, positive); return the event count. Leaves the showers unread."""
    with open_file(path) as f:
        for key in (ENERGY_KEY, SHOWER_KEY):
            if key not in f:
                raise DataError(f"{path}: missing key {key!r} (found: {', '.join(sorted(f.keys())) or 'none'}); "
                                f"a CaloChallenge file holds {ENERGY_KEY!r} and {SHOWER_KEY!r}")
        shape, e_shape = f[SHOWER_KEY].shape, f[ENERGY_KEY].shape
        if len(shape) != 2 or shape[1] != VOXELS:
            raise DataError(f"{path}: key {SHOWER_KEY!r} has shape {shape}, expected (N, {VOXELS}) (dataset-2 geometry)")
        if e_shape not in ((shape[0], 1), (shape[0],)):
            raise DataError(f"{path}: key {ENERGY_KEY!r} has shape {e_shape}, expected ({shape[0]}, 1) to match {SHOWER_KEY!r}")
        energies = read_finite(f, path, ENERGY_KEY, slice(None)).reshape(-1)
        if not (energies > 0).all():
            raise DataError(f"{path}: key {ENERGY_KEY!r} holds energies <= 0")
        return int(shape[0])


def load(files: list[Path], limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(incident energies (N,) MeV, showers (N, 6480) MeV) of the files, up to ``limit`` events."""
    energies, showers, n = [], [], 0
    for path in files:
        with open_file(Path(path)) as f:
            total = f[SHOWER_KEY].shape[0]
            for start in range(0, total, READ_CHUNK):
                if limit is not None and n >= limit:
                    break
                stop = min(total, start + READ_CHUNK, start + (limit - n if limit is not None else READ_CHUNK))
                energies.append(read_finite(f, Path(path), ENERGY_KEY, slice(start, stop)).reshape(-1))
                showers.append(read_finite(f, Path(path), SHOWER_KEY, slice(start, stop)))
                n += stop - start
    if not energies:
        return np.zeros(0, np.float32), np.zeros((0, VOXELS), np.float32)
    return np.concatenate(energies), np.concatenate(showers)


def to_model(showers_mev: np.ndarray, energies_mev: np.ndarray) -> np.ndarray:
    """Showers (N, 6480) MeV -> the model's representation, float32."""
    share = np.clip(np.asarray(showers_mev, np.float64), 0, None) / np.asarray(energies_mev, np.float64).reshape(-1, 1)
    return ((np.log(share + EPS) - LOG_MEAN) / LOG_SCALE).astype(np.float32)


def from_model(x: np.ndarray, energies_mev: np.ndarray) -> np.ndarray:
    """The model's representation -> showers (N, 6480) MeV, cells under the readout threshold zero."""
    share = np.clip(np.exp(np.asarray(x, np.float64) * LOG_SCALE + LOG_MEAN) - EPS, 0, None)
    showers = share * np.asarray(energies_mev, np.float64).reshape(-1, 1)
    showers[showers < THRESHOLD_MEV] = 0.0
    return showers.astype(np.float32)


def condition(energies_mev: np.ndarray) -> np.ndarray:
    """c = log10(E / 1 GeV) / 3: 0 at 1 GeV, 1 at 1 TeV."""
    return (np.log10(np.asarray(energies_mev, np.float64) / 1e3) / 3).astype(np.float32)


def make_dataset_fn(energies: np.ndarray, showers: np.ndarray, per_replica_batch: int, steps_per_epoch: int, seed: int) -> Callable:
    """``fn(input_context, epoch) -> tf.data.Dataset`` over the events (``load``'s arrays): every
    input pipeline holds its share (every k-th) in memory, shuffles it per epoch with seed (seed,
    epoch), and yields exactly ``steps_per_epoch x local replicas`` batches of {"x", "c"}."""
    import tensorflow as tf

    x, c = to_model(showers, energies), condition(energies)

    def dataset_fn(ctx, epoch: int):
        pid, npipe = (ctx.input_pipeline_id, ctx.num_input_pipelines) if ctx else (0, 1)
        local_replicas = ctx.num_replicas_in_sync // ctx.num_input_pipelines if ctx else 1
        ds = tf.data.Dataset.from_tensor_slices({"x": x[pid::npipe], "c": c[pid::npipe]})
        ds = ds.shuffle(len(c[pid::npipe]), seed=seed * 100003 + epoch, reshuffle_each_iteration=True).repeat()
        ds = ds.batch(per_replica_batch, drop_remainder=True).take(steps_per_epoch * local_replicas)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        options.deterministic = True
        options.autotune.enabled = False
        return ds.with_options(options).prefetch(2)

    return dataset_fn
