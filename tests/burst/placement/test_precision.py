"""The plan's time model knows precision: the 16-bit format each accelerator runs fast, the
speed-up it counts for it, and what it says about both."""

import pytest

from burst.catalog import offers as catalog
from burst.placement import policy, profile
from burst.placement import planner as placement
from workloads.common import precision

OFFERS = catalog.load()
PROFILE = profile.load("gan3d")


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path))


def _plan(precision_name: str, accelerator: str, **fields):
    pol = policy.Policy.model_validate({"providers": ["gcp"], "preemptible": "never", "accelerators": [accelerator],
                                        "precision": precision_name, **fields})
    return placement.plan(pol, PROFILE, OFFERS)


@pytest.mark.parametrize("accelerator, fast", [("H100", "mixed_bfloat16"), ("A100-40GB", "mixed_bfloat16"), ("L4", "mixed_bfloat16"),
                                               ("V100", "mixed_float16"), ("T4", "mixed_float16")])
def test_auto_plans_each_gpu_in_the_16_bit_format_it_runs_fast_and_says_so(accelerator, fast):
    auto, fp32 = _plan("auto", accelerator), _plan("float32", accelerator)
    a = auto.candidates[0]
    f = next(c for c in fp32.candidates if (c.region, c.count, c.layout_text) == (a.region, a.count, a.layout_text))
    assert a.estimate.precision == fast and f.estimate.precision == "float32"
    name, speedup, _ = PROFILE.precision(accelerator, "auto")
    assert name == fast and speedup > 1
    assert a.estimate.epoch_s < f.estimate.epoch_s  # the per-event term shrinks; the per-step one stays
    assert f.estimate.epoch_s / a.estimate.epoch_s < speedup
    assert any(f"computes in {fast} (auto): x{speedup:g}" in r for r in a.reasons)
    assert not any("computes in" in r for r in f.reasons)
    assert a.to_dict()["precision"] == fast


def test_a_16_bit_format_the_accelerator_lacks_counts_no_speed_up():
    asked = _plan("mixed_bfloat16", "V100")  # Volta has no bfloat16
    c = next(c for c in asked.candidates if c.count == 8)
    assert c.estimate.precision == "mixed_bfloat16"
    assert c.estimate.epoch_s == pytest.approx(next(x for x in _plan("float32", "V100").candidates
                                                    if (x.region, x.count) == (c.region, 8)).estimate.epoch_s)
    assert any("no speed-up counted: V100 does not run mixed_bfloat16 fast" in r for r in c.reasons)


def test_every_accelerator_in_the_profile_has_a_precision_and_a_source():
    for name, acc in PROFILE.accelerators.items():
        got, speedup, basis = PROFILE.precision(name)
        assert got in precision.PRECISIONS and speedup >= 1 and basis
        if acc.mixed is not None:
            assert basis.startswith(("measured", "derived")), name  # a figure says where it comes from
    assert PROFILE.precision("skylake-48c") == ("float32", 1.0, "float32, as the tables were measured")  # no AVX512-BF16 on Skylake


def test_the_local_estimate_takes_the_bench_rate_of_the_precision_the_run_uses():
    profile.record_local("gan3d", {"events_per_s": 2.0, "cpus": 2, "by_precision": {"float32": 2.0, "mixed_bfloat16": 0.5}})
    local_plan = lambda p: next(c for c in placement.plan(policy.Policy.model_validate(  # noqa: E731
        {"providers": ["local"], "precision": p}), PROFILE, OFFERS).candidates)
    asked = local_plan("mixed_bfloat16")
    assert asked.estimate.epoch_s == pytest.approx(PROFILE.events / 0.5)
    assert any("measured by `burst bench` in mixed_bfloat16" in r for r in asked.reasons)
    here = precision.for_cpu(precision.cpu_flags())[0]  # auto: what this CPU runs fast
    assert local_plan("auto").estimate.epoch_s == pytest.approx(PROFILE.events / {"float32": 2.0, "mixed_bfloat16": 0.5}[here])


def test_a_policy_with_an_unknown_precision_is_refused_in_one_line(tmp_path):
    from burst.errors import BurstError

    path = tmp_path / "p.yaml"
    path.write_text("precision: fp8\n")
    with pytest.raises(BurstError, match="precision.*unknown precision 'fp8'"):
        policy.load(path)


def test_a_run_s_own_precision_is_what_its_plan_estimates(tmp_path):
    """`burst run --precision float32` on an H100 cloud: the plan estimates float32, not the
    policy's auto; a run that names none keeps the policy's."""
    from burst import api

    path = tmp_path / "p.yaml"
    path.write_text("precision: mixed_bfloat16\nproviders: [gcp]\n")
    flagged = api.policy_for(api.TrainRequest.of(precision="float32"), path)
    assert flagged.precision == "float32" and flagged.providers == ["gcp"]
    assert api.policy_for(api.TrainRequest.of(), path).precision == "mixed_bfloat16"
    assert api.with_policy_settings(api.TrainRequest.of(), api.policy_for(api.TrainRequest.of(), path)).precision == "mixed_bfloat16"
    h100 = flagged.model_copy(update={"preemptible": "never", "accelerators": ["H100"]})
    assert {c.estimate.precision for c in placement.plan(h100, PROFILE, OFFERS).candidates} == {"float32"}
