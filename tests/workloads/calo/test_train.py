"""The calo trainer under the shared epoch loop: it learns, it generates showers in the file's
units, and a checkpoint taken inside an epoch resumes at its step as if never stopped."""

import json

import numpy as np
import pytest

from workloads.calo import pipeline, synthetic
from workloads.calo.geometry import VOXELS
from workloads.calo.presets import SMALL, tuned

BATCH = 16


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return synthetic.write_dataset(tmp_path_factory.mktemp("calo-train"), 400, seed=5, events_per_file=200)


def _weights(trainer):
    return [w.copy() for w in trainer.net.get_weights()]


def test_the_denoiser_learns_and_generates_showers_in_mev(files):
    trainer, fn, steps = pipeline.prepare_training(files, "small", BATCH, seed=1, overrides={"hidden": 64})
    assert steps == 400 // BATCH
    history = trainer.fit(fn, 3, steps)
    assert [h["epoch"] for h in history] == [1, 2, 3] and history[-1]["loss"] < 0.6 * history[0]["loss"]
    energies = np.array([2e3, 5e4, 8e5])
    showers = trainer.generate(energies, seed=3)
    assert showers.shape == (3, VOXELS) and showers.dtype == np.float32
    assert (showers >= 0).all() and (showers[showers > 0] >= 0.01515).all()
    np.testing.assert_array_equal(showers, trainer.generate(energies, seed=3))  # the same noise, the same showers


def test_a_checkpoint_taken_inside_an_epoch_resumes_at_its_step_as_if_never_stopped(files, tmp_path):
    steps = 4
    small = {"hidden": 32}
    trainer, fn, _ = pipeline.prepare_training(files, "small", BATCH, seed=7, steps_per_epoch=steps, overrides=small)
    whole = trainer.fit(fn, 2, steps)

    first, fn, _ = pipeline.prepare_training(files, "small", BATCH, seed=7, steps_per_epoch=steps, overrides=small)
    saved = []
    first.fit(fn, 2, steps, on_checkpoint=lambda pos: saved.append(first.save(tmp_path / f"at{pos['epoch']}-{pos['step']}")),
              checkpoint_every=3, should_stop=lambda: first.epoch_step == 3 and first.epoch.numpy() == 1, stop_check_every=1)
    assert first.stopped == {"epoch": 2, "step": 3, "steps": 4}
    meta = json.loads((saved[-1] / "history.json").read_text())
    assert meta["position"]["step"] == 3 and meta["workload"] == "calo" and meta["overrides"] == small

    resumed, fn, _ = pipeline.prepare_training(files, "small", BATCH, seed=7, steps_per_epoch=steps, overrides=small, resume_from=saved[-1])
    stepped = []
    history = resumed.fit(fn, 2, steps, on_step=stepped.append)
    assert [s["step"] for s in stepped] == [4]
    assert history[0]["loss"] == pytest.approx(whole[1]["loss"], rel=1e-4)
    for x, y in zip(_weights(trainer), _weights(resumed)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_restore_refuses_other_knobs(files, tmp_path):
    from workloads.calo.train import CaloDiffusionTrainer

    t = CaloDiffusionTrainer(tuned(SMALL, {"hidden": 32}), 4)
    t.save(tmp_path / "c")
    with pytest.raises(ValueError, match="trained with {'hidden': 32}"):
        CaloDiffusionTrainer(tuned(SMALL, {"hidden": 48}), 4).restore(tmp_path / "c")
