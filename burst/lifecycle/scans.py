"""Hyper-parameter scans (`burst tune`): check the request, submit the scan job, follow its trials
under the budget guard, collect the table, the plots and the best trial's report, record the scan.

The scan is one Ray job on the cluster (``burst.runtime.scan``) driving Ray Tune; every trial is a
Ray Train run of the workload, like `burst train`. The scan is recorded like a run (a ``RunRecord``
of ``kind`` "scan"), so `burst status`, `burst logs` and `burst report` know it. This module builds
on ``burst.lifecycle.runs`` (its request checks, job follower and budget watch); ``runs`` knows nothing of scans.
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, ValidationError

from ..home import state
from .. import targets, workloads
from ..errors import BurstError
from ..home.records import read_json, write_json_atomic, write_text_atomic
from ..runtime import notice
from .rundir import RunDirectory
from ..runtime.job import DEFAULT_SYNTHETIC_EVENTS, JobConfig, ScanConfig, TrainSettings, TrialEvent, parse_events
from ..home.state import ClusterHandle, RunRecord
from ..targets.base import QUIET, JobResources, Reporter

SCAN_FILES = ("trials.json", "trials.csv", "scan.json", "metric_vs_epoch.png", "parallel_coordinates.png", "best", "job_provenance.json",
              "usage.jsonl", "usage.png")


class TuneRequest(TrainSettings):
    """One scan as asked for: how every trial trains (``TrainSettings``, as ``burst train`` takes
    them) and how the scan samples, judges and stops its trials."""

    space: dict = Field(description="the search space (burst.runtime.scan_space data)")
    space_file: str = ""
    trials: int = Field(8, gt=0, description="trials to sample (a grid dimension multiplies them)")
    gpus_per_trial: Optional[int] = Field(None, gt=0, description="GPUs each trial trains on (default 1 on a GPU cluster; CPU clusters: leave out)")
    max_concurrent: Optional[int] = Field(None, gt=0, description="trials at a time (default: as many as the cluster holds)")
    metric: str = Field("", description="physics metric to minimise, computed on held-out MC after every epoch (default: the workload's first)")
    data: Optional[str] = Field(None, description="directory of CERN HDF5 files (or converted TFRecords), or a bucket URI")
    synthetic: Optional[int] = Field(None, gt=0, description="train on this many synthetic Monte Carlo events (default 3000)")
    grace_period: int = Field(1, gt=0, description="ASHA: epochs every trial gets before it may be stopped")
    reduction_factor: int = Field(2, gt=1, description="ASHA: 1 in this many trials goes on at each rung")
    search: Literal["random", "optuna"] = Field("random", description="random (grid dimensions expanded) | optuna (pip install 'burst[optuna]')")
    cluster: str = Field("local", description="the running cluster to scan on")
    budget_usd: Optional[float] = Field(None, gt=0, allow_inf_nan=False, description="stop every trial (each checkpoints) before this many USD are spent")
    detach: bool = Field(False, description="submit and return")
    cancel_on_interrupt: bool = Field(False, description="Ctrl-C stops every trial instead of detaching")

    @property
    def total_trials(self) -> int:
        """Trials the scan runs: ``trials`` samples of the space, times every grid combination."""
        from ..runtime.scan_space import SearchSpace

        return self.trials * SearchSpace.from_data(self.space).grid_size()

    @classmethod
    def of(cls, space_file: Path | str, **fields) -> "TuneRequest":
        """A request from flags and a space file; one line for the first thing wrong."""
        from ..runtime import scan_space

        workload = workloads.get(fields.setdefault("workload", workloads.DEFAULT))
        preset = fields["preset"] = fields.get("preset") or workload.default_preset
        try:
            workload.check_preset(preset)
        except ValueError as exc:
            raise BurstError(str(exc)) from None
        metric = fields["metric"] = fields.get("metric") or workload.default_metric
        if metric not in workload.epoch_metrics:
            raise BurstError(f"--metric {metric}: a scan of {workload.name} minimises one of {', '.join(workload.epoch_metrics)}")
        space = scan_space.load(Path(space_file), workload, preset)
        if fields.get("search") == "optuna" and space.grid_size() > 1:
            raise BurstError(f"{space_file}: Optuna samples every knob; use choice instead of grid")
        try:
            request = cls(space=space.as_data(), space_file=str(space_file), **fields)
        except ValidationError as exc:
            from .runs import flag_error

            raise BurstError(flag_error(exc)) from None
        from .runs import check_data

        check_data(request.data, request.synthetic)
        state.check_name(request.cluster)
        return request


def new_scan_id(workload: str) -> str:
    import uuid

    return f"tune-{workload}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def trial_resources(handle: ClusterHandle, gpus_per_trial: Optional[int]) -> tuple[JobResources, int]:
    """How one trial is spread (Ray Train workers of a trial) and how many trials fit at once.

    GPUs: a trial of G GPUs is one worker owning them when G fits on a node, else one worker per
    node. CPUs only: a trial is one worker of one CPU, with that many TensorFlow threads; trials
    run side by side on the cluster's CPUs.
    """
    cpus = int(handle.layout.get("cpus", 1))
    gpus = int(handle.layout.get("gpus", 0))
    if gpus:
        per_trial = gpus_per_trial or 1
        if per_trial > gpus:
            raise BurstError(f"--gpus-per-trial {per_trial}: cluster {handle.name!r} has {gpus} GPU(s)")
        nodes = max(1, int(handle.layout.get("nodes", 1)))
        per_node = max(1, gpus // nodes)
        workers = 1 if per_trial <= per_node else -(-per_trial // per_node)
        if per_trial % workers:
            raise BurstError(f"--gpus-per-trial {per_trial} does not split evenly over nodes of {per_node} GPU(s)")
        fits = gpus // per_trial
        cpu_share = max(1, (cpus - 1) // max(1, fits * workers))
        return JobResources(workers=workers, cpus_per_worker=cpu_share, gpus_per_worker=per_trial // workers, threads=None), fits
    if gpus_per_trial:
        raise BurstError(f"--gpus-per-trial: cluster {handle.name!r} has no GPUs; its trials run on CPUs (leave the flag out)")
    return JobResources(workers=1, cpus_per_worker=1, threads=1), max(1, cpus)


def tune(request: TuneRequest, report: Reporter = QUIET) -> RunRecord:
    """Run a scan on a running cluster; the finished scan's record (or, with ``detach``, the submitted one)."""
    from .runs import cluster

    handle = cluster(request.cluster)
    target = targets.get(handle.provider)
    if not target.is_alive(handle):
        raise BurstError(target.not_ready(handle), exit_code=1)
    with target.reach(handle) as reachable:
        return _tune_on(target, reachable, request, report)


