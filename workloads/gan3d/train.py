"""The paper's optimised distributed training loop, one step a single compiled function.

The whole step (noise and conditioning, fake generation, 5 % label flipping, the discriminator
on real then on fake, the generator twice) is one ``tf.function`` run under ``strategy.run``, so it
works unchanged under the default strategy, ``MirroredStrategy``, ``MultiWorkerMirroredStrategy``
and ``TPUStrategy``. Losses are per-example, weighted [3, 0.1, 25, 0.1] and scaled by the global
batch (``tf.nn.compute_average_loss``), so gradients summed across replicas equal the gradient of
the global-batch mean.

Choices where the authors' code is buggy or ambiguous:
* Label flips and noise are TF stateless random ops seeded by (run seed, global step, replica,
  draw), so they differ every step and on every replica (the TF2 reference drew them with NumPy
  at trace time, freezing one flip pattern). Only the step counter is state, and it is in the
  checkpoint, so a resumed run draws exactly what an uninterrupted run would have drawn. (A
  ``tf.random.Generator`` would work too, but under MirroredStrategy each draw updates a mirrored
  variable from replica context and synchronises the replicas: measured 0.59× the baseline's
  samples/s with 2 replicas.)
* The generator updates call the discriminator with ``training=True`` (batch statistics,
  dropout active) and apply gradients to the generator only, as the TF2 cloud-paper loop does.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Callable

import numpy as np
import tensorflow as tf
import keras

from ..common import precision as precisions
from ..common.layout import keep_channels_last
from ..common.loop import EpochLoop
from . import calibration
from .model import build_discriminator, build_generator, soft_hits
from .presets import PAPER_POWER, Preset, overrides_of

CHECKPOINT_PREFIX = "gan3d"
#: Bumped when the saved object graph changes. 2: the generator's first block is one
#: UpsampledConv3D layer instead of UpSampling3D + Conv3D (same weights, one layer fewer).
CHECKPOINT_FORMAT = 2
#: Added to the run's seed for the noise of the showers the energy calibration is fitted on.
CALIBRATION_NOISE = 7717


PROFILE_FLOOR = 1e-5  # fraction of a batch's energy below which a cell's share is not told apart


def transverse_shares(images_pow: tf.Tensor, power: float) -> tuple[tf.Tensor, tf.Tensor]:
    """Share of a batch's deposited energy in each x column and each y row (summed over the rest)."""
    e = tf.pow(tf.nn.relu(images_pow[..., 0]), 1.0 / power)
    px = tf.reduce_sum(e, axis=[0, 2, 3])
    py = tf.reduce_sum(e, axis=[0, 1, 3])
    total = tf.reduce_sum(px) + 1e-12
    return px / total, py / total


def profile_mismatch(fake_pow: tf.Tensor, real_pow: tf.Tensor, power: float) -> tf.Tensor:
    """Mean |log| ratio of the fake and real batches' transverse shares, cell by cell, x and y.

    The two batches share their conditions (energies and angles), so their mean showers should
    have the same lateral shape; on a log scale the tails count as much as the core."""
    fx, fy = transverse_shares(fake_pow, power)
    rx, ry = transverse_shares(tf.stop_gradient(real_pow), power)
    log_ratio = lambda a, b: tf.reduce_mean(tf.abs(tf.math.log(a + PROFILE_FLOOR) - tf.math.log(b + PROFILE_FLOOR)))  # noqa: E731
    return (log_ratio(fx, rx) + log_ratio(fy, ry)) / 2


