"""End-to-end steps shared by ``python -m workloads.gan3d`` and burst's Ray entry point."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from . import calibration, data, synthetic
from .presets import Preset, get_preset, tuned

TEST_FRACTION = 0.1


def prepare_synthetic(root: Path, n_events: int, seed: int = 0, energy_range=(100.0, 200.0)) -> tuple[Path, Path]:
    """Write ``n_events`` training and ~10 % (at least 200) held-out events; reuse them if present."""
    root = Path(root)
    train_dir, test_dir = root / "train", root / "test"
    n_test = max(200, int(n_events * TEST_FRACTION))
    marker = root / "synthetic.json"
    wanted = {"events": n_events, "test_events": n_test, "seed": seed, "energy_range": list(energy_range)}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return train_dir, test_dir
    if marker.exists() or any(root.glob("*/*.h5")):
        raise FileExistsError(f"{root} holds a different synthetic dataset; remove it or choose another directory")
    per_file = 1000
    files = (synthetic.dataset_files(train_dir, n_events, seed=seed, events_per_file=per_file, energy_range=energy_range)
             + synthetic.dataset_files(test_dir, n_test, seed=seed + 7919, events_per_file=per_file, energy_range=energy_range))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    synthetic.write_files(files, processes=cores)  # the training and held-out files side by side
    marker.write_text(json.dumps(wanted))
    return train_dir, test_dir


def make_trainer(preset: Preset, per_replica_batch: int | None, strategy=None, seed: int = 0, precision: str = "float32"):
    from .train import GAN3DTrainer

    return GAN3DTrainer(preset, per_replica_batch or preset.default_batch, strategy=strategy, seed=seed, precision=precision)


def prepare_training(
    train_files: list[Path],
    preset_name: str,
    per_replica_batch: int | None = None,
    strategy=None,
    seed: int = 0,
    resume_from: Path | None = None,
    steps_per_epoch: int | None = None,
    overrides: dict | None = None,
    precision: str = "float32",
    pod_hosts: int | None = None,
):
    """Build a trainer (restored from ``resume_from`` if given) and its per-epoch input.

    ``pod_hosts``: on a TPU pod slice of that many hosts, ``train_files`` are every TFRecord shard
    (``data.write_pod_shards``) by its path on each host's own disk, the same on every host; input
    pipeline ``i`` (host ``i``) reads its own shards there (``data.host_shards``).

    ``overrides``: knobs of the preset a scan sets (``presets.TUNABLE``); ``precision``: one of
    ``workloads.common.precision.PRECISIONS`` (a checkpoint of any precision resumes in any other). Returns ``(trainer, dataset_fn, steps_per_epoch)``; the caller runs ``trainer.fit`` with its
    own callbacks (checkpointing, progress, Ray Train reports).
    """
    preset = tuned(get_preset(preset_name), overrides)
    trainer = make_trainer(preset, per_replica_batch, strategy, seed, precision)
    if resume_from is not None:
        trainer.restore(resume_from)
    spec = data.InputSpec.discover(train_files[0].parent, preset, files=train_files)
    on_pod = bool(pod_hosts and pod_hosts > 1)
    root = Path(train_files[0]).parent

    def own_files(host: int) -> list[str]:
        """The shards host ``host`` of the pod slice reads, by their path on its own disk."""
        return [str(root / n) for n in data.host_shards([Path(f).name for f in train_files], pod_hosts, host)]

    if preset.calibrate_energy:
        # host 0's own shards on a pod slice; read when training starts, inside the job's
        # handling that gives a bad file its one-line "bad input data" verdict
        own = data.InputSpec.discover(spec.path, preset, files=[Path(f) for f in own_files(0)]) if on_pod else spec
        trainer.reference = lambda: data.reference_events(own, preset, calibration.REFERENCE_EVENTS)
    steps = steps_per_epoch or spec.events // trainer.global_batch
    if steps < 1:
        raise data.DataError(f"{spec.path}: {spec.events} events cannot fill one global batch of {trainer.global_batch}")
    return trainer, data.make_dataset_fn(spec, preset, trainer.per_replica_batch, steps, seed=seed, pipeline_files=own_files if on_pod else None), steps


def validate(trainer_or_dir, test_files: list[Path], out_dir: Path, preset_name: str | None = None, events: int = 500, seed: int = 0,
             extra: dict | None = None, gate: dict[str, float] | None = None) -> dict:
    """Generate showers for held-out MC conditions and write the validation report (with its
    verdict against ``gate``, metric → largest accepted value, when one is given)."""
    from .train import GAN3DTrainer, generate_showers
    from .validate import write_report

    if isinstance(trainer_or_dir, GAN3DTrainer):
        trainer = trainer_or_dir
    else:
        meta = json.loads((Path(trainer_or_dir) / "history.json").read_text())
        # generate in the precision the run trained in: its physics is what the report judges
        trainer = make_trainer(tuned(get_preset(preset_name or meta["preset"]), meta.get("overrides")), None, seed=seed,
                               precision=meta.get("precision", "float32"))
        trainer.restore(trainer_or_dir)
    preset = trainer.preset
    held = HeldOut(test_files, preset, events, seed)
    mc, energy, theta = held.mc, held.energy, held.theta
    gan = trainer.generate(energy, held.angle, seed=seed + 1)
    initial = generate_showers(make_trainer(preset, None, seed=trainer.seed).generator, energy, held.angle, power=preset.power, seed=seed + 1)
    calibrated = trainer.calibration
    info = {"preset": preset.name, "epochs_trained": int(trainer.epoch.numpy()), "precision": trainer.precision,
            "energy_calibration": calibrated.describe(), **(extra or {})}
    return write_report(mc, gan, energy, theta, out_dir, initial_stored=initial, extra=info, gate=gate,
                        model_facts={"energy_scale_offset": calibrated.offset})


class HeldOut:
    """Held-out Monte Carlo on the preset's grid with its conditions, read once: what ``validate``
    compares against, and what a scan's trial is judged on after every epoch with the summary
    metrics that cost little (``validate.EPOCH_METRICS``), the same noise every time so that epochs
    and trials are compared on the same showers' conditions."""

    #: a metric that cannot be computed (a GAN that deposits nothing) counts as this bad
    WORST = 1e6

    def __init__(self, files: list[Path], preset: Preset, events: int, seed: int = 0):
        from .features import rebin

        raw = data.load_raw(files, limit=events)
        self.mc = rebin(raw["ECAL"], preset.rebin)
        self.energy = raw["energy"].astype(np.float64)
        # the true angle picks the report's angle bins; the generator is asked for the angle it
        # was trained on (``data.conditioning_angle``)
        self.theta = (raw["theta"] if "theta" in raw else raw["mtheta"]).astype(np.float64)
        self.angle = data.conditioning_angle(raw.get("mtheta"), self.mc, preset).astype(np.float64)
        self.seed = seed

    def summary(self, trainer) -> dict[str, float]:
        from .validate import EPOCH_METRICS, compare

        gan = trainer.generate(self.energy, self.angle, seed=self.seed + 1)
        with np.errstate(all="ignore"):
            got = compare(self.mc, gan, self.energy, self.theta)["summary"]
        return {k: round(float(got[k]), 6) if np.isfinite(got[k]) else self.WORST for k in EPOCH_METRICS}
