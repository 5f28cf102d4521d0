"""End-to-end steps of the calo workload: synthetic data, a trainer with its input, per-epoch
physics for a scan's trials, and the full validation report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from . import data, synthetic
from .presets import Preset, get_preset, tuned

TEST_FRACTION = 0.1


def prepare_synthetic(root: Path, n_events: int, seed: int = 0) -> tuple[Path, Path]:
    """Write ``n_events`` training and ~10 % (at least 200) held-out events; reuse them if present."""
    root = Path(root)
    train_dir, test_dir = root / "train", root / "test"
    n_test = max(200, int(n_events * TEST_FRACTION))
    marker = root / "synthetic.json"
    wanted = {"events": n_events, "test_events": n_test, "seed": seed, "layout": "calochallenge-ds2"}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return train_dir, test_dir
    if marker.exists() or any(root.glob("*/*.h5")):
        raise FileExistsError(f"{root} holds a different synthetic dataset; remove it or choose another directory")
    synthetic.write_dataset(train_dir, n_events, seed=seed)
    synthetic.write_dataset(test_dir, n_test, seed=seed + 7919)
    marker.write_text(json.dumps(wanted))
    return train_dir, test_dir


def make_trainer(preset: Preset, per_replica_batch: int | None, strategy=None, seed: int = 0, precision: str = "float32"):
    from .train import CaloDiffusionTrainer

    return CaloDiffusionTrainer(preset, per_replica_batch or preset.default_batch, strategy=strategy, seed=seed, precision=precision)


def prepare_training(train_files: list[Path], preset_name: str, per_replica_batch: int | None = None, strategy=None, seed: int = 0,
                     resume_from: Path | None = None, steps_per_epoch: int | None = None, overrides: dict | None = None,
                     precision: str = "float32"):
    """(trainer restored from ``resume_from`` when given, dataset_fn, steps per epoch)."""
    trainer = make_trainer(tuned(get_preset(preset_name), overrides), per_replica_batch, strategy, seed, precision)
    if resume_from is not None:
        trainer.restore(resume_from)
    for f in train_files:
        data.check_file(Path(f))  # the layout, before the showers are read
    energies, showers = data.load(train_files)
    steps = steps_per_epoch or len(energies) // trainer.global_batch
    if steps < 1:
        raise data.DataError(f"{train_files[0].parent}: {len(energies)} events cannot fill one global batch of {trainer.global_batch}")
    return trainer, data.make_dataset_fn(energies, showers, trainer.per_replica_batch, steps, seed), steps


class HeldOut:
    """Held-out showers read once: what a scan's trial is judged on after every epoch (the cheap
    metrics, the same noise every time)."""

    WORST = 1.0  # a separation power cannot be worse

    def __init__(self, files: list[Path], events: int, seed: int = 0):
        self.energies, self.showers = data.load(files, limit=events)
        self.seed = seed

    def summary(self, trainer) -> dict[str, float]:
        from .evaluate import epoch_summary
        from .metrics import EPOCH_METRICS

        got = epoch_summary(self.showers, self.energies, trainer.generate(self.energies, seed=self.seed + 1))
        return {k: round(float(got[k]), 6) if np.isfinite(got[k]) else self.WORST for k in EPOCH_METRICS}


def validate(trainer_or_dir, test_files: list[Path], out_dir: Path, events: int = 500, seed: int = 0, extra: dict | None = None,
             gate: dict[str, float] | None = None) -> dict:
    """Generate showers for the held-out energies and write the CaloChallenge-style report."""
    from .evaluate import halves, write_report
    from .train import CaloDiffusionTrainer

    if isinstance(trainer_or_dir, CaloDiffusionTrainer):
        trainer = trainer_or_dir
    else:
        meta = json.loads((Path(trainer_or_dir) / "history.json").read_text())
        trainer = make_trainer(tuned(get_preset(meta["preset"]), meta.get("overrides")), None, seed=seed,
                               precision=meta.get("precision", "float32"))  # the precision it trained in
        trainer.restore(trainer_or_dir)
    energies, showers = data.load(test_files, limit=events)
    model = trainer.generate(energies, seed=seed + 1)
    model_b = trainer.generate(energies[halves(len(energies), seed)[1]], seed=seed + 2)
    info = {"workload": "calo", "preset": trainer.preset.name, "epochs_trained": int(trainer.epoch.numpy()), "precision": trainer.precision,
            **(extra or {})}
    return write_report(showers, energies.astype(np.float64), model, model_b, out_dir, gate=gate, extra=info, seed=seed)
