"""The Ray job behind `burst tune`: ``python -m burst.runtime.scan SCAN_CONFIG_JSON``.

Prepares the data once, then hands the scan to Ray Tune: each trial is the same Ray Train
run as `burst train` (same loop, checkpoints and worker restarts), with the
trial's knobs, judged on held-out Monte Carlo after every epoch. ASHA stops the trials that trail
at each rung; the search is Ray Tune's (random/grid, or Optuna). The budget guard's stop request
is one file for the whole scan: running trials checkpoint and end, trials not started yet end at
once. At the end the job writes the trials' table, the plots, and the best trial's checkpoint and
full validation report under ``<storage>/runs/<scan-id>/``.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ..home.records import write_json_atomic
from . import usage
from .job import ASHA_REQUEST, DoneEvent, JobConfig, RunFiles, ScanConfig, StatusEvent, TrialEvent, emit
from .usage import USAGE_LOG, UsageSampler

TRIAL_DRIVER_MEMORY = 64 << 20  # bytes of Ray's "memory" resource a trial's driver actor reserves
TRIALS_JSON = "trials.json"
TRIALS_CSV = "trials.csv"
SCAN_JSON = "scan.json"


def trial_config(scan: ScanConfig, trial_id: str, knobs: dict) -> JobConfig:
    """The job of one trial: the scan's, with the trial's knobs, its own run name and the scan's stop file."""
    knobs = dict(knobs)
    batch = knobs.pop("batch_per_replica", scan.job.batch_per_replica)
    run_id = f"{scan.scan_id}-{trial_id}"
    return scan.job.model_copy(update={
        "run_id": run_id, "batch_per_replica": batch, "overrides": knobs, "validate_each_epoch": True,
        "stop_files": (RunFiles(scan.job.storage, scan.scan_id).stop_request, RunFiles(scan.job.storage, run_id).stop_request)})


def run_trial(knobs: dict, scan_arg: str) -> None:
    """One trial (runs in Ray Tune's trial actor): a Ray Train run whose reports reach Tune."""
    import ray.tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from . import ray_train, storage

    scan = ScanConfig.from_arg(scan_arg)
    cfg = trial_config(scan, ray.tune.get_context().get_trial_id(), knobs)
    if storage.exists(cfg.stop_files[0]):
        return  # the budget guard stopped the scan before this trial began
    trainer = ray_train.tensorflow_trainer(cfg, RunFiles(cfg.storage, cfg.run_id).ray_train_root, callbacks=(TuneReportCallback(),),
                                           keep_best=scan.metric)
    try:
        trainer.fit()
    finally:
        shutil.rmtree(ray_train.node_scratch_dir(cfg.run_id), ignore_errors=True)