def _tune_on(target, handle: ClusterHandle, request: TuneRequest, report: Reporter) -> RunRecord:
    from .runs import budget_watch, interrupted
    from ..client import jobs
    from .budget import BudgetGuard

    resources, fits = trial_resources(handle, request.gpus_per_trial)
    if target.job_resources(handle, 1).tpu:
        raise BurstError("burst tune runs on Ray clusters of CPUs or GPUs; a TPU VM trains one job per slice (`burst train`)")
    resources.runs_precision(request.precision, handle.name)
    total = request.total_trials
    concurrent = min(total, request.max_concurrent or fits, fits)
    scan_id = new_scan_id(request.workload)
    data = target.stage_data(handle, request.data, scan_id, report) if request.data is not None else None
    job = JobConfig(**{f: getattr(request, f) for f in TrainSettings.model_fields}, run_id=scan_id, storage=target.job_storage(handle),
                    data=target.job_path(handle, data) if data else None, synthetic=None if data else (request.synthetic or DEFAULT_SYNTHETIC_EVENTS), workers=resources.workers,
                    cpus_per_worker=resources.cpus_per_worker, gpus_per_worker=resources.gpus_per_worker, threads=resources.threads,
                    notices=notice.root(target.job_storage(handle), handle.cluster_id), hourly_usd=float(handle.hourly_usd))
    scan = ScanConfig(job=job, space=request.space, trials=request.trials, metric=request.metric, concurrent=concurrent,
                      grace_period=request.grace_period, reduction_factor=request.reduction_factor, search=request.search)
    record = RunRecord(run_id=scan_id, kind="scan", workload=request.workload, cluster=handle.name, provider=handle.provider,
                       hourly_usd=handle.hourly_usd, storage_uri=handle.storage_uri,
                       config={**request.model_dump(mode="json", exclude={"detach", "cancel_on_interrupt"}),
                               "concurrent": concurrent, "trial_workers": resources.workers, "total_trials": total})
    guard = BudgetGuard.for_cluster(handle, request.budget_usd)
    if guard is not None:
        guard.check_can_start()
    jobs.submit(handle, record, scan, target.job_runtime(handle), module="burst.runtime.scan")
    report.say(f"scan {scan_id}: {total} trial(s), {concurrent} at a time, {request.epochs} epoch(s) each, "
               f"minimising {request.metric}; its log: `burst logs {scan_id}`")
    if request.detach:
        report.say(f"detached; follow with `burst logs {scan_id} --follow`, see the trials with `burst status`")
        return record
    tracker = ScanTracker(total)

    def on_event(event) -> None:
        line = tracker.record(event)
        if line:
            report.say(line)
        record.progress = tracker.snapshot()

    try:
        status = jobs.follow(handle, record, on_event, on_poll=budget_watch(guard, handle, record, report, " (every trial)"))
    except KeyboardInterrupt:
        interrupted(handle, record, request.cancel_on_interrupt, report, cancelled=f"scan {scan_id} cancelled: every trial stopped", what="scan")
        raise
    return _finish(record, handle, status, tracker, guard, jobs.client(handle).get_job_logs(record.job_id), target, report)


