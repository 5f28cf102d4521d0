"""`burst tune`: search-space files, and scans on a real local Ray cluster (Ray Tune + Ray Train,
real TensorFlow training, real HDF5 Monte Carlo): ASHA stops trials, the best trial is the
table's minimum, a trial whose worker is SIGKILLed resumes from its checkpoint, the budget guard
stops the whole scan."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from burst.runtime import scan_space
from burst import workloads
from burst.errors import BurstError
from tests.support import census

GAN3D = workloads.get("gan3d")
EXAMPLE = Path(__file__).resolve().parents[3] / "workloads" / "gan3d" / "tune-small.yaml"
# 24 steps (~2 s) per epoch: ASHA's stop request travels trial report -> Tune driver -> stop file ->
# the workers' next check (every 5 steps); with 4-step epochs (0.4 s on a fast CPU) a trailing
# trial finished all its epochs before the request landed.
TINY = ["--epochs", "3", "--steps", "24", "--synthetic", "400", "--val-events", "80", "--batch-per-replica", "8"]


def test_the_shipped_example_space_is_valid_and_names_real_knobs():
    space = scan_space.load(EXAMPLE, GAN3D)
    assert {"learning_rate", "profile_weight", "batch_per_replica", "gen_filters"} <= set(space.knobs)
    assert scan_space.SearchSpace.from_data(space.as_data()) == space  # what the job reads back is what was checked


@pytest.mark.parametrize("text, message", [
    ("learning_rate: {loguniform: [3e-4, 3e-3]}\nlr: 0.1\n", "f.yaml:2: unknown knob 'lr'; a scan can vary: learning_rate"),
    ("learning_rate:\n  loguniform: [0, 1]\n", "f.yaml:2: learning_rate: loguniform needs [low, high] with 0 < low < high"),
    ("label_flip: {uniform: [0.0, 0.7]}\n", "f.yaml:1: label_flip is a fraction in [0, 0.5), got 0.7"),
    ("gen_filters: {choice: [[6, 4], [8]]}\n", "f.yaml:1: gen_filters of preset 'small' is 2 positive widths"),
    ("noise_size: {uniform: [10, 50]}\n", "f.yaml:1: noise_size takes whole numbers: use int, choice or grid"),
    ("profile_weight: {normal: [1, 2]}\n", "f.yaml:1: profile_weight: a knob takes one distribution (uniform, loguniform, int, choice, grid)"),
    ("batch_per_replica: {choice: [16, 0]}\n", "f.yaml:1: batch_per_replica must be a positive whole number, got 0"),
    ("- learning_rate\n", "f.yaml:1: a search space maps knobs to distributions"),
    ("learning_rate: {loguniform: [3e-4, 3e-3]\n", "f.yaml:2: not valid YAML"),
])
def test_a_bad_space_file_is_one_line_naming_the_file_and_line(text, message):
    with pytest.raises(BurstError) as info:
        scan_space.parse(text, "f.yaml", GAN3D)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_int_ranges_include_both_ends_and_grids_multiply():
    space = scan_space.parse("noise_size: {int: [8, 9]}\nbatch_per_replica: {grid: [8, 16]}\nlabel_flip: {grid: [0.0, 0.05, 0.1]}\n", "f", GAN3D)
    assert space.grid_size() == 6
    ray_space = space.to_ray()
    assert {ray_space["noise_size"].sample() for _ in range(200)} == {8, 9}


def test_the_cli_refuses_a_bad_space_file_with_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "space.yaml"
    bad.write_text("learning_rate: {loguniform: [3e-4, 3e-3]}\ndropout: {uniform: [0, 1]}\n")
    env = {**os.environ, "BURST_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "tune", "gan3d", "--space", str(bad), "--provider", "local"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {bad}:2: unknown knob 'dropout'; a scan can vary: " + ", ".join(
        [*__import__("workloads.gan3d.presets", fromlist=["TUNABLE"]).TUNABLE, "batch_per_replica"])
    assert "Traceback" not in proc.stderr and not (tmp_path / "home" / "clusters").exists()  # nothing started


def test_an_unknown_metric_is_refused_before_anything_starts(tmp_path):
    env = {**os.environ, "BURST_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "tune", "gan3d", "--space", str(EXAMPLE), "--metric", "g_loss"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "--metric g_loss: a scan of gan3d minimises one of optimisation_metric" in proc.stderr


# --------------------------------------------------------------------------- on a real Ray cluster


def _events(log: str, kind: str) -> list[dict]:
    from burst.runtime.job import parse_events

    return [e.model_dump() for e in parse_events(log) if e.type == kind]


@pytest.mark.slow
def test_a_scan_stops_trials_early_resumes_a_killed_worker_and_reports_the_best(tmp_path):
    """Two trials, one at a time, on a cluster `burst tune --provider local` starts and takes down.
    The grid's first learning rate trains; the second (1e-7) barely moves and starts once the first
    has ended, so it reaches ASHA's first rung after it, trails it and is stopped. The first
    trial's Ray Train worker is SIGKILLed once it reported an epoch: Ray Train restarts it from the
    trial's checkpoint and the trial goes on. (A third trial, 1e-3, trained beside the first and
    proved nothing more: 40 to 60 CPU-s. Trials side by side on one cluster, each stopped: the
    budget test below.)"""
    space = tmp_path / "space.yaml"
    space.write_text("learning_rate: {grid: [1.0e-2, 1.0e-7]}\nprofile_weight: 2.0\n")
    env = {**os.environ, "BURST_HOME": str(tmp_path / "home")}
    before = census.snapshot()
    proc = subprocess.Popen([sys.executable, "-m", "burst.cli", "tune", "gan3d", "--space", str(space), "--trials", "1",
                             "--max-concurrent", "1", "--provider", "local", "--cpus", "2", *TINY],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    output, killed, scan_id = [], None, None
    for line in proc.stdout:
        output.append(line)
        if line.startswith("scan tune-"):
            scan_id = line.split()[1].rstrip(":")
        if killed is None and " epoch 1: " in line:  # "trial T epoch 1: M": kill T's worker, which has a checkpoint now
            trial = line.split()[1]
            log = subprocess.run([sys.executable, "-m", "burst.cli", "logs", scan_id], capture_output=True, text=True, env=env,
                                 cwd=tmp_path, timeout=60).stdout
            pids = [e["pid"] for e in _events(log, "start") if (e.get("run_id") or "").endswith(trial)]
            if pids and psutil.pid_exists(pids[-1]):
                killed = pids[-1]
                os.kill(killed, signal.SIGKILL)
    assert proc.wait(timeout=600) == 0, "".join(output)[-4000:]
    text = "".join(output)
    assert killed is not None
    (scan_dir,) = (tmp_path / "burst-runs").iterdir()
    rows = json.loads((scan_dir / "trials.json").read_text())
    summary = json.loads((scan_dir / "scan.json").read_text())
    assert len(rows) == 2 and all(not r["stop_reason"].startswith("failed") for r in rows)
    stopped = [r for r in rows if r["stop_reason"] == "stopped early (ASHA)"]
    assert stopped and all(r["epochs_run"] < 3 for r in stopped) and summary["stopped_early"] == len(stopped)
    assert {r["config"]["learning_rate"] for r in rows} == {1e-2, 1e-7}
    assert next(r for r in rows if r["config"]["learning_rate"] == 1e-7)["stop_reason"] == "stopped early (ASHA)"  # the trailing one
    # The best trial is the table's minimum, and its checkpoint (at its best epoch) got the full report.
    best = min((r for r in rows if r["best_metric"] is not None), key=lambda r: r["best_metric"])
    assert summary["best"]["trial"] == best["trial"] and summary["best"]["best_metric"] == best["best_metric"]
    assert best["best_metric"] == min(h["metric"] for r in rows for h in r["history"])
    assert summary["best_report"]["epoch"] == best["best_epoch"] and (scan_dir / "best" / "report" / "report.html").exists()
    assert (scan_dir / "metric_vs_epoch.png").stat().st_size > 0 and (scan_dir / "parallel_coordinates.png").stat().st_size > 0
    # the cluster's utilisation over the scan, every trial's workers told apart (trial/rank)
    assert summary["usage"]["samples"] >= 2 and (scan_dir / "usage.png").exists() and "usage: CPU" in text
    trials_seen = {w["rank"].split("/")[0] for line in (scan_dir / "usage.jsonl").read_text().splitlines() for w in json.loads(line)["workers"]}
    assert trials_seen and trials_seen <= {r["trial"] for r in rows}
    assert f"best trial {best['trial']}" in text and "stopped early (ASHA)" in text
    # The killed worker's trial restarted from its checkpoint and still ran every epoch it was due.
    log = (scan_dir / "job.log").read_text()
    resumed = [e for e in _events(log, "start") if e["resumed"]]
    assert resumed and resumed[0]["epoch"] >= 1, log[-3000:]
    trial = resumed[0]["run_id"].rsplit("-", 1)[-1]
    assert killed in [e["pid"] for e in _events(log, "start") if e["run_id"] == resumed[0]["run_id"]]  # the one killed
    (row,) = [r for r in rows if r["trial"] == trial]
    assert row["epochs_run"] >= resumed[0]["epoch"] and [h["epoch"] for h in row["history"]] == list(range(1, row["epochs_run"] + 1))
    # The report command shows the table; the cluster is gone and nothing is left running.
    report = subprocess.run([sys.executable, "-m", "burst.cli", "report", summary["scan_id"]], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=60)
    assert report.returncode == 0 and best["trial"] in report.stderr and report.stdout.strip().endswith("report.html")  # table: stderr, path: stdout
    status = json.loads(subprocess.run([sys.executable, "-m", "burst.cli", "status", "--json"], capture_output=True, text=True,
                                       env=env, cwd=tmp_path, timeout=60).stdout)
    assert status["clusters"] == [] and status["runs"][0]["state"] == "SUCCEEDED"
    census.assert_none_left(before)


@pytest.mark.slow
def test_the_budget_guard_stops_every_trial_of_a_scan(tmp_path, monkeypatch):
    """The guard's clock is injected (no waiting): the scan starts within budget, the next look
    finds it spent; every running trial checkpoints and stops, none is started after, the cluster
    is torn down, exit code 3."""
    from typer.testing import CliRunner

    from burst import cli
    from burst.lifecycle import budget

    home = tmp_path / "home"
    monkeypatch.setenv("BURST_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    before = census.snapshot()
    policy = tmp_path / "tight.yaml"
    policy.write_text("budget_usd: 1.3\nproviders: [local]\nlocal: {usd_per_hour: 36}\n")
    runner = CliRunner()
    up = runner.invoke(cli.app, ["up", "--provider", "local", "--name", "budget", "--cpus", "2", "--policy", str(policy), "--json"])
    assert up.exit_code == 0, up.output
    handle = json.loads((home / "clusters" / "budget.json").read_text())
    looks = []

    def clock() -> float:  # first look: just created; once a trial has trained: 56 s old, $0.56 + $0.75 reserve > $1.30
        looks.append(1)
        started = any((Path(handle["storage_uri"]) / "ray-train").glob("*/checkpoint_*"))
        return handle["created"] + (56 if started and len(looks) > 1 else 0)

    monkeypatch.setattr(budget, "now", clock)
    # the shipped example's knobs, at the batch the other end-to-end runs take (its 16 or 32 cost this
    # test 20 CPU-s, and a trial at batch 32 is no different a stop)
    space = tmp_path / "space.yaml"
    example = EXAMPLE.read_text()
    assert example.count("batch_per_replica: {choice: [16, 32]}") == 1
    space.write_text(example.replace("batch_per_replica: {choice: [16, 32]}", "batch_per_replica: 8"))
    result = runner.invoke(cli.app, ["tune", "gan3d", "--space", str(space), "--trials", "3", "--cluster", "budget",
                                     "--epochs", "200", "--steps", "6", "--synthetic", "400", "--val-events", "80"])
    assert result.exit_code == 3, result.output[-3000:]
    assert "budget guard: $0.56 of $1.30 spent; taking a final checkpoint" in " ".join(result.output.split())
    assert "torn down" in result.output and "did not stop in time" not in result.output
    assert not (home / "clusters" / "budget.json").exists()
    (record,) = [json.loads(p.read_text()) for p in (home / "runs").glob("*.json")]
    assert record["state"] == "STOPPED_BUDGET"
    rows = json.loads((Path(record["run_dir"]) / "trials.json").read_text())
    reasons = [r["stop_reason"] for r in rows]
    assert "stopped by the budget guard" in reasons, reasons  # ASHA may have stopped a trailing trial at epoch 1 first
    assert set(reasons) <= {"stopped by the budget guard", "not started (budget guard)", "stopped early (ASHA)"}, reasons
    assert all(r["epochs_run"] < 200 for r in rows)
    # no full validation of the best trial on a cluster over its budget: the table names it, nothing more ran
    summary = json.loads((Path(record["run_dir"]) / "scan.json").read_text())
    assert summary["budget_stopped"] is True and summary["best"]["trial"] and "best_report" not in summary
    assert not (Path(record["run_dir"]) / "best").exists()
    assert "Stopped by the budget guard: the best trial's checkpoint was not validated in full." in (Path(record["run_dir"]) / "report.html").read_text()
    assert "stopped by the budget guard, so its checkpoint is not validated in full" in " ".join(result.output.split())
    census.assert_none_left(before)


# --------------------------------------------------------------------------- the plan sizes the scan


def test_asha_trial_epochs_follow_the_rungs():
    from burst.placement.scan import ScanShape

    shape = ScanShape(trials=8, grace_period=1, reduction_factor=2)
    assert shape.rungs(6) == [1, 2, 4]
    # every trial 1 epoch, half of them 1 more, a quarter 2 more, an eighth the last 2: 2.25 epochs a trial
    assert shape.trial_epochs(6) == pytest.approx(8 * 2.25)
    assert ScanShape(trials=8, grace_period=6).trial_epochs(6) == 48  # no rung before the end: nothing saved
    assert shape.wall_epochs(6, at_once=8) == 6  # all at once: one full trial is the critical path
    assert shape.wall_epochs(6, at_once=1) == pytest.approx(18)


def test_plan_sizes_a_scan_and_states_the_asha_assumption(tmp_path):
    from burst import api
    from burst.placement.scan import ScanShape

    policy = tmp_path / "p.yaml"
    policy.write_text("objective: min_time\nproviders: [gcp, gcp-tpu]\nmax_slowdown: 1000\n")
    one = api.plan("gan3d", policy, epochs=6, provider="gcp", accelerator="V100", gpus=1)
    c1 = [c for c in one.candidates if c.count == 1 and not c.preemptible][0]
    few = api.plan("gan3d", policy, epochs=6, provider="gcp", accelerator="V100", scan=ScanShape(16, 1, 2))
    many = api.plan("gan3d", policy, epochs=6, provider="gcp", accelerator="V100", scan=ScanShape(16, 1, 8))
    pick = lambda p, spot: [c for c in p.candidates if c.region == c1.region and c.preemptible == spot][0]  # noqa: E731
    f, m = pick(few, False), pick(many, False)
    assert (f.count, m.count) == (2, 8)  # the cluster holds the trials that run at once
    assert f.estimate.epoch_s == pytest.approx(c1.estimate.epoch_s)  # the table's epoch is one trial's (one V100)
    trial_epochs = ScanShape(16, 1, 2).trial_epochs(6)
    assert f.estimate.training_h == pytest.approx(trial_epochs / 2 * c1.estimate.epoch_s / 3600)
    assert m.estimate.training_h == pytest.approx(max(6, trial_epochs / 8) * c1.estimate.epoch_s / 3600)
    assert m.estimate.training_h < f.estimate.training_h
    assert "ASHA (grace 1, reduction factor 2) assumed to train 36.0 of 96 trial-epochs" in few.scan
    assert not any(c.provider == "gcp-tpu" for c in few.candidates)  # a scan runs on a Ray cluster, not a TPU VM


def test_burst_plan_takes_a_scan_on_the_command_line(tmp_path):
    env = {**os.environ, "BURST_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "plan", "--trials", "16", "--gpus-per-trial", "2", "--max-concurrent", "4",
                           "--json"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    plan = json.loads(proc.stdout)
    assert plan["scan"].startswith("scan of 16 trial(s), 4 at a time on 2 device(s) each")
    assert plan["choice"]["count"] == 8
    bad = subprocess.run([sys.executable, "-m", "burst.cli", "plan", "--gpus-per-trial", "2"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert bad.returncode == 2 and "give --trials too" in bad.stderr


OPTUNA_SCRIPT = r'''
import json, sys, time
from pathlib import Path
import ray
from ray import tune
from burst import workloads
from burst.runtime import scan_space
from burst.runtime import storage
from burst.runtime.job import JobConfig, RunFiles, ScanConfig
from burst.runtime.scan import _search, asha

root = Path(sys.argv[1])
space = scan_space.load(Path(sys.argv[2]), workloads.get('gan3d'))
scan = ScanConfig(job=JobConfig(run_id="scan", storage=str(root), epochs=4), space=space.as_data(), trials=8, search="optuna", metric="optimisation_metric")

def trial(config):
    # a stand-in for the Ray Train run: reports like it, and stops itself like its workers when asked.
    # Its epochs take time, as a real run's minutes do: ASHA's answer to one epoch's result (a stop
    # request on the store) is there before the next epoch begins, even on a loaded machine (1.5 s,
    # then 4 s, were not always enough beside the suite's end-to-end runs: every trial ran out). A
    # trial asked to stop ends at once, as a real run's workers do at their next check; after the
    # last epoch nothing is asked (ASHA's trials end there on their own), so nothing is waited for.
    stop = RunFiles(str(root), f"scan-{tune.get_context().get_trial_id()}").stop_request
    for epoch in range(1, 5):
        tune.report({"epoch": epoch, "optimisation_metric": abs(config["learning_rate"] - 1e-3) * 1e3 + 1 / epoch})
        deadline = time.monotonic() + (10.0 if epoch < 4 else 0.0)
        while time.monotonic() < deadline:
            if storage.exists(stop):
                return
            time.sleep(0.1)

ray.init(address="local", num_cpus=2, include_dashboard=False)  # its own Ray, whatever else runs on the machine
grid = tune.Tuner(trial, param_space=space.to_ray(),
                  tune_config=tune.TuneConfig(metric="optimisation_metric", mode="min", search_alg=_search(scan, False),
                                              scheduler=asha(scan), num_samples=8, max_concurrent_trials=2),
                  run_config=tune.RunConfig(storage_path=str(root / "tune"), verbose=0)).fit()
epochs = sorted(int(r.metrics.get("epoch", 0)) for r in grid)
print(json.dumps({"searcher": type(_search(scan, False)).__name__, "epochs": epochs, "errors": sum(r.error is not None for r in grid)}))
'''


@pytest.mark.slow
def test_optuna_searches_the_space_and_asha_stops_trials_by_request(tmp_path):
    pytest.importorskip("optuna", reason="optuna not installed (pip install 'burst[optuna]')")
    script = tmp_path / "optuna_scan.py"
    script.write_text(OPTUNA_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path), str(EXAMPLE)], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[3])
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["searcher"] == "OptunaSearch" and result["errors"] == 0
    assert len(result["epochs"]) == 8 and result["epochs"][0] < 4 and result["epochs"][-1] == 4  # some stopped early, some ran out
