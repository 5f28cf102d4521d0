"""A run's directory on this machine (``burst-runs/<run-id>/``): what it holds and who writes it.

The job publishes its results to the cluster's storage; ``collect`` copies them here, and this
side adds what only it knows: the job's full log, the cost, and the provenance (versions, the
target, timings from submission to the first step).
"""

from __future__ import annotations

import json
import platform
import statistics
from pathlib import Path
from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, Field

from .. import __version__
from ..errors import BurstError
from ..home.records import read_json, write_json_atomic, write_text_atomic
from ..home.state import ClusterHandle, RunRecord

RUNS_ROOT = Path("burst-runs")


def report_page(record: RunRecord) -> Optional[Path]:
    """Where a run's (or a scan's) HTML report is once collected: a scan's at its run directory's
    top, a run's under ``report/``; None while the record names no run directory."""
    if not record.run_dir:
        return None
    return Path(record.run_dir) / ("report.html" if record.kind == "scan" else "report/report.html")


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    got = {"burst": __version__, "python": platform.python_version()}
    for pkg in ("tensorflow", "keras", "ray", "numpy", "h5py"):
        try:
            got[pkg] = version(pkg)
        except PackageNotFoundError:
            got[pkg] = None
    return got


Seconds = Annotated[float, Field(ge=0, le=1e9)]
Usd = Annotated[float, Field(ge=0, le=1e12)]


class _Measured(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)
    epoch_s: Optional[Annotated[float, Field(gt=0, le=1e9)]] = None
    kgco2e: Optional[Annotated[float, Field(ge=0)]] = None


class _Predicted(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)
    epoch_s: Optional[Annotated[float, Field(gt=0, le=1e9)]] = None
    events_per_epoch: Optional[Annotated[int, Field(ge=1)]] = None
    why: Optional[str] = None


class CostRecord(BaseModel):
    """What is read back from a run's ``cost.json`` (``burst report``'s plan-against-run lines,
    ``burst calibrate``): the figures a reader uses, each finite and in range; the rest passes as written."""

    model_config = ConfigDict(allow_inf_nan=False, extra="allow")
    hourly_usd: Usd = 0.0
    hours: Seconds = 0.0
    cost_usd: Usd = 0.0
    measured: _Measured = Field(default_factory=_Measured)
    predicted: _Predicted = Field(default_factory=_Predicted)
    plan: Optional[dict] = None
    epoch_error: Optional[float] = None


def read_cost(path: Path, run_id: str) -> CostRecord:
    """A run's cost.json, checked (``read_json``): one line when it is missing or damaged."""
    return read_json(path, f"run {run_id}'s cost record", model=CostRecord)