def _finish(record: RunRecord, handle: ClusterHandle, status: str, tracker: "ScanTracker", guard, log: str, target, report: Reporter) -> RunRecord:
    record.state = status
    record.finished = time.time()
    record.progress = tracker.snapshot()
    stopped = guard is not None and guard.requested_at is not None
    if status == "SUCCEEDED":
        publish(handle, record, log)
    else:
        RunDirectory(record.run_id).save_log(log)
        record.message = tracker.failure or f"job ended {status}; see `burst logs {record.run_id}`"
    if stopped:
        record.state = "STOPPED_BUDGET"
        record.message = f"stopped by the budget guard: ${guard.accrued():,.2f} of ${guard.budget_usd:,.2f} spent; every trial checkpointed and stopped"
    with state.locked():
        state.save(record)
    if stopped:
        target.down(handle, report)
        raise BurstError(f"scan {record.run_id} {record.message}; cluster {handle.name!r} torn down"
                         + (f"; results so far: {record.run_dir}/report.html" if record.run_dir else ""), exit_code=3)
    if status != "SUCCEEDED":
        raise BurstError(f"scan {record.run_id} {status.lower()}: {record.message}", exit_code=1)
    return record


class ScanTracker:
    """What a scan's trial events say: each trial's state, epochs and best metric so far."""

    def __init__(self, trials: int):
        self.trials = trials
        self.state: dict[str, str] = {}
        self.best: dict[str, float] = {}
        self.epochs: dict[str, int] = {}
        self.failure: Optional[str] = None

    def record(self, event) -> Optional[str]:
        from ..runtime.job import FailedEvent, StatusEvent, UsageEvent

        if isinstance(event, UsageEvent):
            return f"usage: {event.line()}"
        if isinstance(event, FailedEvent):
            self.failure = event.message
            return f"failed: {event.message}"
        if isinstance(event, StatusEvent):
            return event.message
        if not isinstance(event, TrialEvent):
            return None
        t = event.trial
        if event.state == "RUNNING" and event.epoch is None:
            self.state[t] = "RUNNING"
            knobs = ", ".join(f"{k}={_fmt(v)}" for k, v in event.config.items())
            return f"trial {t} started: {knobs}"
        if event.epoch is not None and event.metric is not None:
            self.epochs[t] = event.epoch
            self.best[t] = min(self.best.get(t, event.metric), event.metric)
            return f"trial {t} epoch {event.epoch}: {event.metric:.4g}"
        self.state[t] = event.state
        return f"trial {t} {event.state.lower()}" + (f": {event.message}" if event.message else "")

    def snapshot(self) -> dict:
        running = sum(s == "RUNNING" for s in self.state.values())
        ended = sum(s in ("TERMINATED", "ERROR") for s in self.state.values())
        return {"kind": "scan", "trials": self.trials, "running": running, "terminated": ended,
                "pending": max(0, self.trials - running - ended), "best": min(self.best.values()) if self.best else None}


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def publish(handle: ClusterHandle, record: RunRecord, log: str) -> None:
    """A finished scan's directory here: its job log, its results from the cluster, its report."""
    run_dir = RunDirectory(record.run_id)
    run_dir.save_log(log)
    collect(handle, record, run_dir.path)
    record.run_dir = str(run_dir.path.resolve())
    write_report(run_dir.path, record)


