"""3DGAN generator and discriminator (Keras 3 on TensorFlow), built from a preset.

Faithful to the authors' ``AngleArch3dGAN.py`` (svalleco/3Dgan, branch Anglegan): Conv → ReLU → BatchNorm order in the
generator, he_uniform convolutions with a glorot_normal last layer, LeakyReLU(0.3) and
Dropout(0.2) in the discriminator, BatchNorm epsilon 1e-6, and two weightless heads (ECAL sum and
measured angle) evaluated on the inverse-power image. Images are channels_last (x, y, z, 1):
TensorFlow's CPU Conv3D only supports NDHWC, and the parameter counts do not depend on it.

Built under a mixed-precision policy (``workloads.common.precision.building``), the convolutions
compute in 16 bits while the parts where the physics lives stay float32 (``dtype=FLOAT32``): the
generator's last convolution and its image (the power transform is undone on it), the ECAL-sum
and angle heads (sums over 65,025 cells: bfloat16's 8-bit mantissa would lose the small cells),
the hit map and the discriminator's two dense outputs (the losses). Keras's BatchNormalization
keeps its statistics in float32 under any policy.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
import keras
from keras import layers

from ..common.precision import FLOAT32
from .presets import Preset
from .synthetic import STORED_PER_GEV
from .validate import HIT_THRESHOLD_GEV

BN_EPSILON = 1e-6
LEAKY_SLOPE = 0.3
DROPOUT = 0.2


def ecal_sum(image_pow: tf.Tensor, power: float) -> tf.Tensor:
    """Total stored energy of power-transformed images (B, x, y, z, 1) → (B, 1)."""
    linear = tf.pow(tf.nn.relu(image_pow), 1.0 / power)
    return tf.reduce_sum(linear, axis=[1, 2, 3])


def ecal_angle(image_pow: tf.Tensor, power: float) -> tf.Tensor:
    """Measured inclination (radians) of power-transformed images (B, x, y, z, 1) → (B, 1).

    TensorFlow twin of ``features.measured_angle`` (same algorithm, float32).
    """
    e = tf.pow(tf.nn.relu(image_pow[..., 0]), 1.0 / power)
    nx, ny, nz = e.shape[1], e.shape[2], e.shape[3]
    xi = tf.range(nx, dtype=e.dtype) + 0.5
    yi = tf.range(ny, dtype=e.dtype) + 0.5
    zi = tf.range(nz, dtype=e.dtype) + 0.5
    total = tf.reduce_sum(e, axis=[1, 2, 3])
    safe_total = tf.where(total == 0, tf.ones_like(total), total)
    proj_x = tf.reduce_sum(e, axis=[2, 3])
    proj_y = tf.reduce_sum(e, axis=[1, 3])
    proj_z = tf.reduce_sum(e, axis=[1, 2])
    x_ref = tf.linalg.matvec(proj_x, xi) / safe_total
    y_ref = tf.linalg.matvec(proj_y, yi) / safe_total
    z_ref = tf.linalg.matvec(proj_z, zi) / safe_total
    layer_sum = proj_z  # (B, z)
    filled = layer_sum > 0
    safe_layer = tf.where(filled, layer_sum, tf.ones_like(layer_sum))
    x_mid = tf.where(filled, tf.einsum("bxyz,x->bz", e, xi) / safe_layer, 0.0)
    y_mid = tf.where(filled, tf.einsum("bxyz,y->bz", e, yi) / safe_layer, 0.0)
    dz = zi[None, :] - z_ref[:, None]
    zproj = tf.sqrt(tf.maximum(tf.square(x_mid - x_ref[:, None]) + tf.square(dz), 1e-7))
    slope = (y_mid - y_ref[:, None]) / zproj
    slope = tf.where(dz < 0, -slope, slope)
    angle = tf.where(filled, math.pi / 2 - tf.atan(slope), 0.0)
    weight = zi[None, :] * tf.cast(filled, e.dtype)
    weight_sum = tf.reduce_sum(weight, axis=1)
    theta = tf.reduce_sum(angle * weight, axis=1) / tf.where(weight_sum == 0, 1.0, weight_sum)
    theta = tf.where(total == 0, 100.0 * tf.ones_like(theta), theta)
    return theta[:, None]


@keras.saving.register_keras_serializable(package="gan3d")
class EcalSum(layers.Layer):
    """Weightless head: ECAL sum of the inverse-power image."""

    def __init__(self, power: float, **kwargs):
        super().__init__(**kwargs)
        self.power = float(power)

    def call(self, inputs):
        return ecal_sum(inputs, self.power)

    def get_config(self):
        return {**super().get_config(), "power": self.power}

    def compute_output_shape(self, input_shape):
        return (input_shape[0], 1)


@keras.saving.register_keras_serializable(package="gan3d")
class EcalAngle(layers.Layer):
    """Weightless head: measured angle of the inverse-power image."""

    def __init__(self, power: float, **kwargs):
        super().__init__(**kwargs)
        self.power = float(power)

    def call(self, inputs):
        return ecal_angle(inputs, self.power)

    def get_config(self):
        return {**super().get_config(), "power": self.power}

    def compute_output_shape(self, input_shape):
        return (input_shape[0], 1)


@keras.saving.register_keras_serializable(package="gan3d")
class AngleGain(layers.Layer):
    """Weightless: widens the latent's angle slot about 90°, θ → π/2 + (θ − π/2) × ``gain``.

    The small preset conditions on the angle measured on its 17 × 17 grid, which spreads 0.05 rad
    beside noise of spread 1, and its generator barely reads it. Inside the model, so that every
    caller feeds the plain angle. A scan knob (``angle_gain``), off in both presets: a gain of 20
    made seed 0's showers follow their angle, but beside the feature term's correlations the
    classifier told them apart more easily (docs/workloads/physics.md)."""

    def __init__(self, gain: float, **kwargs):
        super().__init__(**kwargs)
        self.gain = float(gain)

    def call(self, inputs):
        angle = math.pi / 2 + (inputs[:, 1:2] - math.pi / 2) * self.gain
        return tf.concat([inputs[:, :1], angle, inputs[:, 2:]], axis=1)

    def get_config(self):
        return {**super().get_config(), "gain": self.gain}

    def compute_output_shape(self, input_shape):
        return input_shape


def _phase_taps(factor: int, kernel: int) -> np.ndarray:
    """0/1 matrix M[r, t, k]: kernel tap k reads coarse cell q + t for output phase r.

    After nearest-neighbour up-sampling by ``factor``, fine cell p + k holds coarse cell
    (p + k) // factor; with p = factor·q + r that is q + (r + k) // factor.
    """
    taps = (factor + kernel - 2) // factor + 1
    m = np.zeros((factor, taps, kernel), dtype=np.float32)
    for r in range(factor):
        for k in range(kernel):
            m[r, (r + k) // factor, k] = 1.0
    return m


@keras.saving.register_keras_serializable(package="gan3d")
class UpsampledConv3D(layers.Layer):
    """``UpSampling3D(factor)`` followed by a valid ``Conv3D``, computed on the coarse grid.

    The up-sampled image is constant over factor³ blocks, so each output phase (p mod factor, per
    axis) sees a few coarse cells, each weighted by a sum of kernel taps. The layer keeps the
    Conv3D's own kernel and bias (same shapes, same initialiser, same gradients), sums them into
    one small kernel per phase, runs a single coarse convolution with phases × filters channels and
    interleaves the phases back (depth-to-space). Paper preset: 3.6 of the generator's 6.1 GFLOP per
    shower become 0.2; the result equals the two-layer form up to float summation order.
    """

    def __init__(self, filters: int, kernel_size, factor, kernel_initializer="he_uniform", **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = tuple(int(k) for k in kernel_size)
        self.factor = tuple(int(f) for f in factor)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self._taps = [_phase_taps(f, k) for f, k in zip(self.factor, self.kernel_size)]

    def build(self, input_shape):
        channels = int(input_shape[-1])
        self.kernel = self.add_weight(name="kernel", shape=(*self.kernel_size, channels, self.filters),
                                      initializer=self.kernel_initializer)
        self.bias = self.add_weight(name="bias", shape=(self.filters,), initializer="zeros")

    def _out_size(self, coarse: int, axis: int) -> int:
        return coarse * self.factor[axis] - self.kernel_size[axis] + 1

    def call(self, inputs):
        dtype = self.compute_dtype  # bfloat16 or float16 under a mixed policy; the weights stay float32
        mx, my, mz = (tf.constant(m, dtype=dtype) for m in self._taps)
        # phase kernels: (rx, ry, rz, tx, ty, tz, in, out)
        phase = tf.einsum("atk,bul,cvm,klmio->abctuvio", mx, my, mz, tf.cast(self.kernel, dtype))
        (fx, fy, fz), (tx, ty, tz) = self.factor, (m.shape[1] for m in self._taps)
        cin = self.kernel.shape[3]
        coarse_kernel = tf.reshape(tf.transpose(phase, [3, 4, 5, 6, 0, 1, 2, 7]), (tx, ty, tz, cin, fx * fy * fz * self.filters))
        padded = tf.pad(inputs, [[0, 0], [0, tx - 1], [0, ty - 1], [0, tz - 1], [0, 0]])
        coarse = tf.nn.conv3d(padded, coarse_kernel, strides=[1, 1, 1, 1, 1], padding="VALID")
        nx, ny, nz = inputs.shape[1], inputs.shape[2], inputs.shape[3]
        fine = tf.reshape(coarse, (-1, nx, ny, nz, fx, fy, fz, self.filters))
        fine = tf.reshape(tf.transpose(fine, [0, 1, 4, 2, 5, 3, 6, 7]), (-1, nx * fx, ny * fy, nz * fz, self.filters))
        ox, oy, oz = (self._out_size(n, i) for i, n in enumerate((nx, ny, nz)))
        return fine[:, :ox, :oy, :oz, :] + tf.cast(self.bias, dtype)

    def compute_output_shape(self, input_shape):
        sizes = [self._out_size(int(input_shape[1 + i]), i) for i in range(3)]
        return (input_shape[0], *sizes, self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "kernel_size": self.kernel_size, "factor": self.factor,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}

    def flops_per_sample(self) -> float:
        """Multiply-adds ×2 actually executed: the coarse convolution, per sample."""
        coarse_cells = math.prod(int(n) for n in self.input.shape[1:4])
        taps = math.prod(m.shape[1] for m in self._taps) * self.kernel.shape[3]
        return 2.0 * coarse_cells * taps * math.prod(self.factor) * self.filters


def build_generator(preset: Preset) -> keras.Model:
    """Latent (B, 2 + noise size) = [Ep/100, θ, noise] → power-space image (B, x, y, z, 1)."""
    z = keras.Input(shape=(preset.latent_size,), name="latent")
    h = AngleGain(preset.angle_gain, name="angle_gain", dtype=FLOAT32)(z) if preset.angle_gain != 1 else z
    h = layers.Dense(math.prod(preset.dense_shape), name="dense")(h)
    h = layers.Reshape(preset.dense_shape)(h)
    coarse_first = not any(preset.gen_blocks[0].pad)  # padding after up-sampling breaks the coarse-grid form
    if not coarse_first:
        h = layers.UpSampling3D(size=preset.upsample)(h)
    for i, block in enumerate(preset.gen_blocks):
        if any(block.pad):
            h = layers.ZeroPadding3D(block.pad)(h)
        if i == 0 and coarse_first:
            h = UpsampledConv3D(block.filters, block.kernel, preset.upsample, kernel_initializer="he_uniform", name="g_conv0")(h)
        else:
            h = layers.Conv3D(block.filters, block.kernel, kernel_initializer="he_uniform", name=f"g_conv{i}")(h)
        h = layers.ReLU()(h)
        if block.batchnorm:  # BatchNorm after the activation, as in the reference
            h = layers.BatchNormalization(momentum=preset.bn_momentum, epsilon=BN_EPSILON, name=f"g_bn{i}")(h)
    h = layers.Conv3D(1, preset.final_kernel, kernel_initializer="glorot_normal", name="g_out", dtype=FLOAT32)(h)
    image = layers.ReLU(dtype=FLOAT32)(h)
    model = keras.Model(z, image, name=f"generator_{preset.name}")
    got = tuple(model.output.shape[1:4])
    if got != preset.grid:
        raise ValueError(f"preset {preset.name}: generator produces {got}, expected {preset.grid}")
    _no_dead_start(model.get_layer("g_out"), inputs_non_negative=not preset.gen_blocks[-1].batchnorm)
    return model


def _no_dead_start(out: layers.Conv3D, inputs_non_negative: bool) -> None:
    """Mirror the last convolution's kernel when it was drawn all negative.

    Its inputs are ReLU outputs (>= 0) and its bias starts at 0, so an all-negative kernel (one
    draw in 2^channels: 1/16 for the small preset, 1/64 for the paper's) makes every cell of every
    shower exactly 0; the final ReLU then passes no gradient back and the generator never learns
    (measured: seed 2 of the small preset trained six epochs of empty showers). The mirrored
    kernel is an equally likely draw of the same initialiser; the architecture is unchanged.
    """
    kernel = out.kernel.numpy()
    if inputs_non_negative and np.all(kernel <= 0):
        out.kernel.assign(-kernel)


HIT_THRESHOLD_STORED = HIT_THRESHOLD_GEV * STORED_PER_GEV  # the validation's 0.3 MeV hit threshold, in stored units
HIT_SOFTNESS = 0.004  # width of the soft step in power space: under x ** 0.5 a cell 10 % above the threshold reads 0.8


def soft_hits(image_pow: tf.Tensor, power: float) -> tf.Tensor:
    """Per cell, a soft 0/1 of "above the validation's hit threshold", from power-space values."""
    return tf.sigmoid((image_pow - HIT_THRESHOLD_STORED ** power) / HIT_SOFTNESS)


@keras.saving.register_keras_serializable(package="burst")
class HitMap(layers.Layer):
    """Weightless: a soft 0/1 map of the cells above the hit threshold, for the discriminator's eyes.

    Under x ** 0.5 a 0.33 MeV cell and a 0.27 MeV one differ by 0.012 in power space, too little for
    the convolutions to notice, yet one is a hit and the other is not. (Off in both presets: tried on
    the small one, it cut the hit deficit but widened the transverse tails.)"""

    def __init__(self, power: float, **kwargs):
        super().__init__(**kwargs)
        self.power = float(power)

    def call(self, inputs):
        return soft_hits(inputs, self.power)

    def get_config(self):
        return {**super().get_config(), "power": self.power}


def build_discriminator(preset: Preset) -> keras.Model:
    """Power-space image → [real/fake (sigmoid), Ep/100, measured angle, ECAL sum]."""
    image = keras.Input(shape=(*preset.grid, 1), name="image")
    h = layers.Concatenate(axis=-1)([image, HitMap(preset.power, name="hits", dtype=FLOAT32)(image)]) if preset.hit_channel else image
    for i, block in enumerate(preset.disc_blocks):
        if any(block.pad):
            h = layers.ZeroPadding3D(block.pad)(h)
        h = layers.Conv3D(block.filters, block.kernel, padding=block.padding, name=f"d_conv{i}")(h)
        h = layers.LeakyReLU(negative_slope=LEAKY_SLOPE)(h)
        if block.batchnorm:
            h = layers.BatchNormalization(momentum=preset.bn_momentum, epsilon=BN_EPSILON, name=f"d_bn{i}")(h)
        h = layers.Dropout(DROPOUT)(h)
    h = layers.AveragePooling3D(preset.pool)(h)
    h = layers.Flatten()(h)
    generation = layers.Dense(1, activation="sigmoid", name="generation", dtype=FLOAT32)(h)
    auxiliary = layers.Dense(1, activation="linear", name="auxiliary", dtype=FLOAT32)(h)
    angle = EcalAngle(preset.power, name="ang", dtype=FLOAT32)(image)
    ecal = EcalSum(preset.power, name="ecal", dtype=FLOAT32)(image)
    return keras.Model(image, [generation, auxiliary, angle, ecal], name=f"discriminator_{preset.name}")


def flops_per_sample(model: keras.Model) -> float:
    """Forward FLOPs (2 × multiply-adds) executed by the model's convolutions and Dense layers per sample."""
    total = 0
    for layer in model.layers:
        if isinstance(layer, UpsampledConv3D):
            total += layer.flops_per_sample()
        elif isinstance(layer, layers.Conv3D):
            out = math.prod(layer.output.shape[1:4])
            k = math.prod(layer.kernel_size) * layer.kernel.shape[3]
            total += 2 * out * k * layer.filters
        elif isinstance(layer, layers.Dense):
            total += 2 * layer.kernel.shape[0] * layer.kernel.shape[1]
    return float(total)
