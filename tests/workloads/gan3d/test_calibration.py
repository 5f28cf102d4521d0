"""The generator's energy calibration: fitted on training events, applied to every shower it makes,
kept in its checkpoint, fitted again when the weights move, and reported with how far it had to go."""

import dataclasses
import json

import numpy as np
import pytest

from workloads.gan3d import calibration, data, pipeline
from workloads.gan3d.presets import SMALL

BATCH = 8


def test_the_fit_recovers_a_response_off_by_a_different_factor_in_each_energy_bin():
    rng = np.random.default_rng(3)
    energy = rng.uniform(100, 200, 4000)
    mc = energy * 0.022 * rng.normal(1, 0.03, 4000)
    off = 1.10 - 0.002 * (energy - 100)  # the generator 10 % too faint at 100 GeV, 10 % too bright at 200
    gan = mc / off * rng.normal(1, 0.08, 4000)  # and wider event to event
    fit = calibration.fit(mc, gan, energy)
    assert fit.events == 4000 and len(fit.energies) == calibration.BINS
    for e, s in zip(fit.energies, fit.scales):
        assert s == pytest.approx(1.10 - 0.002 * (e - 100), abs=0.01)
    assert fit.offset == pytest.approx(0.085, abs=0.01)  # the outer bins' centres are ~12 GeV inside the range
    np.testing.assert_allclose(fit.scale(np.array([50.0, 300.0])), [fit.scales[0], fit.scales[-1]], rtol=1e-6)  # flat beyond
    # a test beam (one energy) gets one scale; a generator that deposits nothing is not "mended"
    one = calibration.fit(mc[:100], gan[:100], np.full(100, 150.0))
    assert len(one.scales) == 1 and one.scales[0] == pytest.approx(mc[:100].sum() / gan[:100].sum())
    dead = calibration.fit(mc, np.zeros_like(mc), energy)
    assert dead.scales == (1.0,) * calibration.BINS and dead.offset == 0.0
    assert calibration.EnergyCalibration.from_dict(json.loads(json.dumps(fit.as_dict()))) == fit


def test_the_reference_events_are_the_same_from_hdf5_and_from_tfrecords(tiny_h5, tmp_path):
    data.convert_to_tfrecords(tiny_h5, tmp_path / "tfr", SMALL)
    h5 = data.reference_events(data.InputSpec.discover(tiny_h5, SMALL), SMALL, 40)
    tf = data.reference_events(data.InputSpec.discover(tmp_path / "tfr", SMALL), SMALL, 40)
    assert len(h5.energy_gev) == len(tf.energy_gev) == 40
    for a, b in ((h5.energy_gev, tf.energy_gev), (h5.angle, tf.angle), (h5.ecal, tf.ecal)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    batch = data.load(tiny_h5, SMALL, 40)
    np.testing.assert_allclose(h5.ecal, batch.ecal, rtol=1e-6)  # the sums the ECAL-sum loss trains on
    assert 100 <= h5.energy_gev.min() and h5.energy_gev.max() <= 200


def _sums(showers):
    return showers.sum(axis=(1, 2, 3), dtype=np.float64)


def test_generated_showers_carry_the_mc_energy_response_and_the_checkpoint_keeps_the_fit_of_its_weights(tiny_h5, tmp_path):
    from workloads.gan3d.train import CALIBRATION_NOISE, generate_showers

    files = data.list_files(tiny_h5)
    trainer, dataset_fn, steps = pipeline.prepare_training(files, "small", BATCH, seed=2, steps_per_epoch=2)
    ref = trainer.reference
    assert ref is not None and len(ref.energy_gev) == 96  # every event of the tiny set (fewer than REFERENCE_EVENTS)
    trainer.fit(dataset_fn, 1, steps)
    raw = generate_showers(trainer.generator, ref.energy_gev, ref.angle, power=SMALL.power, seed=2 + CALIBRATION_NOISE)
    made = trainer.generate(ref.energy_gev, ref.angle, seed=2 + CALIBRATION_NOISE)
    fit = trainer.calibration
    assert fit.events == 96 and fit.offset > 0.05  # two steps in, the generator is far from MC's response
    # the fit is each energy bin's MC energy over the raw generator's, on the very showers it saw,
    order = np.argsort(ref.energy_gev, kind="stable")
    for part, scale in zip(np.array_split(order, calibration.BINS), fit.scales):
        assert ref.ecal[part].sum() / _sums(raw[part]).sum() == pytest.approx(scale, rel=1e-5)
    # and every generated shower is scaled by it, so that they hold the MC's energy
    np.testing.assert_allclose(made, raw * fit.scale(ref.energy_gev)[:, None, None, None], rtol=1e-6)
    print("calibrated / MC:", _sums(made).sum() / ref.ecal.sum(), "raw / MC:", _sums(raw).sum() / ref.ecal.sum())
    assert _sums(made).sum() == pytest.approx(ref.ecal.sum(), rel=0.03)

    # a checkpoint keeps the fit of its own weights: a trainer restored without any training events generates the same showers
    trainer.save(tmp_path / "ck")
    restored = pipeline.make_trainer(SMALL, BATCH, seed=2)
    restored.restore(tmp_path / "ck")
    assert restored.reference is None and restored.calibration == fit
    np.testing.assert_allclose(restored.generate(ref.energy_gev[:16], ref.angle[:16], seed=5), trainer.generate(ref.energy_gev[:16], ref.angle[:16], seed=5),
                               rtol=1e-5, atol=1e-9)

    # the weights move: the next showers are calibrated anew
    trainer.fit(dataset_fn, 2, steps)
    assert trainer.calibration != fit and trainer.calibration.events == 96

    # and the validation report says how far the calibration had to go, which a gate can bound
    metrics = pipeline.validate(tmp_path / "ck", files, tmp_path / "report", events=40, seed=2, gate={"energy_scale_offset": 0.01})
    assert metrics["summary"]["energy_scale_offset"] == pytest.approx(fit.offset)
    assert metrics["verdict"]["passed"] is False and "energy_scale_offset" in metrics["verdict"]["failing"]
    assert metrics["run"]["energy_calibration"].startswith("energy response calibrated on 96 training events: x")


def test_without_calibration_the_generator_s_showers_are_its_own(tiny_h5):
    from workloads.gan3d.train import GAN3DTrainer, generate_showers

    plain = dataclasses.replace(SMALL, calibrate_energy=False)
    trainer = GAN3DTrainer(plain, BATCH, seed=4)
    spec = data.InputSpec.discover(tiny_h5, plain)
    trainer.reference = data.reference_events(spec, plain, 32)
    trainer.fit(data.make_dataset_fn(spec, plain, BATCH, 1, seed=0), 1, 1)
    e, a = trainer.reference.energy_gev, trainer.reference.angle
    assert trainer.calibration == calibration.IDENTITY
    np.testing.assert_array_equal(trainer.generate(e, a, seed=9), generate_showers(trainer.generator, e, a, power=plain.power, seed=9))