def collect(handle: ClusterHandle, record: RunRecord, dest: Path) -> None:
    """Copy the scan's results from the cluster's storage to ``burst-runs/<scan-id>/``, add the cost."""
    from ..runtime import storage
    from ..runtime.job import RunFiles

    src = RunFiles(handle.storage_uri, record.run_id).run_dir
    if not storage.exists(src):
        raise BurstError(f"scan {record.run_id}: the cluster storage holds no results at {src}", exit_code=1)
    dest.mkdir(parents=True, exist_ok=True)
    for item in SCAN_FILES:
        if item == "best":
            if storage.exists(storage.join(src, "best", "report")):
                storage.copy(storage.join(src, "best", "report"), str(dest / "best" / "report"))
                write_text_atomic(dest / "best" / "checkpoint_uri.txt", storage.join(src, "best", "checkpoint") + "\n")
        elif storage.exists(storage.join(src, item)):
            storage.copy(storage.join(src, item), str(dest / item))
    hours = max(0.0, (record.finished or time.time()) - record.created) / 3600
    cost = record.hourly_usd * hours
    summary, rows = load(dest)
    total_s = sum(r["compute_s"] for r in rows) or 1.0
    for r in rows:
        r["cost_usd"] = round(cost * r["compute_s"] / total_s, 4)
    write_json_atomic(dest / "trials.json", rows, indent=1)
    summary.update({"cost_usd": round(cost, 4), "hours": round(hours, 4), "hourly_usd": record.hourly_usd})
    write_json_atomic(dest / "scan.json", summary, indent=1)


def load(run_dir: Path) -> tuple[dict, list[dict]]:
    return read_json(run_dir / "scan.json", "scan summary"), read_json(run_dir / "trials.json", "scan trials")


def _report_metrics(summary: dict) -> tuple[str, ...]:
    """The metrics a scan's best trial is summed up by: its workload's (an older scan.json names none)."""
    return workloads.get(summary.get("workload", workloads.DEFAULT)).report_metrics