def shower_features(images_pow: tf.Tensor, power: float, energy: tf.Tensor | None = None) -> tf.Tensor:
    """Per-shower features (B, z + 8), differentiable: the validation's high-level features
    (``distances.high_level_features``), all in stored units: energy per layer, the total,
    barycentres and widths along x, y and z, and a soft count of the cells above the hit threshold.

    ``energy``: each shower's primary energy (any unit, the same for both batches); the layer
    energies and the total are then divided by it, so the total is the sampling fraction E_sum/Ep
    the validation measures, and the layers the longitudinal profile per unit of energy."""
    pow_image = images_pow[..., 0]
    e = tf.pow(tf.nn.relu(pow_image), 1.0 / power)
    total = tf.reduce_sum(e, axis=[1, 2, 3]) + 1e-6
    per = tf.ones_like(total) if energy is None else tf.cast(tf.reshape(energy, [-1]), e.dtype)
    cols = [tf.reduce_sum(e, axis=[1, 2]) / per[:, None], (total / per)[:, None]]
    for axes in ([2, 3], [1, 3], [1, 2]):
        proj = tf.reduce_sum(e, axis=axes)
        idx = tf.range(tf.shape(proj)[1], dtype=e.dtype)
        m1 = tf.linalg.matvec(proj, idx) / total
        m2 = tf.reduce_sum(proj * tf.square(idx[None, :] - m1[:, None]), axis=1) / total
        cols += [m1[:, None], tf.sqrt(m2 + 1e-6)[:, None]]
    hits = tf.reduce_sum(soft_hits(pow_image, power), axis=[1, 2, 3])
    cols.append(hits[:, None])
    return tf.concat(cols, axis=1)


def feature_mismatch(fake_pow: tf.Tensor, real_pow: tf.Tensor, power: float, energy: tf.Tensor | None = None) -> tf.Tensor:
    """How far the fake batch's shower features are from the real batch's (``feature_distance``).
    The two batches share their conditions, so their feature distributions should agree; a
    classifier on these features is what tells GAN from Monte Carlo.

    With ``energy`` (the batch's primary energies) the energies are per unit of primary energy: in a
    batch of mixed energies the spread of raw totals is mostly the spread of the energies, which
    makes a few per cent off in the sampling fraction a small fraction of one standard deviation;
    the spread of E_sum/Ep is the calorimeter's own, a few per cent."""
    return feature_distance(shower_features(fake_pow, power, energy), tf.stop_gradient(shower_features(real_pow, power, energy)))


def feature_distance(fake: tf.Tensor, real: tf.Tensor) -> tf.Tensor:
    """Two batches' features (B, F) apart, in the real batch's standard deviations: the difference
    of the means plus the difference of the spreads, averaged over the features, plus the mean
    difference of the two correlation matrices.

    The correlations are what the classifier found once the means and spreads agreed: one by one,
    the generator's layer energies were as good as indistinguishable from MC's (AUC 0.43 to 0.59),
    all 25 together told apart at 0.88, because its neighbouring layers went up and down together
    less than MC's (docs/workloads/physics.md)."""
    real_mean, fake_mean = tf.reduce_mean(real, axis=0), tf.reduce_mean(fake, axis=0)
    real_std = tf.sqrt(tf.reduce_mean(tf.square(real - real_mean), axis=0))
    fake_std = tf.sqrt(tf.reduce_mean(tf.square(fake - fake_mean), axis=0) + 1e-12)
    floor = 1e-3 * tf.abs(real_mean)  # (+ 1e-6): a feature may not vary in the real batch
    scale, fake_scale = real_std + floor + 1e-6, fake_std + floor + 1e-6
    marginals = tf.reduce_mean((tf.abs(fake_mean - real_mean) + tf.abs(fake_std - real_std)) / scale)
    return marginals + tf.reduce_mean(tf.abs(_correlations(fake, fake_mean, fake_scale) - _correlations(real, real_mean, scale)))


