import json

import numpy as np
import pytest

from workloads.gan3d.synthetic import generate_events
from workloads.gan3d.validate import compare, write_report


@pytest.fixture(scope="module")
def mc():
    return generate_events(60, seed=21)


def test_identical_samples_score_zero(mc):
    s = compare(mc["ECAL"], mc["ECAL"].copy(), mc["energy"], mc["theta"])["summary"]
    for key in ("sf_rel_error", "profile_abs_error", "moment_error", "profile_error", "angle_rel_error", "hits_rel_error", "optimisation_metric"):
        assert s[key] == pytest.approx(0.0, abs=1e-9), key


def test_energy_scale_distortion_shows_in_the_sampling_fraction(mc):
    s = compare(mc["ECAL"], mc["ECAL"] * 1.2, mc["energy"], mc["theta"])["summary"]
    assert s["sf_rel_error"] == pytest.approx(0.2, rel=1e-3)
    assert s["moment_error"] == pytest.approx(0.0, abs=1e-6)  # moments are scale-free


def test_metrics_grow_with_the_distortion(mc):
    def shifted(k):  # move every shower k layers deeper
        return np.roll(mc["ECAL"], k, axis=3)

    small = compare(mc["ECAL"], shifted(1), mc["energy"], mc["theta"])["summary"]
    large = compare(mc["ECAL"], shifted(4), mc["energy"], mc["theta"])["summary"]
    assert 0 < small["profile_abs_error"] < large["profile_abs_error"]
    assert 0 < small["moment_error"] < large["moment_error"]
    assert small["optimisation_metric"] < large["optimisation_metric"]


def test_independent_mc_samples_agree_better_than_a_distorted_one(mc):
    other = generate_events(60, seed=22)
    # same conditions are needed for a like-for-like comparison: reuse mc's, vary only the showers
    fair = compare(mc["ECAL"], other["ECAL"], mc["energy"], mc["theta"])["summary"]
    blurred = compare(mc["ECAL"], np.roll(mc["ECAL"], 3, axis=1), mc["energy"], mc["theta"])["summary"]
    assert fair["profile_abs_error"] < blurred["profile_abs_error"]


def test_bins_cover_energy_and_angle(mc):
    m = compare(mc["ECAL"], mc["ECAL"], mc["energy"], mc["theta"])
    assert "all" in m["by_energy"] and len(m["by_energy"]) >= 3
    assert "all" in m["by_angle"] and any("90" in k for k in m["by_angle"])
    assert m["by_energy"]["all"]["events"] == 60


def test_report_files(mc, tmp_path):
    metrics = write_report(mc["ECAL"], mc["ECAL"] * 0.9, mc["energy"], mc["theta"], tmp_path, initial_stored=mc["ECAL"] * 0.1)
    assert json.loads((tmp_path / "metrics.json").read_text())["summary"] == metrics["summary"]
    html = (tmp_path / "report.html").read_text()
    for fig in ("sampling_fraction", "profiles", "moments", "angle", "hits"):
        assert (tmp_path / f"{fig}.png").stat().st_size > 1000
        assert f"alt='{fig}'" in html
    assert "data:image/png;base64," in html
    assert "At initialisation" in html
    assert metrics["initial"]["summary"]["sf_rel_error"] > metrics["summary"]["sf_rel_error"]


def test_shape_mismatch_is_an_error(mc):
    with pytest.raises(ValueError, match="differ in shape"):
        compare(mc["ECAL"], mc["ECAL"][:, :17], mc["energy"], mc["theta"])


# ----------------------------------------------------------------- noise floor, distances, verdict


def test_frechet_distance_matches_the_closed_form_for_commuting_covariances():
    """b = 2·(a − mean) + shift has Σb = 4Σa exactly, so Tr(Σa Σb)^½ = 2 Tr Σa and the distance is
    |shift|² + Tr Σa, whatever Σa's correlations."""
    from workloads.gan3d.distances import frechet_distance

    rng = np.random.default_rng(0)
    a = rng.standard_normal((400, 5)) @ rng.standard_normal((5, 5))  # correlated features
    shift = np.array([1.0, -2.0, 0.5, 0.0, 3.0])
    b = 2 * (a - a.mean(0)) + a.mean(0) + shift
    expected = shift @ shift + np.trace(np.cov(a, rowvar=False))
    assert frechet_distance(a, b) == pytest.approx(expected, rel=1e-6)
    assert frechet_distance(a, a.copy()) == pytest.approx(0.0, abs=1e-6)


