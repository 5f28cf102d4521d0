"""Training the denoiser: one compiled step under ``strategy.run``, the shared epoch loop
(``workloads.common.loop``) around it, and deterministic sampling for generation.

The denoiser predicts the clean shower x0 from the noisy one (not the noise: a network narrower
than the 6480 cells cannot pass the noise through, while showers lie close to a low-dimensional
set). The step draws the diffusion time and the noise with TF stateless random ops seeded by (run
seed, global step, replica), so a resumed run draws exactly what an uninterrupted one would have;
the loss is the per-example mean squared error of the predicted shower, scaled by the global batch
(``tf.nn.compute_average_loss``) so that gradients summed across replicas are those of the global
mean. Noise schedule: the cosine schedule of Nichol & Dhariwal (alpha-bar(t) =
cos^2(pi/2 (t + s) / (1 + s)), s = 0.008); generation runs DDIM (deterministic) from t = 1 to 0.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from ..common import precision as precisions
from ..common.loop import EpochLoop
from . import data
from .model import build_denoiser
from .presets import Preset, overrides_of

CHECKPOINT_PREFIX = "calo"
CHECKPOINT_FORMAT = 1
SCHEDULE_S = 0.008
METRIC_NAMES = ("loss",)


def alpha_bar(t: tf.Tensor) -> tf.Tensor:
    """The share of signal variance left at time t in [0, 1] (cosine schedule), kept off 0 and 1."""
    f = tf.cos((t + SCHEDULE_S) / (1 + SCHEDULE_S) * math.pi / 2) ** 2 / math.cos(SCHEDULE_S / (1 + SCHEDULE_S) * math.pi / 2) ** 2
    return tf.clip_by_value(f, 1e-5, 1.0 - 1e-5)


class CaloDiffusionTrainer(EpochLoop):
    """Owns the denoiser, its optimiser, the step and epoch counters; ``precision`` as the GAN's."""

    def __init__(self, preset: Preset, per_replica_batch: int, strategy: tf.distribute.Strategy | None = None, seed: int = 0,
                 precision: str = precisions.FLOAT32):
        self._init_run(preset, per_replica_batch, strategy, seed)
        self.precision = precisions.check(precision)
        with self.strategy.scope(), precisions.building(precision):
            self.net = build_denoiser(preset)
            self.opt = precisions.optimizer(keras.optimizers.Adam(preset.learning_rate), precision)
            self.opt.build(self.net.trainable_variables)
            self._make_counters()
        self.checkpoint = tf.train.Checkpoint(net=self.net, opt=precisions.saved_optimizer(self.opt), step=self.step, run_seed=self.run_seed, epoch=self.epoch)
        self.history: list[dict] = []
        self._init_loop(METRIC_NAMES)
        self._sampler = None

    # ------------------------------------------------------------------ the step

    def train_step(self, batch: dict, step: tf.Tensor) -> dict[str, tf.Tensor]:
        x0, c = batch["x"], batch["c"]
        n = tf.shape(c)[0]
        t = tf.random.stateless_uniform([n], seed=self._seed(step, 0))
        noise = tf.random.stateless_normal(tf.shape(x0), seed=self._seed(step, 1))
        ab = alpha_bar(t)[:, None]
        x_t = tf.sqrt(ab) * x0 + tf.sqrt(1.0 - ab) * noise
        with tf.GradientTape() as tape:
            predicted = self.net([x_t, t, c], training=True)
            per_example = tf.reduce_mean(tf.square(predicted - x0), axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=self.global_batch)
            scaled = precisions.scaled(self.opt, loss, step)
        variables = self.net.trainable_variables
        self.opt.apply_gradients(zip(tape.gradient(scaled, variables), variables))
        return {"loss": loss}

    # ------------------------------------------------------------------ checkpoints

    def save(self, directory: str | os.PathLike) -> Path:
        return self._write_checkpoint(directory, CHECKPOINT_PREFIX, {"workload": "calo", "preset": self.preset.name,
                                                                     "format": CHECKPOINT_FORMAT, "overrides": overrides_of(self.preset),
                                                                     "precision": self.precision})

    def restore(self, directory: str | os.PathLike) -> int:
        return self._read_checkpoint(directory, CHECKPOINT_PREFIX, overrides_of(self.preset), lambda meta: self._same_model(directory, meta))

    def _same_model(self, directory, meta: dict) -> None:
        if meta.get("preset") != self.preset.name or meta.get("workload") != "calo":
            raise ValueError(f"checkpoint {directory} was made by {meta.get('workload', 'another workload')} preset "
                             f"{meta.get('preset')!r}, not calo preset {self.preset.name!r}")
        if meta.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"checkpoint {directory} is in format {meta.get('format')}, this burst reads format {CHECKPOINT_FORMAT}")

    # ------------------------------------------------------------------ generation

    def _sample_fn(self):
        if self._sampler is None:
            steps = self.preset.sample_steps
            times = tf.linspace(1.0, 0.0, steps + 1)

            @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([None, None], tf.float32)])
            def sample(c, x):
                for i in tf.range(steps):
                    t, t_next = times[i], times[i + 1]
                    ab, ab_next = alpha_bar(t), tf.where(t_next > 0, alpha_bar(t_next), 1.0)
                    x0 = tf.clip_by_value(self.net([x, tf.fill(tf.shape(c), t), c], training=False), -3.0, 5.0)
                    eps = (x - tf.sqrt(ab) * x0) / tf.sqrt(1.0 - ab)
                    x = tf.sqrt(ab_next) * x0 + tf.sqrt(1.0 - ab_next) * eps
                return x

            self._sampler = sample
        return self._sampler

    def generate(self, energies_mev: np.ndarray, seed: int = 1, batch: int = 500) -> np.ndarray:
        """Showers (N, 6480) in MeV for the given incident energies."""
        rng = np.random.default_rng(seed)
        sample = self._sample_fn()
        out = []
        energies_mev = np.asarray(energies_mev, np.float64).reshape(-1)
        for start in range(0, len(energies_mev), batch):
            e = energies_mev[start:start + batch]
            noise = rng.standard_normal((len(e), self.net.input_shape[0][-1])).astype(np.float32)
            x = sample(tf.constant(data.condition(e)), tf.constant(noise)).numpy()
            out.append(data.from_model(x, e))
        return np.concatenate(out) if out else np.zeros((0, self.net.input_shape[0][-1]), np.float32)
