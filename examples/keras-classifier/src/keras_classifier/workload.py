"""The classifier as a burst workload: burst's public interface only (``burst.workload``).

Data: points of ``FEATURES`` dimensions around ``CLASSES`` centres, made by ``make_data`` from the
seed (nothing downloaded), one ``.npz`` file per 1000 points. Model: a small dense network, trained
with Keras' own ``fit`` one epoch at a time, so that burst keeps a checkpoint after each. It is built
with ``tf.keras``: on several workers burst makes that tf-keras, whose ``fit`` runs under
MultiWorkerMirroredStrategy (Keras 3's does not)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from burst.workload import TrainContext, Workload

FEATURES = 16
CLASSES = 4
PER_FILE = 1000
WEIGHTS = "model.weights.h5"
SETTINGS = "settings.json"  # the preset and knobs the weights were trained with


def _points(events: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(1234).normal(0, 2.0, size=(CLASSES, FEATURES))  # one problem, whatever the seed
    labels = rng.integers(0, CLASSES, size=events)
    return (centres[labels] + rng.normal(0, 1.5, size=(events, FEATURES))).astype("float32"), labels.astype("int64")


def _read(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    parts = [np.load(f) for f in files]
    return np.concatenate([p["x"] for p in parts]), np.concatenate([p["y"] for p in parts])


def _model(preset: str, knobs: dict):
    import tensorflow as tf

    keras = tf.keras  # tf-keras where burst asks for it (several workers), else Keras 3

    width = int(knobs.get("width", {"small": 32, "wide": 128}[preset]))
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(width, activation="relu"),
                              keras.layers.Dense(width, activation="relu"), keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(float(knobs.get("learning_rate", 1e-3))),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


class Classifier(Workload):
    name = "keras-classifier"
    title = "Gaussian-blob classifier (Keras model.fit)"
    framework = "keras"
    presets = ("small", "wide")
    default_batch = 64
    epoch_metrics = ("loss", "error_rate")
    knobs = {"learning_rate": "Adam's step size", "width": "units of each hidden layer"}
    gate_metrics = {"test_error_rate": "share of held-out points classified wrong"}
    profile = Path("profile.yaml")
    events = 4000

    def make_data(self, root: Path, events: int, seed: int) -> tuple[Path, Path]:
        out = []
        for part, count, offset in (("train", events, 0), ("test", max(PER_FILE, events // 10), 1_000_003)):
            directory = Path(root) / part
            directory.mkdir(parents=True, exist_ok=True)
            x, y = _points(count, seed + offset)
            for i, start in enumerate(range(0, count, PER_FILE)):
                np.savez(directory / f"points-{i:04d}.npz", x=x[start:start + PER_FILE], y=y[start:start + PER_FILE])
            out.append(directory)
        return out[0], out[1]

    def list_files(self, path: Path) -> list[Path]:
        path = Path(path)
        return [path] if path.is_file() else sorted(path.glob("*.npz"))

    def check_file(self, path: Path) -> int:
        with np.load(path) as data:
            if "x" not in data or "y" not in data or data["x"].shape[1:] != (FEATURES,):
                raise ValueError(f"not a points file: needs x of shape (N, {FEATURES}) and y")
            return int(data["y"].shape[0])

    def train(self, ctx: TrainContext) -> None:
        x, y = _read(ctx.train_files)
        x, y = x[ctx.rank::ctx.world_size], y[ctx.rank::ctx.world_size]  # each worker its own share of the points
        with ctx.strategy().scope():
            model = _model(ctx.preset, ctx.knobs)
        if ctx.checkpoint is not None:
            model.load_weights(ctx.checkpoint / WEIGHTS)

        def save(directory: Path) -> None:
            model.save_weights(directory / WEIGHTS)
            (directory / SETTINGS).write_text(json.dumps({"preset": ctx.preset, "knobs": ctx.knobs}))

        for epoch in ctx.epochs():
            history = model.fit(x, y, batch_size=ctx.batch_per_replica, epochs=1, verbose=0, shuffle=True)
            loss, accuracy = history.history["loss"][-1], history.history["accuracy"][-1]
            ctx.end_epoch({"loss": loss, "error_rate": 1.0 - accuracy, "samples": len(y)}, save=save)

    def validate(self, checkpoint: Path, test_files: list[Path], out_dir: Path, *, events: int, seed: int) -> dict[str, float]:
        x, y = _read(test_files)
        x, y = x[:events], y[:events]
        settings = json.loads((checkpoint / SETTINGS).read_text())
        model = _model(settings["preset"], settings["knobs"])
        model.load_weights(checkpoint / WEIGHTS)
        predicted = model.predict(x, verbose=0).argmax(axis=1)
        return {"test_error_rate": float((predicted != y).mean())}


WORKLOAD = Classifier()