def test_roc_auc_is_the_share_of_pairs_a_score_orders_right_with_ties_counted_half():
    from workloads.common.distances import roc_auc

    labels = np.array([0, 0, 1, 1])
    assert roc_auc(labels, np.array([0.1, 0.2, 0.3, 0.4])) == 1.0
    assert roc_auc(labels, np.array([0.4, 0.3, 0.2, 0.1])) == 0.0
    assert roc_auc(labels, np.zeros(4)) == 0.5
    # pairs (negative, positive): (0.1, 0.2) right, (0.1, 0.5) right, (0.2, 0.2) a tie, (0.2, 0.5) right
    assert roc_auc(labels, np.array([0.1, 0.2, 0.2, 0.5])) == pytest.approx(3.5 / 4)


def test_fpd_kpd_and_classifier_tell_a_shifted_sample_from_a_second_draw():
    from workloads.gan3d.distances import distances

    rng = np.random.default_rng(1)
    cov = np.diag([1.0, 2.0, 0.5, 1.0])
    real, again = (rng.multivariate_normal([5, 5, 5, 5], cov, 400) for _ in range(2))
    shifted = rng.multivariate_normal([5, 6, 5, 5], cov, 400)
    same, other = distances(real, again), distances(real, shifted)
    # one feature shifted by 0.7 sigma: the expected AUC is 0.69; a second draw's is 0.5
    assert other["fpd"] > 10 * (abs(same["fpd"]) + same["fpd_error"])
    assert other["kpd"] > 10 * (abs(same["kpd"]) + same["kpd_error"])
    assert 0.4 < same["classifier_auc"] < 0.6 and other["classifier_auc"] > 0.62


def test_matched_halves_are_disjoint_and_paired_by_condition(mc):
    from workloads.gan3d.validate import matched_halves

    a, b = matched_halves(mc["energy"], mc["theta"])
    assert len(a) == len(b) == 30 and not set(a) & set(b) and len(set(a) | set(b)) == 60
    for key in ("energy", "theta"):
        unpaired = np.abs(mc[key][:30] - mc[key][30:]).mean()  # two events taken at random differ this much
        assert np.abs(mc[key][a] - mc[key][b]).mean() < unpaired / 3, key


def test_report_states_the_noise_floor_the_distances_and_the_verdict(tmp_path):
    """The report puts the GAN next to the MC-vs-MC floor at the same sample size; distorted showers stand out."""
    mc = generate_events(200, seed=31)
    distorted = np.roll(mc["ECAL"], 2, axis=1) * 1.15  # two cells off in x, 15 % too much energy
    metrics = write_report(mc["ECAL"], distorted, mc["energy"], mc["theta"], tmp_path, gate={"classifier_auc": 0.7, "fpd": 1.0, "sf_rel_error": 0.1})
    s, floor, same = metrics["summary"], metrics["noise_floor"], metrics["gan_same_size"]
    assert floor["events"] == same["events"] == 100
    for key in ("fpd", "kpd", "classifier_auc", "optimisation_metric"):
        assert key in s and key in floor and key in same
    assert same["classifier_auc"] > 0.9 and floor["classifier_auc"] < 0.75
    assert same["fpd"] > 5 * (abs(floor["fpd"]) + floor["fpd_error"]) and same["optimisation_metric"] > floor["optimisation_metric"]
    v = metrics["verdict"]
    assert v["passed"] is False and set(v["failing"]) == {"classifier_auc", "sf_rel_error"}
    assert v["line"].startswith("FAILED the quality gate: classifier_auc")
    html = (tmp_path / "report.html").read_text()
    assert "Verdict:</b> FAILED the quality gate" in html and "Noise floor: MC vs MC" in html


def test_verdict_without_a_gate_and_with_one_that_passes(mc):
    from workloads.gan3d.validate import evaluate, verdict

    again = evaluate(mc["ECAL"], mc["ECAL"].copy(), mc["energy"], mc["theta"])
    assert again["verdict"]["passed"] is None and again["verdict"]["line"].startswith("no quality gate; at 30 events per sample")
    gated = verdict(again, {"optimisation_metric": 0.5, "sf_rel_error": 0.01})
    assert gated["passed"] is True and gated["failing"] == {}
    assert gated["line"].startswith("passed the quality gate (optimisation_metric 0 <= 0.5, sf_rel_error 0 <= 0.01); at 30 events")


def test_transverse_worst_factor_finds_the_worst_cell_within_the_tail_depth():
    from workloads.gan3d.validate import transverse_worst_factor

    mc_profile = np.array([1e-5, 1e-3, 0.03, 1.0, 0.03, 1e-3, 1e-5])  # per x cell, peak 1
    gan_profile = mc_profile * np.array([100.0, 1.0, 1.5, 1.0, 1 / 3, 1.0, 100.0])  # far tails (below 1e-3) do not count
    p = {"x": mc_profile[None, :], "y": mc_profile[None, :]}
    assert transverse_worst_factor(p, {"x": gan_profile[None, :], "y": mc_profile[None, :]}) == pytest.approx(3.0)
    assert transverse_worst_factor(p, p) == 1.0
    empty = gan_profile.copy()
    empty[1] = 0.0  # a cell at 1e-3 of the peak that the GAN leaves empty
    assert transverse_worst_factor(p, {"x": empty[None, :], "y": mc_profile[None, :]}) == 1e6