def table_lines(run_dir: Path) -> list[str]:
    """The trials as text, best first, and the best trial's full validation."""
    summary, rows = load(run_dir)
    metric = summary["metric"]
    lines = [f"scan {summary['scan_id']}: {summary['trials']} trial(s), {summary['stopped_early']} stopped early by ASHA, "
             f"{summary['wall_s']:.0f} s in the job" + (f", ${summary['cost_usd']:,.4f}" if "cost_usd" in summary else "")
             + ("; stopped by the budget guard" if summary.get("budget_stopped") else "")]
    lines.append(f"{'trial':<14}{'best ' + metric:>26}{'epoch':>7}{'epochs':>8}  {'stop reason':<30} knobs")
    for r in rows:
        best = f"{r['best_metric']:.4g}" if r["best_metric"] is not None else "-"
        knobs = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(r["config"].items()))
        lines.append(f"{r['trial']:<14}{best:>26}{str(r['best_epoch'] or '-'):>7}{r['epochs_run']:>8}  {r['stop_reason']:<30} {knobs}")
    best_report = summary.get("best_report") or {}
    if best_report.get("summary"):
        s = best_report["summary"]
        lines.append(f"best trial {best_report['trial']} (epoch {best_report['epoch']}) on {s['events']} held-out events: "
                     + ", ".join(f"{k} {s[k]:.4g}" for k in _report_metrics(summary) if k in s))
    return lines


def write_report(run_dir: Path, record: RunRecord) -> Path:
    """``report.html`` of the scan: the table, both plots, a link to the best trial's full report."""
    summary, rows = load(run_dir)
    metric = summary["metric"]
    knobs = sorted({k for r in rows for k in r["config"]})
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ["trial", *knobs, "epochs run", f"best {metric}", "at epoch", "stop reason", "cost $"])
    body = []
    for r in rows:
        cells = [r["trial"], *[_fmt(r["config"].get(k, "")) for k in knobs], r["epochs_run"],
                 f"{r['best_metric']:.4g}" if r["best_metric"] is not None else "-", r["best_epoch"] or "-", r["stop_reason"], f"{r.get('cost_usd', 0):.4f}"]
        body.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    best = summary.get("best_report") or {}
    if (run_dir / "best" / "report" / "report.html").exists():
        link = '<p>Best trial\'s full validation (its checkpoint at its best epoch): <a href="best/report/report.html">best/report/report.html</a></p>'
    elif summary.get("budget_stopped"):
        link = "<p>Stopped by the budget guard: the best trial's checkpoint was not validated in full.</p>"
    else:
        link = "<p>No trial produced a usable checkpoint.</p>"
    text = (f"<html><head><meta charset='utf-8'><title>{record.run_id}</title></head><body><h1>burst tune {html.escape(record.run_id)}</h1>"
            f"<p>{html.escape(table_lines(run_dir)[0])}</p>"
            f"<p>Objective: {html.escape(metric)} on held-out Monte Carlo after every epoch (lower is better); ASHA grace "
            f"{summary['asha']['grace_period']} epoch(s), reduction factor {summary['asha']['reduction_factor']}; search {summary['search']}.</p>"
            f"<table border=1 cellpadding=3><tr>{head}</tr>{''.join(body)}</table>{link}"
            + (f"<p>{html.escape(table_lines(run_dir)[-1])}</p>" if best.get("summary") else "")
            + "<img src='metric_vs_epoch.png'><br><img src='parallel_coordinates.png'></body></html>")
    path = run_dir / "report.html"
    write_text_atomic(path, text)
    return path


def refresh(record: RunRecord, handles: dict[str, ClusterHandle], reached: bool = False) -> RunRecord:
    """A scan that is not finished yet as its cluster says it is now: its state, and its trials from its events."""
    from .runs import job_client

    c = job_client(record, handles, reached)
    if c is None:
        return record
    tracker = ScanTracker(int(record.config.get("total_trials", record.config.get("trials", 1))))
    for event in parse_events(c.get_job_logs(record.job_id)):
        tracker.record(event)
    record.progress = tracker.snapshot()
    return record


def collect_finished(record: RunRecord, handle: Optional[ClusterHandle] = None) -> RunRecord:
    """Fetch the results of a scan that succeeded while nothing followed it; ``handle``: its
    cluster as reached from here (default: as recorded)."""
    from .runs import succeeded_on
    from ..client import jobs

    record, handle = succeeded_on(record, handle, refresh)
    if handle is None:
        return record
    record.finished = record.finished or time.time()
    publish(handle, record, jobs.client(handle).get_job_logs(record.job_id))
    with state.locked():
        state.save(record)
    return record