def asha(scan: ScanConfig):
    """Ray Tune's ASHA deciding, the trial stopping itself.

    Tune would end a trial ASHA stops by killing its actor, which leaves the trial's Ray Train
    run to be torn down from outside (seen here: its workers' CPUs stayed reserved and the next
    trials waited for them). Instead, a trial ASHA stops is asked to stop like the budget guard
    asks a run: its workers checkpoint at their next check and end, and the trial ends with them.
    """
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    class ASHAByRequest(ASHAScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            action = super().on_trial_result(tune_controller, trial, result)
            if action == TrialScheduler.STOP and result.get("epoch", 0) < scan.job.epochs:
                RunFiles(scan.job.storage, f"{scan.scan_id}-{trial.trial_id}").ask_to_stop(ASHA_REQUEST)
            return TrialScheduler.CONTINUE if action == TrialScheduler.STOP else action  # at the last epoch it ends on its own

    return ASHAByRequest(time_attr="epoch", max_t=scan.job.epochs, grace_period=min(scan.grace_period, scan.job.epochs),
                         reduction_factor=scan.reduction_factor)


def _trial_events(metric: str):
    """A Ray Tune callback that says what every trial does, as events the submitting side follows."""
    from ray import tune

    class TrialEvents(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            emit(TrialEvent(trial=trial.trial_id, state="RUNNING", config=trial.config))

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if result.get(metric) is not None:
                emit(TrialEvent(trial=trial.trial_id, state="RUNNING", epoch=result.get("epoch"), metric=result[metric]))

        def on_trial_complete(self, iteration, trials, trial, **info):
            emit(TrialEvent(trial=trial.trial_id, state="TERMINATED"))

        def on_trial_error(self, iteration, trials, trial, **info):
            emit(TrialEvent(trial=trial.trial_id, state="ERROR", message=str(getattr(trial, "error_file", "") or "")))

    return TrialEvents()


def _search(scan: ScanConfig, has_grid: bool):
    if scan.search == "random":
        return None  # Ray Tune's BasicVariantGenerator: random sampling, grid dimensions expanded
    if has_grid:
        raise ValueError("Optuna samples every dimension; replace the grid dimensions with choice")
    try:
        from ray.tune.search.optuna import OptunaSearch

        return OptunaSearch()
    except (ImportError, AssertionError):
        raise ValueError("--search optuna needs Optuna on the cluster: pip install 'burst[optuna]'") from None


def run(scan: ScanConfig) -> int:
    import os

    # A budget-stopped trial's last report has no metric; Tune would take that for a misspelt metric.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    import ray
    from ray import tune

    from burst.runtime.scan_space import Grid, SearchSpace

    from . import storage
    from .entry import publish, stage_inputs
    from .ray_train import ray_train_storage

    started = time.time()
    job, storage_dir, train_files, test_files = stage_inputs(scan.job, with_test_files=True)
    scan = scan.model_copy(update={"job": job})
    space = SearchSpace.from_data(scan.space)
    search = _search(scan, any(isinstance(d, Grid) for d in space.knobs.values()))
    ray.init(address="auto", log_to_driver=True)
    emit(StatusEvent(message=f"scanning {scan.trials * space.grid_size()} trial(s), {scan.concurrent} at a time, minimising {scan.metric}; ASHA grace "
                             f"{scan.grace_period} epoch(s), reduction factor {scan.reduction_factor}"))
    scheduler = asha(scan)
    # The trial's own actor only starts and waits on its Ray Train run: it holds no CPU (its workers
    # do), but Tune needs it to ask for something, so it asks for a little memory.
    trainable = tune.with_resources(tune.with_parameters(run_trial, scan_arg=scan.to_arg()), {"CPU": 0, "memory": TRIAL_DRIVER_MEMORY})
    tuner = tune.Tuner(
        trainable, param_space=space.to_ray(),
        tune_config=tune.TuneConfig(metric=scan.metric, mode="min", scheduler=scheduler, search_alg=search, num_samples=scan.trials,
                                    max_concurrent_trials=scan.concurrent, trial_dirname_creator=lambda trial: trial.trial_id,
                                    reuse_actors=False),
        run_config=tune.RunConfig(name=scan.scan_id, **ray_train_storage(f"{job.storage.rstrip('/')}/ray-tune"),
                                  callbacks=[_trial_events(scan.metric)], verbose=0),
    )
    out_dir = storage_dir / "runs" / scan.scan_id
    out_dir.mkdir(parents=True, exist_ok=True)
    with UsageSampler(scan.scan_id, out_dir / USAGE_LOG, job.hourly_usd, paid_for=usage.pays_for(job.tpu, job.gpus_per_worker)):  # every node, and every trial's workers
        grid = tuner.fit()
    stopped = storage.exists(RunFiles(job.storage, scan.scan_id).stop_request)
    rows = trial_rows(grid, scan, stopped)
    usage_rows = usage.read_log(out_dir / USAGE_LOG)
    best = best_trial(rows)
    summary = {"scan_id": scan.scan_id, "workload": job.workload, "metric": scan.metric, "trials": len(rows), "epochs": job.epochs, "space": scan.space,
               "stopped_early": sum(r["stop_reason"] == "stopped early (ASHA)" for r in rows), "budget_stopped": stopped,
               "best": best, "wall_s": round(time.time() - started, 1),
               "asha": {"grace_period": scan.grace_period, "reduction_factor": scan.reduction_factor}, "search": scan.search,
               "usage": usage.summarise(usage_rows, [], job.hourly_usd, usage.pays_for(job.tpu, job.gpus_per_worker))}
    usage.figure(usage_rows, out_dir / "usage.png")
    if best is not None:
        found = f"best trial {best['trial']}: {scan.metric} {best['best_metric']:.4g} at epoch {best['best_epoch']}; "
        if stopped:
            # The budget guard left the job time for a checkpoint and the tear-down, not for a full
            # validation (a TensorFlow start, thousands of showers, the figures): past that reserve it
            # stops the job hard, and any more is money the budget does not have.
            emit(StatusEvent(message=found + "stopped by the budget guard, so its checkpoint is not validated in full on this cluster"))
        else:
            emit(StatusEvent(message=found + "validating its checkpoint against held-out Monte Carlo"))
            summary["best_report"] = _best_report(scan, best, out_dir, test_files)
    write_results(out_dir, rows, summary)
    publish(out_dir, job)
    emit(DoneEvent(run_dir=str(out_dir), stopped=stopped, summary={k: summary[k] for k in ("trials", "stopped_early", "best")}))
    return 0


def trial_rows(grid, scan: ScanConfig, budget_stopped: bool) -> list[dict]:
    """One row per trial: its knobs, epochs run, best and last metric, why it ended, compute seconds."""
    from . import storage

    rows = []
    for result in grid:
        df = result.metrics_dataframe
        history = [] if df is None or scan.metric not in df else [
            {"epoch": int(e), "metric": float(m), **({"checkpoint": c} if isinstance(c, str) else {})}
            for e, m, c in zip(df["epoch"], df[scan.metric], df.get("checkpoint_path", [None] * len(df))) if m == m]
        metrics = result.metrics or {}
        trial_id = metrics.get("trial_id") or Path(result.path).name  # the trial's directory is named by its id
        history = _checkpointed_history(trial_config(scan, trial_id, result.config or {}), scan.metric, history)
        epochs_run = max((h["epoch"] for h in history), default=0)
        if result.error is not None:
            reason = "failed: " + str(result.error).strip().splitlines()[0][:200]
        elif epochs_run >= scan.job.epochs:
            reason = "completed"
        elif storage.exists(RunFiles(scan.job.storage, f"{scan.scan_id}-{trial_id}").stop_request):
            reason = "stopped early (ASHA)"
        elif budget_stopped:
            reason = "stopped by the budget guard" if history or metrics.get("stopped") else "not started (budget guard)"
        else:
            reason = "ended before its first epoch"
        best = min(history, key=lambda h: h["metric"], default=None)
        rows.append({"trial": trial_id, "config": result.config or {}, "epochs_run": epochs_run,
                     "best_metric": best["metric"] if best else None, "best_epoch": best["epoch"] if best else None,
                     "last_metric": history[-1]["metric"] if history else None, "stop_reason": reason,
                     "compute_s": round(float(metrics.get("time_total_s") or 0.0), 1), "history": history})
    rows.sort(key=lambda r: (r["best_metric"] is None, r["best_metric"] if r["best_metric"] is not None else 0.0))
    return rows


def _checkpointed_history(cfg: JobConfig, metric: str, reported: list[dict]) -> list[dict]:
    """A trial's per-epoch metric from its newest checkpoint when that holds more epochs than Tune
    heard of (a worker lost between its checkpoint and its report: Ray Train resumes from the
    checkpoint, and that epoch's report never reaches Tune); else what Tune heard."""
    from .training import checkpoints_on_storage
    from .training import latest_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        newest = latest_checkpoint(checkpoints_on_storage(cfg, Path(tmp)))
        if newest is None:
            return reported
        saved = [h for h in json.loads((newest / "history.json").read_text())["history"] if metric in h]
    if len(saved) <= len(reported):
        return reported
    paths = {h["epoch"]: h["checkpoint"] for h in reported if "checkpoint" in h}
    return [{"epoch": int(h["epoch"]), "metric": float(h[metric]), **({"checkpoint": paths[h["epoch"]]} if h["epoch"] in paths else {})}
            for h in saved]


def best_trial(rows: list[dict]) -> dict | None:
    scored = [r for r in rows if r["best_metric"] is not None and math.isfinite(r["best_metric"])]
    return min(scored, key=lambda r: r["best_metric"]) if scored else None


def _best_report(scan: ScanConfig, best: dict, out_dir: Path, test_files: list[Path]) -> dict:
    """Copy the best trial's best checkpoint next to the results and validate it in full."""
    from .. import workloads
    from . import storage
    from .training import epochs_in

    from .training import checkpoints_on_storage

    cfg = trial_config(scan, best["trial"], best["config"])
    dest = out_dir / "best" / "checkpoint"
    shutil.rmtree(dest, ignore_errors=True)
    source = None
    with tempfile.TemporaryDirectory() as tmp:
        stored = checkpoints_on_storage(cfg, Path(tmp))  # a bucket's copied here
        # Tune's own record names the checkpoint where it is (a bucket URI too); the store's listing follows
        at_best = [h["checkpoint"] for h in best["history"] if h["epoch"] == best["best_epoch"] and "checkpoint" in h]
        at_best += [str(c) for c in stored if epochs_in(c) == best["best_epoch"]]
        for candidate in at_best:
            if storage.exists(storage.join(candidate, "history.json")):
                storage.copy_dir(candidate, str(dest))
                source = candidate
                break
        if source is None:  # kept checkpoints are the best and the newest; fall back to the newest
            from .training import latest_checkpoint

            newest = latest_checkpoint(stored)
            if newest is None:
                return {"error": "the best trial left no checkpoint"}
            shutil.copytree(newest, dest)
            source = str(newest)
    metrics = workloads.get(cfg.workload).validate(dest, test_files, out_dir / "best" / "report", events=scan.report_events, seed=scan.job.seed,
                                extra={"scan": scan.scan_id, "trial": best["trial"], "knobs": json.dumps(best["config"])}, gate=scan.job.gate)
    return {"trial": best["trial"], "epoch": epochs_in(dest), "checkpoint": source, "summary": metrics["summary"]}


def write_results(out_dir: Path, rows: list[dict], summary: dict) -> None:
    """trials.json, trials.csv, scan.json and the two plots."""
    write_json_atomic(out_dir / TRIALS_JSON, rows, indent=1)
    write_json_atomic(out_dir / SCAN_JSON, summary, indent=1)
    knobs = sorted({k for r in rows for k in r["config"]})
    with open(out_dir / TRIALS_CSV, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["trial", *knobs, "epochs_run", "best_metric", "best_epoch", "last_metric", "stop_reason", "compute_s"])
        for r in rows:
            w.writerow([r["trial"], *[json.dumps(r["config"].get(k)) for k in knobs], r["epochs_run"], r["best_metric"], r["best_epoch"],
                        r["last_metric"], r["stop_reason"], r["compute_s"]])
    plot_scan(rows, summary["metric"], out_dir)


def plot_scan(rows: list[dict], metric: str, out_dir: Path) -> list[Path]:
    """Parallel coordinates of the knobs coloured by the best metric, and the metric against epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    scored = [r for r in rows if r["best_metric"] is not None]
    paths = []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in rows:
        if r["history"]:
            ax.plot([h["epoch"] for h in r["history"]], [h["metric"] for h in r["history"]], marker="o", ms=3,
                    label=f"{r['trial']} ({r['stop_reason']})")
    ax.set_xlabel("epoch")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel(metric)
    if scored and min(r["best_metric"] for r in scored) > 0:
        ax.set_yscale("log")
    ax.set_title(f"{metric} on held-out Monte Carlo after each epoch")
    if len(rows) <= 12:
        ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out_dir / "metric_vs_epoch.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    knobs = sorted({k for r in scored for k, v in r["config"].items() if isinstance(v, (int, float, list))})
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * (len(knobs) + 1)), 4.5))
    if scored and knobs:
        columns = knobs + [metric]

        def value(r, k):
            v = r["best_metric"] if k == metric else r["config"].get(k)
            return float(sum(v)) if isinstance(v, list) else float(v)  # a width list: its total

        table = np.array([[value(r, k) for k in columns] for r in scored])
        lo, hi = table.min(0), table.max(0)
        norm = (table - lo) / np.where(hi > lo, hi - lo, 1.0)
        best_m = table[:, -1]
        colours = plt.cm.viridis((best_m - best_m.min()) / (np.ptp(best_m) or 1.0))
        for row, colour in zip(norm, colours):
            ax.plot(range(len(columns)), row, color=colour, alpha=0.8)
        ax.set_xticks(range(len(columns)), [c if c != metric else f"{metric}\n(best)" for c in columns], rotation=20, fontsize=8)
        for i in range(len(columns)):
            ax.annotate(f"{lo[i]:.3g}", (i, 0), fontsize=7, ha="center", va="top")
            ax.annotate(f"{hi[i]:.3g}", (i, 1), fontsize=7, ha="center", va="bottom")
        ax.set_yticks([])
        ax.set_title("each trial's knobs (scaled to their range);\ncolour: its best metric (dark = best)", fontsize=10)
    fig.tight_layout()
    paths.append(out_dir / "parallel_coordinates.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def main() -> int:
    from .entry import reported

    return reported(run, ScanConfig.from_arg(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