def test_validate_command_states_the_noise_floor_and_the_verdict(tiny_h5, tmp_path):
    import subprocess
    import sys

    from workloads.gan3d.presets import SMALL
    from workloads.gan3d.train import GAN3DTrainer

    GAN3DTrainer(SMALL, 4, seed=0).save(tmp_path / "ckpt")
    proc = subprocess.run([sys.executable, "-m", "workloads.gan3d", "validate", "--checkpoint", str(tmp_path / "ckpt"), "--data", str(tiny_h5),
                           "--out", str(tmp_path / "report")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["noise_floor"]["events"] == 24 and out["summary"]["events"] == 48  # the held-out file, split in two paired halves
    assert out["verdict"].startswith("no quality gate; at 24 events per sample: optimisation_metric")
    assert (tmp_path / "report" / "report.html").exists()


def test_showers_with_nan_or_infinite_cells_fail_with_or_without_a_gate(mc, tmp_path):
    """What a 16-bit run whose arithmetic overflowed generates: judged (the finite cells still
    measured), not crashed on, and failed whatever the gate says."""
    from workloads.gan3d.validate import evaluate

    broken = mc["ECAL"].astype(np.float32).copy()
    broken[:3, 10, 10, :] = np.nan
    broken[3, 0, 0, 0] = np.inf
    got = write_report(mc["ECAL"], broken, mc["energy"], mc["theta"], tmp_path, extra={"precision": "mixed_float16"})
    fraction = (3 * 25 + 1) / broken.size
    assert got["summary"]["non_finite_fraction"] == pytest.approx(fraction)
    assert np.isfinite(got["summary"]["sf_rel_error"]) and np.isfinite(got["summary"]["classifier_auc"])
    assert got["verdict"]["passed"] is False and got["verdict"]["line"].startswith("FAILED: 0.")
    assert "NaN or infinite" in got["verdict"]["line"]
    assert json.loads((tmp_path / "metrics.json").read_text())["run"] == {"precision": "mixed_float16"}
    gated = evaluate(mc["ECAL"], broken, mc["energy"], mc["theta"], gate={"optimisation_metric": 1e9})
    assert gated["verdict"]["passed"] is False and set(gated["verdict"]["failing"]) == {"non_finite_fraction"}
    clean = evaluate(mc["ECAL"], mc["ECAL"].copy(), mc["energy"], mc["theta"], gate={"optimisation_metric": 1e9})
    assert clean["verdict"]["passed"] is True and clean["summary"]["non_finite_fraction"] == 0.0


@pytest.mark.parametrize("preset_name", ["small", "paper"])
def test_held_out_showers_are_asked_for_with_the_angle_training_labels_its_events_with(tiny_h5, preset_name):
    """The generator learns the angle as training's preprocessing measures it; held-out showers asked
    for with the true angle are asked for angles it never saw (on the small grid: 1.06 to 2.09 rad
    against 1.44 to 1.70)."""
    from workloads.gan3d import data, pipeline
    from workloads.gan3d.presets import get_preset

    preset = get_preset(preset_name)
    files = sorted(tiny_h5.glob("*.h5"))[:1]
    labels = data.load(files[0], preset)  # what training conditions each event on
    held = pipeline.HeldOut(files, preset, 48)
    assert len(labels) == len(held.angle) == 48
    np.testing.assert_allclose(held.angle, labels.ang, rtol=1e-6)
    if preset_name == "small":  # the report's angle bins still use the true angle, which differs
        assert np.ptp(held.theta) > 3 * np.ptp(held.angle)


def test_the_report_and_the_epoch_summary_generate_with_the_training_angle(tiny_h5, tmp_path, monkeypatch):
    from workloads.gan3d import data, pipeline, train
    from workloads.gan3d.presets import SMALL

    asked = []
    real = train.generate_showers

    def recording(generator, energy_gev, theta_rad, **kw):
        asked.append(np.asarray(theta_rad, np.float64))
        return real(generator, energy_gev, theta_rad, **kw)

    monkeypatch.setattr(train, "generate_showers", recording)
    files = sorted(tiny_h5.glob("*.h5"))[:1]
    labels = data.load(files[0], SMALL).ang
    trainer = pipeline.make_trainer(SMALL, 8, seed=1)
    pipeline.HeldOut(files, SMALL, 48).summary(trainer)
    pipeline.validate(trainer, files, tmp_path / "report", events=48)
    assert len(asked) == 3  # the epoch summary, the report's showers and its untrained generator's
    for angles in asked:
        np.testing.assert_allclose(angles, labels, rtol=1e-6)
