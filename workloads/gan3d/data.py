"""Reading the CERN HDF5 files, reference preprocessing, TFRecords and the tf.data pipeline.

Preprocessing follows the authors' ``GetDataAngle``: ECAL sum taken before the power
transform, events with sum <= 10 (stored units) dropped, Ep/100, angle label from ``mtheta``,
image ** 0.85. For presets on a coarser grid the cells are summed first and the angle label is
measured on the summed image, so that the label and the discriminator's angle head measure the
same quantity.

The authors' TFRecord converter leaves out the power transform that training expects; our TFRecords
hold the fully preprocessed image, power included, and a ``meta.json`` beside them records the
preset, grid and power; the reader refuses records made for another preset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..common.pod import host_shards, shard_names  # noqa: F401  (host_shards: this module's name too)
from ..common.hdf5 import DataError, list_files, open_file, read_finite  # noqa: F401  (DataError, list_files: this module's names too)
from .features import measured_angle, rebin
from .presets import ECAL_CUT, FULL_GRID, Preset

REQUIRED_KEYS = ("ECAL", "energy")
VECTOR_KEYS = ("energy", "theta", "mtheta", "eta", "sum")
READ_CHUNK = 500


@dataclass
class Batch:
    """Preprocessed events: image in power space (N, x, y, z), Ep/100, angle (rad), ECAL sum."""

    x: np.ndarray
    y: np.ndarray
    ang: np.ndarray
    ecal: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


def inspect_file(path: Path) -> int:
    """Validate the layout of a CERN file without reading the images; return its event count."""
    with open_file(path) as f:
        for key in REQUIRED_KEYS:
            if key not in f:
                raise DataError(f"{path}: missing key {key!r} (found: {', '.join(sorted(f.keys())) or 'none'})")
        shape = f["ECAL"].shape
        if len(shape) != 4 or tuple(shape[1:]) != FULL_GRID:
            raise DataError(f"{path}: key 'ECAL' has shape {shape}, expected (N, {', '.join(map(str, FULL_GRID))})")
        for key in VECTOR_KEYS:
            if key in f and f[key].shape[:1] != (shape[0],):
                raise DataError(f"{path}: key {key!r} has shape {f[key].shape}, expected ({shape[0]},) to match 'ECAL'")
        return int(shape[0])


def check_conditions(path: Path) -> int:
    """``inspect_file`` plus the per-event values (energy, angles) checked for NaN/inf: cheap,
    since it leaves the images alone, so a driver can reject a bad file before any worker starts."""
    n = inspect_file(path)
    with open_file(path) as f:
        for key in ("energy", "theta", "mtheta"):
            if key in f:
                read_finite(f, path, key, slice(None))
    return n


def read_chunks(path: Path, chunk: int = READ_CHUNK) -> Iterator[dict[str, np.ndarray]]:
    """Yield validated raw arrays (ECAL in stored units, energy, optional mtheta) chunk by chunk."""
    n = inspect_file(path)
    with open_file(path) as f:
        for start in range(0, n, chunk):
            sl = slice(start, min(n, start + chunk))
            out: dict[str, np.ndarray] = {}
            for key in ("ECAL", "energy", "theta", "mtheta"):
                if key in f:
                    out[key] = read_finite(f, path, key, sl)
            if np.any(out["ECAL"] < 0):
                raise DataError(f"{path}: key 'ECAL' contains negative energies")
            yield out


def preprocess(raw: dict[str, np.ndarray], preset: Preset) -> Batch:
    """Reference preprocessing of raw arrays for ``preset``'s grid."""
    image = rebin(raw["ECAL"], preset.rebin)
    ecal = image.sum(axis=(1, 2, 3), dtype=np.float64).astype(np.float32)
    keep = ecal > ECAL_CUT
    image, ecal = image[keep], ecal[keep]
    return Batch(
        x=np.power(image, preset.power, dtype=np.float32),
        y=(raw["energy"][keep] / 100.0).astype(np.float32),
        ang=conditioning_angle(raw["mtheta"][keep] if "mtheta" in raw else None, image, preset),
        ecal=ecal,
    )


