"""Mixed precision in the workloads: what auto picks, what stays float32, and checkpoints that
resume in any precision (a run moved from a bfloat16 GPU to a float32 CPU site goes on)."""

import numpy as np
import pytest

from workloads.common import precision


@pytest.mark.parametrize("flags, native", [
    (["avx2", "fma"], []),                                          # this project's EPYC: bfloat16 would be emulated
    (["avx512f", "avx512_bf16"], ["avx512_bf16"]),                  # Cooper Lake, Zen 4
    (["avx512f", "amx_tile", "amx_bf16"], ["amx_bf16"]),            # Sapphire Rapids
])
def test_auto_on_a_cpu_stays_float32_and_says_whether_bfloat16_would_be_native(flags, native):
    """Measured on an idle AMX Xeon: bfloat16 x1.02 (paper preset) and x0.51 (small preset) of float32."""
    got, why = precision.for_cpu(flags)
    assert got == precision.FLOAT32 and precision.cpu_bf16_hardware(flags) == native
    assert all(flag in why for flag in native) and ("emulated" in why) == (not native)


@pytest.mark.parametrize("capability, expected", [
    ((6, 0), precision.FLOAT32),    # P100: no tensor cores
    ((7, 0), precision.FLOAT16),    # V100
    ((7, 5), precision.FLOAT16),    # T4
    ((8, 0), precision.BFLOAT16),   # A100
    ((8, 9), precision.BFLOAT16),   # L4
    ((9, 0), precision.BFLOAT16),   # H100
])
def test_auto_on_a_gpu_follows_its_tensor_cores(capability, expected):
    got, why = precision.for_gpu(capability, "GPU")
    assert got == expected and f"{capability[0]}.{capability[1]}" in why


def test_an_unknown_precision_is_one_line_naming_the_choices():
    with pytest.raises(ValueError, match="unknown precision 'fp8'; choose one of: auto, float32, mixed_bfloat16, mixed_float16"):
        precision.check("fp8")
    assert precision.resolve("mixed_bfloat16") == ("mixed_bfloat16", "asked for")


def test_building_restores_the_global_policy_after():
    import keras

    before = keras.config.dtype_policy().name
    with precision.building(precision.BFLOAT16):
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
    assert keras.config.dtype_policy().name == before


# ---------------------------------------------------------------------- the GAN

GAN_ISLANDS = {"g_out", "generation", "auxiliary", "ang", "ecal"}  # where the energies, the image and the losses live


def _gan(seed, precision_name, preset=None):
    from workloads.gan3d.presets import SMALL
    from workloads.gan3d.train import GAN3DTrainer

    return GAN3DTrainer(preset or SMALL, 8, seed=seed, precision=precision_name)


def _fit(trainer, h5, epochs, steps=2):
    from workloads.gan3d import data

    spec = data.InputSpec.discover(h5, trainer.preset)
    return trainer.fit(data.make_dataset_fn(spec, trainer.preset, 8, steps, seed=0), epochs, steps)


def test_a_bfloat16_gan_computes_its_convolutions_in_16_bits_and_its_physics_in_float32(tiny_h5):
    trainer = _gan(1, precision.BFLOAT16)
    for model in (trainer.generator, trainer.discriminator):
        for layer in model.layers:
            if layer.name in GAN_ISLANDS:
                assert layer.compute_dtype == "float32", layer.name
            elif "conv" in layer.name:
                assert layer.compute_dtype == "bfloat16", layer.name
        assert all(v.dtype == "float32" for v in model.weights)  # the weights the optimiser updates stay float32
    assert trainer.generator.output.dtype == "float32"
    history = _fit(trainer, tiny_h5, 1)
    assert np.isfinite(history[-1]["d_loss"]) and np.isfinite(history[-1]["g_loss"])
    showers = trainer.generate(np.array([120.0, 180.0]), np.array([1.4, 1.7]))
    assert showers.dtype == np.float32 and np.isfinite(showers).all() and (showers >= 0).all()


def test_a_checkpoint_resumes_in_another_precision_with_the_same_weights(tiny_h5, tmp_path):
    """A managed run that moves from an H100 (bfloat16) to a CPU site (float32) goes on where it was."""
    first = _gan(3, precision.BFLOAT16)
    _fit(first, tiny_h5, 1)
    first.save(tmp_path / "bf16")
    moved = _gan(99, precision.FLOAT32)
    assert moved.restore(tmp_path / "bf16") == 1
    for a, b in zip(first.generator.get_weights() + first.discriminator.get_weights(),
                    moved.generator.get_weights() + moved.discriminator.get_weights()):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(first.g_opt.variables, moved.g_opt.variables):  # the RMSprop slots came along too
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert [h["epoch"] for h in _fit(moved, tiny_h5, 2)] == [2]
    moved.save(tmp_path / "fp32")
    back = _gan(5, precision.BFLOAT16)
    assert back.restore(tmp_path / "fp32") == 2


def test_validation_generates_in_the_precision_the_run_trained_in(tiny_h5, tmp_path):
    import json

    from workloads.gan3d import pipeline

    trainer = _gan(2, precision.BFLOAT16)
    trainer.save(tmp_path / "ckpt")
    assert json.loads((tmp_path / "ckpt" / "history.json").read_text())["precision"] == precision.BFLOAT16
    files = sorted(tiny_h5.glob("*.h5"))
    metrics = pipeline.validate(tmp_path / "ckpt", files, tmp_path / "report", events=40)
    assert np.isfinite(metrics["summary"]["sf_gan"])
    assert "mixed_bfloat16" in (tmp_path / "report" / "report.html").read_text()


# ---------------------------------------------------------------------- float16 and its loss scale


def test_float16_scales_the_loss_and_keeps_the_checkpoint_s_variables(tmp_path):
    """calo's dense denoiser runs float16 on a CPU (the GAN's 3D pooling has no CPU float16
    kernel, which is why burst refuses mixed_float16 without GPUs)."""
    from workloads.calo import pipeline, synthetic

    files = synthetic.write_dataset(tmp_path / "data", 96, seed=5, events_per_file=96)
    trainer, fn, _ = pipeline.prepare_training(files, "small", 16, seed=1, steps_per_epoch=3, overrides={"hidden": 32},
                                               precision=precision.FLOAT16)
    assert hasattr(trainer.opt, "inner_optimizer") and float(np.asarray(trainer.opt.scale_loss(1.0))) > 1.0
    before = [w.copy() for w in trainer.net.get_weights()]
    history = trainer.fit(fn, 1, 3)
    assert np.isfinite(history[-1]["loss"])
    assert any(not np.array_equal(a, b) for a, b in zip(before, trainer.net.get_weights()))
    trainer.save(tmp_path / "ckpt")
    plain, _, _ = pipeline.prepare_training(files, "small", 16, seed=9, steps_per_epoch=3, overrides={"hidden": 32},
                                            precision=precision.FLOAT32, resume_from=tmp_path / "ckpt")
    for a, b in zip(trainer.net.get_weights(), plain.net.get_weights()):
        np.testing.assert_array_equal(a, b)
