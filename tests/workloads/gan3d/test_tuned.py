"""Preset knobs a scan sets (``presets.tuned``): they change the networks and the training, and a
checkpoint remembers them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workloads.gan3d.presets import SMALL, overrides_of, tuned


def test_knobs_change_the_preset_and_are_recovered_from_it():
    knobs = {"learning_rate": 3e-4, "loss_weight_angle": 10.0, "gen_filters": [8, 6], "noise_size": 30, "label_flip": 0.0,
             "angle_gain": 3.0}
    preset = tuned(SMALL, knobs)
    assert preset.name == "small" and preset.loss_weights == (3.0, 0.1, 10.0, 0.1)
    assert [b.filters for b in preset.gen_blocks] == [8, 6] and preset.latent_size == 32 and preset.angle_gain == 3.0
    assert overrides_of(preset) == knobs
    assert tuned(SMALL, {}) is SMALL and overrides_of(SMALL) == {}


@pytest.mark.parametrize("knobs, message", [
    ({"dropout": 0.1}, "unknown knob(s) dropout"),
    ({"disc_filters": [4, 4]}, "disc_filters of preset 'small' is 3 positive widths"),
    ({"label_flip": 0.5}, "label_flip is a fraction in [0, 0.5), got 0.5"),
    ({"learning_rate": 0.0}, "learning_rate must be above 0, got 0.0"),
    ({"angle_gain": 0}, "angle_gain must be above 0, got 0"),
])
def test_bad_knobs_are_refused_by_name(knobs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        tuned(SMALL, knobs)


def test_a_tuned_model_trains_generates_and_restores_only_with_its_knobs(tmp_path):
    from workloads.gan3d.train import GAN3DTrainer

    preset = tuned(SMALL, {"gen_filters": [8, 6], "noise_size": 30, "loss_weight_bce": 0.0})
    trainer = GAN3DTrainer(preset, 2)
    assert trainer.generator.input_shape[-1] == 32
    assert trainer.generator.get_layer("g_conv0").kernel.shape[-1] == 8
    showers = trainer.generate(np.array([150.0]), np.array([1.5]))
    assert showers.shape == (1, *preset.grid)
    trainer.save(tmp_path / "ckpt")
    assert json.loads((tmp_path / "ckpt" / "history.json").read_text())["overrides"] == overrides_of(preset)
    GAN3DTrainer(preset, 2).restore(tmp_path / "ckpt")  # the same knobs: fine
    with pytest.raises(ValueError, match="was trained with"):
        GAN3DTrainer(tuned(SMALL, {"learning_rate": 1e-4}), 2).restore(tmp_path / "ckpt")
