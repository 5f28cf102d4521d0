"""A run's directory on this machine (``burst-runs/<run-id>/``): what it holds and who writes it.

The job publishes its results to the cluster's storage; ``collect`` copies them here, and this
side adds what only it knows: the job's full log, the cost, and the provenance (versions, the
target, timings from submission to the first step).
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

from . import __version__
from .state import ClusterHandle, RunRecord

RUNS_ROOT = Path("burst-runs")


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    got = {"burst": __version__, "python": platform.python_version()}
    for pkg in ("tensorflow", "keras", "ray", "numpy", "h5py"):
        try:
            got[pkg] = version(pkg)
        except PackageNotFoundError:
            got[pkg] = None
    return got


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
        self.path.mkdir(parents=True, exist_ok=True)
        self.job_log.write_text(text)

    def collect(self, handle: ClusterHandle, run: RunRecord) -> None:
        """Copy what the job published on the cluster's storage."""
        from .runtime import jobs

        jobs.collect(handle, run, self.path.parent)

    def write_summary(self, run: RunRecord, handle: ClusterHandle, tracker, submitted: float) -> None:
        """cost.json, metrics.json and provenance.json, from the run, its cluster and its events."""
        hours = (run.finished - submitted) / 3600
        cost = {"provider": handle.provider, "hourly_usd": handle.hourly_usd, "hours": round(hours, 5),
                "cost_usd": round(handle.hourly_usd * hours, 4)}
        (self.path / "cost.json").write_text(json.dumps(cost, indent=1))
        metrics = self.path / "report" / "metrics.json"
        if metrics.exists():
            (self.path / "metrics.json").write_text(metrics.read_text())
        job_file = self.path / "job_provenance.json"
        job_prov = json.loads(job_file.read_text()) if job_file.exists() else {}
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
        (self.path / "provenance.json").write_text(json.dumps(provenance, indent=1, default=str))
