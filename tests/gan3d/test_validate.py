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
