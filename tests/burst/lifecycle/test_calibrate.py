"""`burst calibrate`: an accelerator's speed refitted from measured runs, then used by every plan."""

import json

import pytest

from burst.home import state
from burst.lifecycle.calibrate import calibrate
from burst.errors import BurstError
from burst.placement import profile
from burst.lifecycle.rundir import predicted_vs_measured
from burst.home.state import RunRecord

PROFILE = profile.load("gan3d")


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))


def plan_for(accelerator: str, count: int, nodes: int, batch: int = 64) -> dict:
    return {"preset": "paper", "batch_per_replica": batch, "events": PROFILE.events, "accelerator": accelerator, "count": count,
            "nodes": nodes, "epoch_s": PROFILE.epoch_seconds(accelerator, count, nodes, batch), "kw": 2.4, "grid_gco2_per_kwh": 200.0}


def finished_run(tmp_path, run_id: str, plan: dict, epoch_s: float, samples: int) -> None:
    run_dir = tmp_path / "runs" / run_id
    run_dir.mkdir(parents=True)
    history = [{"epoch": 1, "seconds": 3 * epoch_s, "samples": samples}, {"epoch": 2, "seconds": epoch_s, "samples": samples},
               {"epoch": 3, "seconds": epoch_s, "samples": samples}]
    config = {"preset": "paper", "batch_per_replica": plan["batch_per_replica"]} if plan else {"preset": "small"}
    cost = {"provider": "gcp", "hourly_usd": 1.0, "hours": 0.1, "cost_usd": 0.1, **predicted_vs_measured(plan, config, history, 0.1)}
    (run_dir / "cost.json").write_text(json.dumps(cost))
    state.save(RunRecord(run_id=run_id, workload="gan3d", cluster="c", provider="gcp", state="SUCCEEDED", run_dir=str(run_dir), config=config))


def test_a_run_on_a_twice_as_fast_v100_calibrates_twice_the_speed_and_plans_use_it(tmp_path):
    fit = PROFILE.fit()
    fast = fit.per_event["V100"] / 2
    for run_id, (count, nodes) in {"r1": (8, 1), "r2": (32, 4)}.items():
        plan = plan_for("V100", count, nodes)
        samples = 64 * count * 10  # ten steps per epoch
        measured = fit.epoch_s(fast, "ethernet", count, nodes, 64, samples)
        finished_run(tmp_path, run_id, plan, measured, samples)
    result = calibrate(["r1", "r2"])
    assert result.accelerator == "V100" and result.per_event_s == pytest.approx(fast, rel=1e-4)  # cost.json keeps ms
    assert result.speed_change == pytest.approx(2.0, rel=1e-4)
    assert PROFILE.per_event_s("V100") == pytest.approx(fast, rel=1e-4)
    assert PROFILE.basis("V100").startswith("measured here: 2 run(s) (r1, r2)")
    assert PROFILE.per_event_s("T4") == pytest.approx(fast / 0.356, rel=1e-4)  # derived speeds follow their base


def test_a_run_in_bfloat16_calibrates_the_float32_speed_the_plan_then_scales(tmp_path):
    """An H100 run in mixed_bfloat16 (its provenance says so) was faster by the profile's speed-up:
    the calibration divides that back out, so a plan does not count the speed-up twice."""
    fit = PROFILE.fit()
    name, speedup, _ = PROFILE.precision("H100")
    assert name == "mixed_bfloat16" and speedup > 1
    float32_here = PROFILE.per_event_s("H100") / 2  # this site's H100s: twice the profile's speed
    samples = 64 * 8 * 10
    finished_run(tmp_path, "h", {**plan_for("H100", 8, 1), "precision": name},
                 fit.epoch_s(float32_here / speedup, "ethernet", 8, 1, 64, samples), samples)
    (tmp_path / "runs" / "h" / "provenance.json").write_text(json.dumps({"machine": {"precision": name}}))
    result = calibrate(["h"])
    assert result.per_event_s == pytest.approx(float32_here, rel=1e-3)
    assert "runs in mixed_bfloat16, scaled to float32 by the profile's speed-up" in PROFILE.basis("H100")
    assert PROFILE.epoch_seconds("H100", 8, 1, 64, samples, name) == pytest.approx(
        fit.epoch_s(float32_here / speedup, "ethernet", 8, 1, 64, samples), rel=1e-3)


def test_runs_that_cannot_calibrate_say_why_in_one_line(tmp_path):
    finished_run(tmp_path, "pinned", {}, 10.0, 100)
    with pytest.raises(BurstError, match="started without a plan .* measured by `burst bench`"):
        calibrate(["pinned"])
    finished_run(tmp_path, "v", plan_for("V100", 8, 1), 50.0, 5120)
    finished_run(tmp_path, "t", plan_for("T4", 8, 1), 50.0, 5120)
    with pytest.raises(BurstError, match="the runs trained on T4, V100; calibrate one accelerator at a time"):
        calibrate(["v", "t"])
    with pytest.raises(BurstError, match="no run named 'nope'"):
        calibrate(["nope"])
    finished_run(tmp_path, "quick", plan_for("V100", 8, 1), 0.001, 5120)
    with pytest.raises(BurstError, match="shorter than the model's fixed per-step cost"):
        calibrate(["quick"])


def test_cost_json_compares_the_plan_with_the_run_at_the_events_it_had():
    plan = plan_for("V100", 8, 1)
    history = [{"seconds": 30.0, "samples": 5120}, {"seconds": 10.0, "samples": 5120}, {"seconds": 12.0, "samples": 5120}]
    block = predicted_vs_measured(plan, {"preset": "paper", "batch_per_replica": 64}, history, 0.5)
    assert block["measured"]["epoch_s"] == 11.0  # median of the epochs after the first
    assert block["predicted"]["epoch_s"] == pytest.approx(plan["epoch_s"] * 5120 / PROFILE.events, rel=1e-3)
    assert block["measured"]["kgco2e"] == pytest.approx(2.4 * 0.5 * 200 / 1000)
    other = predicted_vs_measured(plan, {"preset": "paper", "batch_per_replica": 32}, history, 0.5)
    assert other["predicted"] == {"epoch_s": None, "why": "the plan was for batch 64 per replica; this run used 32"}
    small = predicted_vs_measured(plan, {"preset": "small", "batch_per_replica": 64}, history, 0.5)  # a site's plan describes the paper preset
    assert small["predicted"] == {"epoch_s": None, "why": "the time model describes the paper preset; this run trained small"}