def _correlations(features: tf.Tensor, mean: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    """(B, F) features → their (F, F) correlation matrix over the batch."""
    z = (features - mean) / scale
    return tf.matmul(z, z, transpose_a=True) / tf.cast(tf.shape(z)[0], z.dtype)


def _per_example_losses(outputs, labels, y, ang, ecal) -> list[tf.Tensor]:
    """Unweighted per-example terms: BCE(real/fake), MAPE(Ep/100), MAE(angle), MAPE(ECAL sum)."""
    gen, aux, ang_pred, ecal_pred = (tf.reshape(o, [-1]) for o in outputs)
    p = tf.clip_by_value(gen, 1e-7, 1.0 - 1e-7)
    bce = -(labels * tf.math.log(p) + (1.0 - labels) * tf.math.log(1.0 - p))
    mape_e = 100.0 * tf.abs(y - aux) / tf.maximum(tf.abs(y), 1e-7)
    mae_a = tf.abs(ang - ang_pred)
    mape_s = 100.0 * tf.abs(ecal - ecal_pred) / tf.maximum(tf.abs(ecal), 1e-7)
    return [bce, mape_e, mae_a, mape_s]


TERM_NAMES = ("bce", "ep_mape", "angle_mae", "ecal_mape")
METRIC_NAMES = ("d_loss", "g_loss", *(f"{net}_{term}" for term in TERM_NAMES for net in ("d", "g")))


class GAN3DTrainer(EpochLoop):
    """Owns both networks, both optimisers, the random generator and the epoch counter.

    ``precision``: ``float32``, ``mixed_bfloat16`` or ``mixed_float16`` (``workloads.common.precision``);
    the weights and the checkpoint are float32 in every one."""

    def __init__(self, preset: Preset, per_replica_batch: int, strategy: tf.distribute.Strategy | None = None, seed: int = 0,
                 precision: str = precisions.FLOAT32):
        self._init_run(preset, per_replica_batch, strategy, seed)
        self.precision = precisions.check(precision)
        keep_channels_last()  # on a GPU too: the channels-last step is the faster one (workloads.common.layout)
        with self.strategy.scope(), precisions.building(precision):
            self.generator = build_generator(preset)
            self.discriminator = build_discriminator(preset)
            self.g_opt = precisions.optimizer(keras.optimizers.RMSprop(preset.learning_rate), precision)
            self.d_opt = precisions.optimizer(keras.optimizers.RMSprop(preset.learning_rate), precision)
            # Build the optimiser slots now so a restore finds every variable it saved.
            self.g_opt.build(self.generator.trainable_variables)
            self.d_opt.build(self.discriminator.trainable_variables)
            self._make_counters()
        # Dropout draws from Keras seed generators whose state variables Keras does not track
        # for tf.train.Checkpoint; without them a resumed run would draw different masks.
        seed_states = [v for m in (self.generator, self.discriminator) for v in m.variables if "seed_generator_state" in v.path]
        self.checkpoint = tf.train.Checkpoint(
            generator=self.generator, discriminator=self.discriminator,
            g_opt=precisions.saved_optimizer(self.g_opt), d_opt=precisions.saved_optimizer(self.d_opt), step=self.step, run_seed=self.run_seed, epoch=self.epoch,
            dropout_seeds=seed_states,
        )
        self.history: list[dict] = []
        self._reference: calibration.Reference | None = None  # training events the energy calibration is fitted on
        self._reference_loader: Callable[[], calibration.Reference] | None = None
        self._calibration, self._calibrated_at = calibration.IDENTITY, 0
        self._init_loop(METRIC_NAMES)
        self._step = tf.function(self._distributed_step, autograph=False)  # as the loop's own step (EpochLoop)

    # ------------------------------------------------------------------ the step

    def _weighted_loss(self, terms: list[tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor]]:
        weights = self.preset.loss_weights
        scaled = [tf.nn.compute_average_loss(w * t, global_batch_size=self.global_batch) for w, t in zip(weights, terms)]
        unweighted = [tf.nn.compute_average_loss(t, global_batch_size=self.global_batch) for t in terms]  # a weight may be 0
        return tf.add_n(scaled), unweighted

    def _latent(self, y: tf.Tensor, ang: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        noise = tf.random.stateless_normal([tf.shape(y)[0], self.preset.noise_size], seed=seed)
        return tf.concat([y[:, None], ang[:, None], noise], axis=1)

    def _discriminator_update(self, images, labels, y, ang, ecal, step=None):
        with tf.GradientTape() as tape:
            outputs = self.discriminator(images, training=True)
            total, terms = self._weighted_loss(_per_example_losses(outputs, labels, y, ang, ecal))
            loss = precisions.scaled(self.d_opt, total, step)
        variables = self.discriminator.trainable_variables
        self.d_opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return total, terms

    def _generator_update(self, latent, y, ang, ecal, real, step=None):
        ones = tf.ones_like(y)
        with tf.GradientTape() as tape:
            fake = self.generator(latent, training=True)
            outputs = self.discriminator(fake, training=True)
            total, terms = self._weighted_loss(_per_example_losses(outputs, ones, y, ang, ecal))
            if self.preset.profile_weight:  # a per-replica batch statistic: averaged over replicas like the rest
                total += tf.nn.scale_regularization_loss(self.preset.profile_weight * profile_mismatch(fake, real, self.preset.power))
            if self.preset.feature_weight:
                total += tf.nn.scale_regularization_loss(self.preset.feature_weight * feature_mismatch(fake, real, self.preset.power, y))
            loss = precisions.scaled(self.g_opt, total, step)
        variables = self.generator.trainable_variables
        self.g_opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return total, terms

    def train_step(self, batch: dict, step: tf.Tensor) -> dict[str, tf.Tensor]:
        """One replica's step; returns loss contributions already scaled by the global batch."""
        x, y, ang, ecal = batch["x"], batch["y"], batch["ang"], batch["ecal"]
        n = tf.shape(y)[0]
        fake = self.generator(self._latent(y, ang, self._seed(step, 0)), training=False)
        real_labels = tf.where(tf.random.stateless_uniform([n], seed=self._seed(step, 1)) < self.preset.label_flip, 0.0, 1.0)
        fake_labels = tf.where(tf.random.stateless_uniform([n], seed=self._seed(step, 2)) < self.preset.label_flip, 1.0, 0.0)
        d_real, d_real_terms = self._discriminator_update(x, real_labels, y, ang, ecal, step)
        d_fake, d_fake_terms = self._discriminator_update(fake, fake_labels, y, ang, ecal, step)
        g1, g1_terms = self._generator_update(self._latent(y, ang, self._seed(step, 3)), y, ang, ecal, x, step)
        g2, g2_terms = self._generator_update(self._latent(y, ang, self._seed(step, 4)), y, ang, ecal, x, step)
        out = {"d_loss": (d_real + d_fake) / 2, "g_loss": (g1 + g2) / 2}
        for i, name in enumerate(TERM_NAMES):
            out[f"d_{name}"] = (d_real_terms[i] + d_fake_terms[i]) / 2
            out[f"g_{name}"] = (g1_terms[i] + g2_terms[i]) / 2
        return out

    # ------------------------------------------------------------------ checkpoints

    def save(self, directory: str | os.PathLike) -> Path:
        """Write both networks, both optimisers, the RNG, the epoch and the metrics history, and
        the position inside the epoch when it is saved in the middle of one."""
        return self._write_checkpoint(directory, CHECKPOINT_PREFIX, {"preset": self.preset.name, "format": CHECKPOINT_FORMAT,
                                                                     "power": self.preset.power, "angle_gain": self.preset.angle_gain,
                                                                     "overrides": overrides_of(self.preset),
                                                                     "precision": self.precision,
                                                                     "calibration": self.calibration.as_dict()})

    def restore(self, directory: str | os.PathLike) -> int:
        """Restore everything ``save`` wrote; return the epoch to continue from."""
        meta = {}
        epoch = self._read_checkpoint(directory, CHECKPOINT_PREFIX, overrides_of(self.preset),
                                      lambda m: (self._same_model(directory, m), meta.update(m)))
        # the fit made with these weights (none in a checkpoint older than the calibration)
        self._calibration = calibration.EnergyCalibration.from_dict(meta.get("calibration")) if self.preset.calibrate_energy else calibration.IDENTITY
        self._calibrated_at = int(self.step.numpy())
        return epoch

    def _same_model(self, directory, meta: dict) -> None:
        """ValueError when the checkpoint holds another preset, format, power transform or angle gain."""
        if meta.get("preset") != self.preset.name:
            raise ValueError(f"checkpoint {directory} was made with preset {meta.get('preset')!r}, not {self.preset.name!r}")
        if meta.get("format", 1) != CHECKPOINT_FORMAT:
            raise ValueError(f"checkpoint {directory} is in format {meta.get('format', 1)}, this burst reads format "
                             f"{CHECKPOINT_FORMAT}; retrain, or read it with the burst version that wrote it")
        if meta.get("power", PAPER_POWER) != self.preset.power:  # before powers were per preset, every preset used the paper's
            raise ValueError(f"checkpoint {directory} was trained on images ** {meta.get('power', PAPER_POWER)}; preset "
                             f"{self.preset.name!r} now trains on ** {self.preset.power}; retrain, or read it with the burst version that wrote it")
        if meta.get("angle_gain", 1.0) != self.preset.angle_gain:  # before the gain, every generator read the plain angle
            raise ValueError(f"checkpoint {directory} was trained reading the angle with gain {meta.get('angle_gain', 1.0)}; preset "
                             f"{self.preset.name!r} now reads it with gain {self.preset.angle_gain}; retrain, or read it with the burst version that wrote it")

    # ------------------------------------------------------------------ the energy calibration

    def fit(self, *args, **kwargs) -> list[dict]:
        """``EpochLoop.fit``, the calibration's training events read first: where a bad file gets
        the job's one-line verdict, and before a run on a remote store removes its local copies."""
        self.reference  # noqa: B018  (read now)
        return super().fit(*args, **kwargs)

    @property
    def reference(self) -> calibration.Reference | None:
        """The training events the energy calibration is fitted on, read when first needed
        (``fit`` reads them before its first step)."""
        if self._reference is None and self._reference_loader is not None:
            self._reference = self._reference_loader()
        return self._reference

    @reference.setter
    def reference(self, events: calibration.Reference | Callable[[], calibration.Reference] | None) -> None:
        """The events themselves, or a function that reads them (``pipeline.prepare_training``)."""
        self._reference, self._reference_loader = (None, events) if callable(events) else (events, None)

    @property
    def calibration(self) -> calibration.EnergyCalibration:
        """The energy calibration of the weights as they are now: fitted again on the training
        reference when a step has moved them since the last fit (``calibration``)."""
        step = int(self.step.numpy())
        knows_reference = self._reference is not None or self._reference_loader is not None
        if knows_reference and self.preset.calibrate_energy and step != self._calibrated_at:
            ref = self.reference
            made = generate_showers(self.generator, ref.energy_gev, ref.angle, power=self.preset.power, seed=self.seed + CALIBRATION_NOISE)
            self._calibration = calibration.fit(ref.ecal, made.sum(axis=(1, 2, 3), dtype=np.float64), ref.energy_gev)
            self._calibrated_at = step
        return self._calibration

    # ------------------------------------------------------------------ inference

    def generate(self, energy_gev: np.ndarray, theta_rad: np.ndarray, batch: int = 256, seed: int = 1) -> np.ndarray:
        """Showers in stored units (N, x, y, z) for the given conditions, with the generator's
        energy calibration applied."""
        showers = generate_showers(self.generator, energy_gev, theta_rad, power=self.preset.power, batch=batch, seed=seed)
        if len(showers):
            showers *= self.calibration.scale(energy_gev)[:, None, None, None]
        return showers


_SHOWERS_FNS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _showers_fn(generator: keras.Model, power: float):
    """One traced inference function per generator: latent vectors in, showers in stored units out.

    Built once per model: a ``tf.function`` made anew per call would be traced again
    every time (seconds for the paper preset), and a fixed signature with an unknown batch
    dimension keeps the last, shorter batch from retracing it. The inverse power transform runs
    in the graph, so the showers come back ready in one host copy.
    """
    fn = _SHOWERS_FNS.get(generator)
    if fn is None or fn.power != power:
        @tf.function(input_signature=[tf.TensorSpec([None, generator.input_shape[-1]], tf.float32)])
        def fn(z):
            img = generator(z, training=False)[..., 0]
            return tf.pow(tf.nn.relu(img), 1.0 / power)

        fn.power = power
        _SHOWERS_FNS[generator] = fn
    return fn


def generate_showers(generator: keras.Model, energy_gev: np.ndarray, theta_rad: np.ndarray, *, power: float, batch: int = 256,
                     seed: int = 1) -> np.ndarray:
    """Run ``generator`` in inference mode and undo its preset's power transform, x ** ``power``
    (showers in stored units)."""
    rng = np.random.default_rng(seed)
    out = []
    predict = _showers_fn(generator, power)
    for start in range(0, len(energy_gev), batch):
        e = np.asarray(energy_gev[start : start + batch], dtype=np.float32)
        t = np.asarray(theta_rad[start : start + batch], dtype=np.float32)
        z = np.concatenate([e[:, None] / 100.0, t[:, None], rng.standard_normal((len(e), generator.input_shape[-1] - 2)).astype(np.float32)], axis=1)
        out.append(predict(tf.constant(z)).numpy())
    return np.concatenate(out) if out else np.zeros((0,), np.float32)