def conditioning_angle(mtheta: np.ndarray | None, image: np.ndarray, preset: Preset) -> np.ndarray:
    """The angle the generator is conditioned on (radians, float32): the files' measured ``mtheta``
    (one per event of ``image``, or None) on the full grid, else the angle measured on ``image``,
    the preset's summed grid.

    Training labels its events with it, so showers generated for held-out events must be asked for
    with it too, never with the true ``theta``: on the small preset's grid the measured angle spans
    1.44 to 1.70 rad where the true one spans 1.06 to 2.09, and a generator asked for the true angle
    is asked for angles it never saw."""
    if preset.rebin == (1, 1) and mtheta is not None:
        return np.asarray(mtheta, np.float32)
    return measured_angle(image).astype(np.float32)


def _files(paths: Path | list[Path]) -> list[Path]:
    return list(paths) if isinstance(paths, (list, tuple)) else list_files(paths)


def iter_chunks(paths: Path | list[Path], limit: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Validated raw chunks of a file, a directory or a list of files, up to ``limit`` events."""
    remaining = limit
    for file in _files(paths):
        for raw in read_chunks(file):
            if remaining is not None:
                raw = {k: v[:remaining] for k, v in raw.items()}
                remaining -= len(raw["energy"])
            yield raw
            if remaining is not None and remaining <= 0:
                return


def load(paths: Path | list[Path], preset: Preset, limit: int | None = None) -> Batch:
    """All (or the first ``limit``) preprocessed events of a file, a directory or files, in memory."""
    parts: list[Batch] = []
    total = 0
    for raw in iter_chunks(paths):
        parts.append(preprocess(raw, preset))
        total += len(parts[-1])
        if limit is not None and total >= limit:
            break  # the limit counts events that pass the cut
    if total == 0:
        raise DataError(f"{paths}: no events pass the ECAL-sum cut (> {ECAL_CUT})")
    return Batch(*(np.concatenate([getattr(p, k) for p in parts])[:limit] for k in ("x", "y", "ang", "ecal")))


def load_raw(paths: Path | list[Path], limit: int | None = None) -> dict[str, np.ndarray]:
    """Raw arrays (ECAL stored units, energy, theta/mtheta when present), first ``limit`` events."""
    parts = list(iter_chunks(paths, limit))
    keys = set.intersection(*(set(p) for p in parts))
    return {k: np.concatenate([p[k] for p in parts]) for k in keys}


# --------------------------------------------------------------------------- TFRecords


def convert_to_tfrecords(src: Path, out_dir: Path, preset: Preset, overwrite: bool = False) -> list[Path]:
    """One ``.tfrecords`` per HDF5 file (features X, Y, ang, ecal) plus ``meta.json``."""
    import tensorflow as tf

    out_dir = Path(out_dir)
    files = list_files(src)
    targets = [out_dir / (f.stem + ".tfrecords") for f in files]
    clash = [t for t in targets if t.exists()]
    if clash and not overwrite:
        raise FileExistsError(f"{clash[0]} already exists; remove it or choose another output directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for file, target in zip(files, targets):
        n = 0
        tmp = target.with_suffix(".part")
        with tf.io.TFRecordWriter(str(tmp)) as writer:
            for raw in read_chunks(file):
                b = preprocess(raw, preset)
                for i in range(len(b)):
                    writer.write(_example(b, i))
                    n += 1
        tmp.replace(target)
        counts[target.name] = n
    _write_meta(out_dir, preset, counts)
    return targets


def _example(b: Batch, i: int) -> bytes:
    """Event ``i`` of a preprocessed batch as one serialised ``tf.train.Example`` (X, Y, ang, ecal)."""
    import tensorflow as tf

    feat = {
        "X": tf.train.Feature(float_list=tf.train.FloatList(value=b.x[i].ravel())),
        "Y": tf.train.Feature(float_list=tf.train.FloatList(value=[b.y[i]])),
        "ang": tf.train.Feature(float_list=tf.train.FloatList(value=[b.ang[i]])),
        "ecal": tf.train.Feature(float_list=tf.train.FloatList(value=[b.ecal[i]])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feat)).SerializeToString()


def _write_meta(out_dir: Path, preset: Preset, counts: dict[str, int], **extra) -> None:
    meta = {"preset": preset.name, "grid": list(preset.grid), "power": preset.power, "events": counts, **extra}
    (Path(out_dir) / "meta.json").write_text(json.dumps(meta, indent=2))


def write_pod_shards(paths: Path | list[Path], out_dir: Path, preset: Preset, hosts: int, per_host: int = 1) -> list[Path]:
    """The events of the HDF5 ``paths`` as ``hosts x per_host`` TFRecord shards (event k in shard k
    mod n) and ``meta.json``: the input of a TPU pod slice, whose every host runs its own input
    pipeline in its own TensorFlow runtime, where no Python runs (so no HDF5 reader), and reads
    shards ``h, h + hosts, ...`` (``host_shards``) from its own disk."""
    import tensorflow as tf

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = shard_names(hosts, per_host)
    count = len(names)
    writers = [tf.io.TFRecordWriter(str(out_dir / (name + ".part"))) for name in names]
    counts = dict.fromkeys(names, 0)
    k = 0
    try:
        for raw in iter_chunks(paths):
            b = preprocess(raw, preset)
            for i in range(len(b)):
                writers[k % count].write(_example(b, i))
                counts[names[k % count]] += 1
                k += 1
    finally:
        for w in writers:
            w.close()
    for name in names:
        (out_dir / (name + ".part")).replace(out_dir / name)
    _write_meta(out_dir, preset, counts, hosts=hosts)
    return [out_dir / name for name in names]


def _tfrecord_meta(path: Path, preset: Preset) -> dict:
    meta_path = Path(path) / "meta.json"
    if not meta_path.exists():
        raise DataError(f"{path}: missing meta.json (convert with `python -m workloads.gan3d convert`)")
    meta = json.loads(meta_path.read_text())
    if meta.get("preset") != preset.name or tuple(meta.get("grid", ())) != preset.grid:
        raise DataError(f"{path}: records were made for preset {meta.get('preset')!r}, not {preset.name!r}")
    if meta.get("power") != preset.power:
        raise DataError(f"{path}: records hold images ** {meta.get('power')}, preset {preset.name!r} trains on ** {preset.power}; "
                        f"convert the HDF5 files again")
    return meta


# --------------------------------------------------------------------------- tf.data


@dataclass
class InputSpec:
    """Where the training events come from and how many there are (after the cut)."""

    path: Path
    kind: str  # "hdf5" or "tfrecord"
    files: list[Path]
    events: int

    @classmethod
    def discover(cls, path: Path, preset: Preset, files: list[Path] | None = None) -> "InputSpec":
        """Describe a TFRecord directory (with meta.json) or HDF5 files; ``files`` narrows the set."""
        path = Path(path)
        if path.is_dir() and (path / "meta.json").exists():
            meta = _tfrecord_meta(path, preset)
            files = files or sorted(path.glob("*.tfrecords"))
            return cls(path, "tfrecord", files, int(sum(meta["events"][f.name] for f in files)))
        files = files or list_files(path)
        events = 0
        for file in files:
            inspect_file(file)
            with open_file(file) as f:
                # Summing cells keeps every deposit when the grid divides evenly (51 = 3 × 17),
                # so the file's ECAL sum gives the cut without decompressing the images.
                keeps_all = FULL_GRID[0] % preset.rebin[0] == 0 and FULL_GRID[1] % preset.rebin[1] == 0
                if "sum" in f and keeps_all:
                    events += int((np.asarray(f["sum"][:]) > ECAL_CUT).sum())
                    continue
            events += sum(int((rebin(r["ECAL"], preset.rebin).sum(axis=(1, 2, 3)) > ECAL_CUT).sum()) for r in read_chunks(file))
        return cls(path, "hdf5", files, events)


PREFETCH_BATCHES = 2
PARSE_THREADS = 2


def make_dataset_fn(spec: InputSpec, preset: Preset, per_replica_batch: int, steps_per_epoch: int, seed: int, cache: bool = True,
                    pipeline_files: Callable[[int], list[str]] | None = None) -> Callable:
    """Return ``fn(input_context, epoch) -> tf.data.Dataset`` for distribute_datasets_from_function.

    Each input pipeline reads its shard (whole files when there are enough, else every k-th
    event), caches it, and per epoch shuffles with seed (seed, epoch), batches per replica and
    prefetches. Every pipeline yields exactly ``steps_per_epoch × local replicas`` batches, so
    all replicas take the same number of steps and a resumed run sees the same data order.

    ``pipeline_files``: a TPU pod slice's input, pipeline ``i``'s TFRecord files (host ``i``'s own
    copies: ``write_pod_shards``); the pipeline is built on host 0 and runs on host ``i``, so it
    is made of TensorFlow ops alone (an HDF5 pipeline's Python generator cannot run there).
    """
    import tensorflow as tf

    if pipeline_files is not None and spec.kind != "tfrecord":
        raise DataError(f"{spec.path}: a TPU pod slice reads TFRecord shards on every host, not {spec.kind} files (write_pod_shards)")

    grid = preset.grid
    signature = (
        tf.TensorSpec((None, *grid), tf.float32),
        tf.TensorSpec((None,), tf.float32),
        tf.TensorSpec((None,), tf.float32),
        tf.TensorSpec((None,), tf.float32),
    )
    bases: dict[int, tf.data.Dataset] = {}

    def hdf5_file_dataset(file_t):
        @tf.autograph.experimental.do_not_convert
        def gen(name):
            for raw in read_chunks(Path(name.decode())):
                b = preprocess(raw, preset)
                yield b.x, b.y, b.ang, b.ecal

        return tf.data.Dataset.from_generator(gen, output_signature=signature, args=(file_t,)).unbatch()

    def parse(record):
        feats = tf.io.parse_single_example(
            record,
            {
                "X": tf.io.FixedLenSequenceFeature((), tf.float32, allow_missing=True),
                "Y": tf.io.FixedLenFeature((), tf.float32),
                "ang": tf.io.FixedLenFeature((), tf.float32),
                "ecal": tf.io.FixedLenFeature((), tf.float32),
            },
        )
        return tf.reshape(feats["X"], grid), feats["Y"], feats["ang"], feats["ecal"]

    def base(ctx) -> tf.data.Dataset:
        pid, npipe = (ctx.input_pipeline_id, ctx.num_input_pipelines) if ctx else (0, 1)
        if pid in bases:
            return bases[pid]
        files = [str(f) for f in spec.files] if pipeline_files is None else list(pipeline_files(pid))
        by_file = pipeline_files is not None or (len(files) >= npipe and len(files) % npipe == 0)
        names = tf.data.Dataset.from_tensor_slices(files)
        if by_file and npipe > 1 and pipeline_files is None:
            names = names.shard(npipe, pid)
        if spec.kind == "tfrecord":
            ds = names.interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=4, deterministic=True)
            ds = ds.map(parse, num_parallel_calls=PARSE_THREADS, deterministic=True)
        else:
            ds = names.interleave(hdf5_file_dataset, cycle_length=2, num_parallel_calls=2, deterministic=True)
        if not by_file and npipe > 1:
            ds = ds.shard(npipe, pid)
        ds = ds.map(lambda x, y, a, e: {"x": x[..., None], "y": y, "ang": a, "ecal": e})
        if cache:
            ds = ds.cache()
        bases[pid] = ds
        return ds

    def dataset_fn(ctx, epoch: int):
        local_replicas = ctx.num_replicas_in_sync // ctx.num_input_pipelines if ctx else 1
        ds = base(ctx)
        ds = ds.shuffle(min(spec.events, 20000), seed=seed * 100003 + epoch, reshuffle_each_iteration=True).repeat()
        ds = ds.batch(per_replica_batch, drop_remainder=True).take(steps_per_epoch * local_replicas)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        options.deterministic = True
        # No autotuning: its model thread can sleep through the iterator's cancellation, and the
        # epoch then waits for it (measured under Ray Train: 15-37 s idle at the end of the first
        # epoch). Batches are produced far faster than a step consumes them, so fixed sizes do.
        options.autotune.enabled = False
        return ds.with_options(options).prefetch(PREFETCH_BATCHES)

    return dataset_fn


def reference_events(spec: InputSpec, preset: Preset, limit: int):
    """The first ``limit`` training events (after the cut) as ``calibration.Reference``: their
    primary energy, the angle the generator is conditioned on, and their summed energy (stored
    units, the preset's grid), read from HDF5 or TFRecord files alike."""
    from .calibration import Reference

    if spec.kind == "hdf5":
        b = load(spec.files, preset, limit)
        return Reference(b.y.astype(np.float64) * 100.0, b.ang.astype(np.float64), b.ecal.astype(np.float64))
    import tensorflow as tf

    wanted = {"Y": tf.io.FixedLenFeature((), tf.float32), "ang": tf.io.FixedLenFeature((), tf.float32),
              "ecal": tf.io.FixedLenFeature((), tf.float32)}
    rows = [(float(f["Y"]), float(f["ang"]), float(f["ecal"]))
            for f in tf.data.TFRecordDataset([str(p) for p in spec.files]).take(limit).map(lambda r: tf.io.parse_single_example(r, wanted))]
    if not rows:
        raise DataError(f"{spec.path}: no training events to calibrate the generator's energy response on")
    y, ang, ecal = (np.asarray(c, np.float64) for c in zip(*rows))
    return Reference(y * 100.0, ang, ecal)
