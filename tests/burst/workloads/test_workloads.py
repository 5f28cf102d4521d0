"""Workloads behind one interface: the registry is the only list of names, every command asks the
workload for its presets, knobs, metrics and profile, and a run record says what kind of run it is."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from burst import workloads
from burst.errors import BurstError

ROOT = Path(__file__).resolve().parents[3]


def burst(*args, home, cwd=ROOT, timeout=120):
    env = {**os.environ, "BURST_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def test_the_registry_lists_both_workloads_with_what_they_offer(tmp_path):
    proc = burst("workloads", "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert list(rows) == ["gan3d", "calo"]
    assert rows["gan3d"]["presets"] == ["small", "paper"] and rows["calo"]["presets"] == ["small", "wide"]
    assert rows["calo"]["epoch_metrics"][0] == "sep_power_mean" and "classifier_auc" in rows["calo"]["gate_metrics"]
    assert Path(rows["calo"]["example_space"]).exists()


@pytest.mark.parametrize("args, line", [
    (["run", "nope"], "unknown workload 'nope'; choose one of: gan3d, calo"),
    (["train", "calo", "--preset", "paper"], "unknown preset 'paper' of workload calo; choose one of: small, wide"),
    (["tune", "calo", "--space", "workloads/gan3d/tune-small.yaml", "--cluster", "x"], "unknown knob 'profile_weight'; a scan can vary: learning_rate, hidden"),
    (["tune", "calo", "--space", "workloads/calo/tune-small.yaml", "--metric", "optimisation_metric", "--cluster", "x"],
     "--metric optimisation_metric: a scan of calo minimises one of sep_power_mean"),
    (["tune", "gan3d", "--space", "workloads/calo/tune-small.yaml", "--cluster", "x"], "unknown knob 'hidden'"),
    (["bench", "nope"], "unknown workload 'nope'"),
    (["plan", "nope"], "unknown workload 'nope'"),
])
def test_what_one_workload_does_not_have_is_one_line(tmp_path, args, line):
    proc = burst(*args, home=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert line in proc.stderr and "Traceback" not in proc.stderr
    assert len([x for x in proc.stderr.splitlines() if x.strip()]) == 1


def test_a_gate_names_the_metrics_of_its_own_workload(tmp_path):
    gate = tmp_path / "g.yaml"
    gate.write_text("optimisation_metric: 30\n")
    proc = burst("train", "calo", "--gate", str(gate), home=tmp_path)
    assert proc.returncode == 2 and f"{gate}:1: unknown metric 'optimisation_metric'; a gate of calo can bound: sep_power_mean" in proc.stderr
    gate.write_text("sep_power_mean: 0.2\nclassifier_auc: 0.9\n")
    from burst.lifecycle import quality

    assert quality.load(gate, "calo") == {"sep_power_mean": 0.2, "classifier_auc": 0.9}


def test_the_plan_for_calo_uses_its_own_profile_and_leaves_out_what_it_has_no_speed_for(tmp_path):
    proc = burst("plan", "calo", "--json", "--all", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    gan3d = json.loads(burst("plan", "gan3d", "--json", "--all", home=tmp_path).stdout)
    assert plan["choice"] is not None and plan["choice"]["batch_per_replica"] == 32  # calo's small preset; gan3d plans the paper preset at 64
    assert gan3d["choice"]["batch_per_replica"] == 64
    assert not any(c["accelerator"].startswith("tpu") for c in plan["candidates"])  # no TPU figure for calo
    assert any(c["accelerator"].startswith("tpu") for c in gan3d["candidates"])
    assert plan["excluded"].get("no speed for the accelerator in the workload's profile", 0) > 0
    by_key = {(c["provider"], c["region"], c["accelerator"], c["count"], c["preemptible"]): c for c in gan3d["candidates"]}
    same = [(c, by_key[k]) for c in plan["candidates"] if (k := (c["provider"], c["region"], c["accelerator"], c["count"], c["preemptible"])) in by_key]
    assert same and all(a["est_epoch_s"] != b["est_epoch_s"] for a, b in same)  # each workload's own time model


def test_plan_reasons_carry_codes_beside_their_words(tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text("providers: [gcp]\nbudget_usd: 1\n")
    plan = json.loads(burst("plan", "gan3d", "--policy", str(policy), "--json", "--all", home=tmp_path).stdout)
    for c in plan["candidates"]:
        assert len(c["reason_codes"]) == len(c["reasons"])
        for code, words in zip(c["reason_codes"], c["reasons"]):
            assert (code == "over_budget") == words.startswith("over budget")
    assert any("over_budget" in c["reason_codes"] for c in plan["candidates"])


def test_a_third_workload_needs_nothing_in_burst_but_its_entry_point(monkeypatch, tmp_path):
    """Installed with an entry point (group burst.workloads), a workload of burst's internal interface
    is planned, trained (its request), gated and scanned through the same code as gan3d and calo:
    nothing in burst names it."""
    from burst import api
    from burst.lifecycle import quality
    from burst.runtime import scan_space
    from burst.lifecycle.runs import TrainRequest
    from tests.support.installed import with_entry_points

    monkeypatch.syspath_prepend(str(with_entry_points(tmp_path, "toy", {"toy": "tests.burst.workloads.toy_workload:WORKLOAD"})))
    try:
        toy = workloads.get("toy")
        assert api.plan("toy").choice is not None
        request = TrainRequest.of(workload="toy", epochs=1)
        assert request.preset == "small" and request.workload == "toy"
        with pytest.raises(BurstError, match="unknown preset 'wide' of workload toy"):
            TrainRequest.of(workload="toy", preset="wide")
        assert quality.parse("sep_etot: 0.5\n", "g.yaml", "toy") == {"sep_etot": 0.5}
        assert set(scan_space.parse("hidden: {choice: [16, 32]}\n", "s.yaml", toy).as_data()) == {"hidden"}
    finally:
        workloads._instances.pop("toy", None)
        workloads._sources.pop("toy", None)


def test_a_run_record_says_its_kind_and_an_older_scan_record_is_read_as_a_scan():
    from burst.home.state import RunRecord

    assert RunRecord(run_id="r", workload="calo", cluster="c", provider="local").kind == "run"
    older = {"run_id": "s", "workload": "gan3d", "cluster": "c", "provider": "local", "config": {"kind": "scan", "trials": 2}}
    assert RunRecord.model_validate(older).kind == "scan"
    assert RunRecord.model_validate({**older, "config": {}}).kind == "run"


def test_a_placement_request_round_trips_through_its_flags_and_names_a_bad_flag():
    from burst.placement.request import PlacementRequest

    ask = PlacementRequest(provider="gcp", workload="calo", gpus=8, preemptible=False, avoid=("gcp:us-central1",))
    assert PlacementRequest.from_flags(json.loads(json.dumps(ask.flags()))) == ask
    with pytest.raises(BurstError, match="^--gpus-per-node must be a positive whole number, got 0$"):
        PlacementRequest(gpus_per_node=0).checked()
    with pytest.raises(BurstError, match="unknown workload 'nope'"):
        PlacementRequest(workload="nope").checked()
    with pytest.raises(BurstError, match="not placement fields"):
        PlacementRequest.from_flags({"gpu": 8})


def test_a_held_out_set_judges_a_calo_trial_on_the_epoch_metrics(tmp_path):
    from workloads.calo import pipeline, synthetic

    files = synthetic.write_dataset(tmp_path, 200, seed=2, events_per_file=200)
    trainer, _, _ = pipeline.prepare_training(files, "small", 8, overrides={"hidden": 16})
    summary = workloads.get("calo").held_out(files, trainer, 100).summary(trainer)
    assert list(summary) == list(workloads.get("calo").epoch_metrics)
    assert all(0 <= v <= 1 for k, v in summary.items() if k.startswith("sep_"))


def test_up_plans_with_the_profile_of_the_workload_it_is_for(tmp_path, monkeypatch):
    """The cluster a run starts for itself is sized and priced with its own workload's time model."""
    from burst.lifecycle.placing import place
    from burst.placement.request import PlacementRequest
    from burst.targets.base import QUIET

    monkeypatch.setenv("BURST_HOME", str(tmp_path))
    calo, _ = place(PlacementRequest(workload="calo"), None, QUIET)
    gan3d, _ = place(PlacementRequest(workload="gan3d"), None, QUIET)
    assert calo.estimate.batch == 32 and gan3d.estimate.batch == 64
    assert calo.estimate.epoch_s != gan3d.estimate.epoch_s
