import numpy as np
import pytest

from workloads.gan3d.features import measured_angle
from workloads.gan3d.presets import PAPER, PRESETS, SMALL, get_preset


def test_paper_parameter_counts_match_the_reference():
    from workloads.gan3d.model import build_discriminator, build_generator

    assert build_generator(PAPER).count_params() == 1_365_047
    assert build_discriminator(PAPER).count_params() == 87_402


@pytest.mark.parametrize("preset", list(PRESETS.values()), ids=list(PRESETS))
def test_shapes_follow_the_preset_grid(preset):
    import tensorflow as tf

    from workloads.gan3d.model import build_discriminator, build_generator

    g, d = build_generator(preset), build_discriminator(preset)
    z = tf.random.normal([2, 256])
    img = g(z, training=False)
    assert tuple(img.shape) == (2, *preset.grid, 1)
    outs = d(img, training=False)
    assert [tuple(o.shape) for o in outs] == [(2, 1)] * 4
    assert float(tf.reduce_min(img)) >= 0.0  # ReLU output: energies are never negative


def test_small_preset_is_much_cheaper_than_paper():
    from workloads.gan3d.model import build_generator, flops_per_sample

    assert flops_per_sample(build_generator(SMALL)) * 100 < flops_per_sample(build_generator(PAPER))
    assert SMALL.grid == (17, 17, 25)


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        get_preset("huge")


def test_tf_angle_head_matches_numpy_measured_angle(tiny_h5):
    """The discriminator's weightless angle and sum heads compute the data's mtheta and sum."""
    import tensorflow as tf

    from workloads.gan3d.data import load_raw
    from workloads.gan3d.model import ecal_angle, ecal_sum

    raw = load_raw(tiny_h5, limit=16)
    pow_img = tf.constant(np.power(raw["ECAL"], 0.85)[..., None])
    tf_angle = ecal_angle(pow_img, 0.85).numpy()[:, 0]
    np.testing.assert_allclose(tf_angle, measured_angle(raw["ECAL"]), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(tf_angle, raw["mtheta"], rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(ecal_sum(pow_img, 0.85).numpy()[:, 0], raw["ECAL"].sum(axis=(1, 2, 3)), rtol=1e-3)


def test_measured_angle_of_an_empty_image_is_the_reference_sentinel():
    assert measured_angle(np.zeros((1, 5, 5, 4)))[0] == 100.0


@pytest.mark.parametrize(
    "coarse, factor, kernel, cin, filters",
    [((9, 9, 8), (6, 6, 6), (6, 6, 8), 8, 8),  # paper preset's first generator block
     ((6, 6, 9), (3, 3, 3), (2, 2, 3), 4, 6),  # small preset's
     ((3, 4, 2), (2, 3, 4), (5, 1, 7), 3, 2)],  # kernels longer, shorter and equal to the factor
    ids=["paper", "small", "odd"],
)
def test_coarse_grid_convolution_equals_upsampling_then_conv3d(coarse, factor, kernel, cin, filters):
    """The generator's first block, run on the coarse grid, gives the output and the gradients of
    the layer pair it replaces (Keras UpSampling3D then a valid Conv3D). Compared in float64, where
    summation order does not matter (in float32 the coarse form is the more accurate one: it sums
    fewer terms)."""
    import keras
    import tensorflow as tf

    from workloads.gan3d.model import UpsampledConv3D

    fused = UpsampledConv3D(filters, kernel, factor, dtype="float64")
    reference = keras.layers.Conv3D(filters, kernel, dtype="float64")
    x = tf.random.stateless_normal([2, *coarse, cin], seed=[1, 2], dtype=tf.float64)
    fused.build(x.shape)
    reference.build((2, *(n * f for n, f in zip(coarse, factor)), cin))
    reference.set_weights([fused.kernel.numpy(), tf.random.stateless_normal([filters], seed=[3, 4], dtype=tf.float64).numpy()])
    fused.bias.assign(reference.bias)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        got, want = fused(x), reference(keras.layers.UpSampling3D(factor, dtype="float64")(x))
        got_loss, want_loss = tf.reduce_sum(tf.square(got)), tf.reduce_sum(tf.square(want))
    assert tuple(got.shape) == tuple(want.shape) == tuple(fused.compute_output_shape(x.shape))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, atol=1e-9)
    for mine, theirs in ((fused.kernel, reference.kernel), (fused.bias, reference.bias), (x, x)):
        np.testing.assert_allclose(tape.gradient(got_loss, mine).numpy(), tape.gradient(want_loss, theirs).numpy(), rtol=1e-9)


def test_no_seed_starts_with_a_dead_generator():
    """An all-negative last kernel (seeds 2 and 7 of the small preset drew one) would output empty
    showers for every latent and never receive a gradient; every seed must start alive."""
    from workloads.gan3d.train import GAN3DTrainer, generate_showers

    for seed in range(8):
        generator = GAN3DTrainer(SMALL, 4, seed=seed).generator
        assert not np.all(generator.get_layer("g_out").get_weights()[0] <= 0), seed
        showers = generate_showers(generator, np.full(8, 150.0), np.radians(np.full(8, 90.0)), power=SMALL.power)
        assert (showers.sum(axis=(1, 2, 3)) > 0).all(), seed


def test_a_scan_can_widen_the_narrow_angle_the_small_generator_reads(tiny_h5):
    """On the small preset's grid the conditioning angle spreads 0.05 rad, a twentieth of the
    noise beside it. The ``angle_gain`` knob widens it about 90° inside the generator, so training,
    generation and the report all feed the plain angle; off (1) in both presets, as measured."""
    from workloads.gan3d.data import conditioning_angle, load_raw
    from workloads.gan3d.features import rebin
    from workloads.gan3d.model import build_generator
    from workloads.gan3d.presets import tuned

    raw = load_raw(tiny_h5)
    spread = conditioning_angle(raw["mtheta"], rebin(raw["ECAL"], SMALL.rebin), SMALL).std()
    assert spread < 0.1 and 0.5 < spread * 20 < 2.0  # what a gain of 20 is for: a spread like the noise's

    widened = tuned(SMALL, {"angle_gain": 20.0})
    generator = build_generator(widened)
    latent = np.zeros((3, widened.latent_size), np.float32)
    latent[:, 0], latent[:, 1], latent[:, 2:] = 1.5, [np.pi / 2, 1.5, 1.7], 0.3
    read = generator.get_layer("angle_gain")(latent).numpy()
    np.testing.assert_allclose(read[:, 1], np.pi / 2 + (latent[:, 1] - np.pi / 2) * 20.0, rtol=1e-5)
    others = [0, *range(2, widened.latent_size)]
    np.testing.assert_array_equal(read[:, others], latent[:, others])
    assert SMALL.angle_gain == PAPER.angle_gain == 1
    assert "angle_gain" not in [layer.name for layer in build_generator(SMALL).layers]  # the authors' graph when off
