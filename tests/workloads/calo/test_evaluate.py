"""The CaloChallenge evaluation: the features, the separation power and the noise floor behave as the
challenge defines them."""

import numpy as np
import pytest

from workloads.calo import synthetic
from workloads.calo.evaluate import evaluate, high_level_features, separation_power
from workloads.calo.geometry import ALPHA_BINS, LAYERS, RADIAL_BINS, VOXELS, cell_xy_mm


def test_separation_power_is_zero_for_identical_and_one_for_disjoint_histograms():
    rng = np.random.default_rng(0)
    a = rng.normal(size=5000)
    assert separation_power(a, a) == pytest.approx(0.0)
    assert separation_power(np.r_[np.zeros(50), np.ones(50)], np.full(100, 0.5), bins=3) == pytest.approx(1.0)  # no bin shared
    assert separation_power(a, a + 100) > 0.99  # out of the reference's range: in its edge bin
    assert separation_power(np.r_[np.zeros(50), np.ones(50)], np.r_[np.zeros(100)], bins=2) == pytest.approx(1 / 3)  # 1/2 (0.25/1.5 + 0.25/0.5)


def test_features_of_one_hit_cell_are_its_position_and_energy():
    shower = np.zeros((1, LAYERS, ALPHA_BINS, RADIAL_BINS))
    shower[0, 10, 4, 2] = 7.0
    f = high_level_features(shower.reshape(1, VOXELS), np.array([1000.0]))
    x, y = cell_xy_mm()
    assert f["e_layer_10"][0] == 7.0 and f["e_layer_09"][0] == 0.0
    assert f["etot_ratio"][0] == pytest.approx(0.007)
    assert f["ec_x_10"][0] == pytest.approx(x[4, 2]) and f["ec_y_10"][0] == pytest.approx(y[4, 2])
    assert f["width_x_10"][0] == pytest.approx(0.0, abs=1e-9)
    assert f["sparsity_10"][0] == pytest.approx(1 / (ALPHA_BINS * RADIAL_BINS)) and f["sparsity_11"][0] == 0.0


@pytest.fixture(scope="module")
def mc():
    energies, showers = synthetic.generate_events(400, seed=11)
    return energies[:, 0].astype(np.float64), showers


def test_the_reference_against_itself_sits_at_the_noise_floor_and_a_broken_model_far_above(mc):
    energies, showers = mc
    from workloads.calo.evaluate import halves

    b = halves(len(energies))[1]
    same = evaluate(showers, energies, showers, showers[b])  # a "model" that returns the reference itself
    assert same["summary"]["sep_power_mean"] == pytest.approx(0.0)
    assert same["summary"]["etot_ratio_rel_error"] == pytest.approx(0.0)
    floor = same["noise_floor"]
    assert floor["sep_power_mean"] < 0.15 and 0.35 < floor["classifier_auc"] < 0.65 and 0.35 < floor["hl_classifier_auc"] < 0.65
    broken = showers * 0.5  # half the energy in every cell
    bad = evaluate(showers, energies, broken, broken[b], gate={"sep_etot": 0.2})
    s = bad["summary"]
    assert s["sep_etot"] > 0.9 and s["etot_ratio_rel_error"] == pytest.approx(0.5, rel=1e-6)
    assert s["classifier_auc"] > 0.9 and s["fpd"] > 10 * max(floor["fpd"], 1e-3)
    assert bad["verdict"]["passed"] is False and "FAILED the quality gate: sep_etot" in bad["verdict"]["line"]
    assert "MC-vs-MC" in bad["verdict"]["line"]