class RunDirectory:
    """``burst-runs/<run-id>/``: job.log, report/, history.json, metrics.json, cost.json, provenance.json."""

    def __init__(self, run_id: str, root: Path = RUNS_ROOT):
        self.path = root / run_id
        self.run_id = run_id

    @property
    def report(self) -> Path:
        return self.path / "report" / "report.html"

    @property
    def job_log(self) -> Path:
        return self.path / "job.log"

    def save_log(self, text: str) -> None:
        write_text_atomic(self.job_log, text)

    def history(self) -> list[dict]:
        """The job's per-epoch records (seconds, steps, samples, losses); empty when it published none."""
        path = self.path / "history.json"
        try:
            data = json.loads(path.read_text()) if path.exists() else []
        except ValueError:
            return []
        data = data.get("history", []) if isinstance(data, dict) else data
        return [h for h in data if isinstance(h, dict)] if isinstance(data, list) else []

    def collect(self, handle: ClusterHandle, run: RunRecord) -> None:
        """Copy what the job published on the cluster's storage."""
        from ..client import jobs

        jobs.collect(handle, run, self.path.parent)

    def _usage(self) -> dict:
        """The job's utilisation summary (``report/usage.json``); empty when there is none or it cannot
        be read (it adds to the cost; a damaged one never stops a run's results from being written)."""
        path = self.path / "report" / "usage.json"
        try:
            summary = read_json(path, "the run's utilisation summary") if path.exists() else {}
        except BurstError:
            return {}
        return summary if isinstance(summary, dict) else {}

    def write_summary(self, run: RunRecord, handle: ClusterHandle, tracker, submitted: float) -> None:
        """cost.json, metrics.json and provenance.json, from the run, its cluster and its events."""
        hours = (run.finished - submitted) / 3600
        cost = {"provider": handle.provider, "hourly_usd": handle.hourly_usd, "hours": round(hours, 5),
                "cost_usd": round(handle.hourly_usd * hours, 4), **predicted_vs_measured(handle.plan, run.config, self.history(), hours)}
        summary = self._usage()
        if summary.get("idle_usd") is not None:
            cost.update(busy_percent=summary.get("busy_percent"), idle_usd_while_training=summary["idle_usd"])
        write_json_atomic(self.path / "cost.json", cost, indent=1)
        metrics = self.path / "report" / "metrics.json"
        if metrics.exists():
            write_text_atomic(self.path / "metrics.json", metrics.read_text())
        job_file = self.path / "job_provenance.json"
        job_prov = read_json(job_file, "the job's provenance") if job_file.exists() else {}
        first = tracker.first_step_time
        provenance = {
            "run_id": run.run_id, "workload": run.workload, "config": run.config, "versions": versions(),
            "target": {"provider": handle.provider, "cluster": handle.name, "layout": handle.layout},
            "timings": {"submitted": submitted, "first_step": first, "finished": run.finished,
                        "submit_to_first_step_s": (first - submitted) if first else None, **job_prov.get("timings", {})},
            "data_hashes": job_prov.get("data_hashes", {}),
            "resumes": tracker.resumes,
            "machine": tracker.machine,
        }
        write_json_atomic(self.path / "provenance.json", provenance, indent=1)


def measured_epoch_s(history: list[dict]) -> Optional[float]:
    """Median seconds of the epochs after the first (the first also traces and compiles), or the only one."""
    seconds = [float(h["seconds"]) for h in history if h.get("seconds")]
    steady = seconds[1:] or seconds
    return statistics.median(steady) if steady else None


def predicted_vs_measured(plan: dict, config: dict, history: list[dict], hours: float) -> dict:
    """cost.json's comparison of the plan with the run, scaled to the events each epoch really had.

    The plan's model describes one preset at one batch; a run of another preset or batch gets no
    predicted figure (and says why) rather than a wrong one."""
    measured = measured_epoch_s(history)
    block: dict = {"measured": {"epoch_s": None if measured is None else round(measured, 3), "epochs": len(history),
                                "training_s": round(sum(float(h.get("seconds") or 0) for h in history), 3), "hours": round(hours, 5)}}
    if plan:
        block["measured"]["kgco2e"] = None if plan.get("grid_gco2_per_kwh") is None else round(
            plan["kw"] * hours * plan["grid_gco2_per_kwh"] / 1000, 4)
        block["plan"] = plan
    why = None
    if not plan:
        why = "the cluster was started without a plan (a pinned local machine)"
    elif config.get("preset") != plan.get("preset"):
        why = f"the time model describes the {plan.get('preset')} preset; this run trained {config.get('preset')}"
    elif (config.get("batch_per_replica") or plan["batch_per_replica"]) != plan["batch_per_replica"]:
        why = f"the plan was for batch {plan['batch_per_replica']} per replica; this run used {config.get('batch_per_replica')}"
    elif not history:
        why = "the run finished no epoch"
    if why:
        block["predicted"] = {"epoch_s": None, "why": why}
        return block
    samples = statistics.median(float(h.get("samples") or 0) for h in history) or plan["events"]
    predicted = plan["epoch_s"] * samples / plan["events"]
    block["predicted"] = {"epoch_s": round(predicted, 3), "events_per_epoch": int(samples), "training_s": round(predicted * len(history), 3)}
    if measured:
        block["epoch_error"] = round(measured / predicted - 1, 4)
    return block
