"""The denoiser: a residual MLP that, given a noisy shower, the diffusion time and the incident
energy, predicts the clean shower (the x0 parametrisation of a diffusion model).

Under a mixed-precision policy the dense layers compute in 16 bits; the time features (sines of
frequencies up to 1000) and the output layer (the loss compares it with the clean shower) stay
float32, and Keras's LayerNormalization keeps its statistics in float32."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from ..common.precision import FLOAT32
from .geometry import VOXELS
from .presets import Preset


def time_features(t: tf.Tensor, n: int) -> tf.Tensor:
    """Sinusoidal features of t in [0, 1]: (B,) -> (B, 2n), frequencies 1 .. 1000 on a log scale."""
    freqs = tf.exp(tf.linspace(0.0, math.log(1000.0), n))
    angle = t[:, None] * freqs[None, :]
    return tf.concat([tf.sin(angle), tf.cos(angle)], axis=1)


def build_denoiser(preset: Preset) -> keras.Model:
    x = keras.Input((VOXELS,), name="x_t")
    t = keras.Input((), name="t")
    c = keras.Input((), name="c")
    emb = keras.layers.Concatenate()([keras.layers.Lambda(lambda v: time_features(v, preset.time_features), dtype=FLOAT32)(t),
                                      keras.layers.Reshape((1,))(c)])
    emb = keras.layers.Dense(128, activation="swish")(emb)
    h = keras.layers.Add()([keras.layers.Dense(preset.hidden)(x), keras.layers.Dense(preset.hidden)(emb)])
    h = keras.layers.Activation("swish")(h)
    for _ in range(preset.blocks):
        r = keras.layers.LayerNormalization()(h)
        r = keras.layers.Dense(preset.hidden, activation="swish")(r)
        r = keras.layers.Add()([keras.layers.Dense(preset.hidden)(r), keras.layers.Dense(preset.hidden)(emb)])
        h = keras.layers.Add()([h, keras.layers.Activation("swish")(r)])
    out = keras.layers.Dense(VOXELS, kernel_initializer="zeros", dtype=FLOAT32)(keras.layers.LayerNormalization()(h))
    return keras.Model([x, t, c], out, name=f"calo_denoiser_{preset.name}")
