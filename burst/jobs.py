"""Submitting a workload as a Ray job, following its progress, and collecting its results."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable

from . import state
from .errors import BurstError
from .state import ClusterHandle, RunRecord
from .targets.local import auth_headers

SOURCE_ROOT = Path(__file__).resolve().parent.parent
CLUSTER_PACKAGES = ("tensorflow[and-cuda]>=2.16,<2.22", "h5py>=3.10", "matplotlib>=3.8", "pydantic>=2.6", "pyyaml>=6",
                    "typer>=0.12", "rich>=13", "filelock>=3.13", "psutil>=5.9")
EVENT_RE = re.compile(r"BURST_EVENT (\{.*\})\s*$")
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def client(handle: ClusterHandle):
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(handle.dashboard_url, headers=auth_headers(handle))
    except (ConnectionError, RuntimeError) as exc:
        raise BurstError(f"cannot reach the Ray cluster {handle.name!r} at {handle.dashboard_url} ({exc}); check `burst status`", exit_code=1) from None


def submit(handle: ClusterHandle, run: RunRecord, job_config: dict) -> str:
    """Submit ``python -m burst.ray_entry CONFIG`` and record the job id in the run."""
    import shlex

    # oneDNN on for every worker unless the user chose otherwise (stock TensorFlow leaves it off on
    # AVX2-only CPUs, ~6x slower); workers read it when they first import TensorFlow.
    runtime_env: dict = {"env_vars": {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1")}}
    python = shlex.quote(sys.executable)
    from .targets import KUBERAY

    if handle.provider in KUBERAY:
        # KubeRay pods run the stock Ray image: ship burst's source and the workload's packages.
        python = "python"
        runtime_env.update(working_dir=str(SOURCE_ROOT), pip=list(CLUSTER_PACKAGES),
                           excludes=[".git", ".venv", "burst-runs", "tests", "*.h5", "*.tfrecord"])
    elif handle.provider == "gcp-tpu":
        python = "python3"  # the TPU hosts installed burst from its wheel at boot
    entry = f"{python} -m burst.ray_entry {shlex.quote(json.dumps(job_config))}"
    job_id = client(handle).submit_job(entrypoint=entry, submission_id=run.run_id, runtime_env=runtime_env)
    run.job_id = job_id
    run.state = "RUNNING"
    with state.locked():
        state.save(run)
    return job_id


def event_key(payload: str) -> str:
    """Identity of an event: epoch events by epoch number (a resumed worker re-announces them),
    every other event by its exact text (Ray may forward a worker's line twice)."""
    try:
        event = json.loads(payload)
    except json.JSONDecodeError:
        return payload
    return f"epoch:{event.get('epoch')}" if event.get("type") == "epoch" else payload


def parse_events(text: str) -> list[dict]:
    """Distinct BURST_EVENT payloads of a job log, in order."""
    out, seen = [], set()
    for line in text.splitlines():
        m = EVENT_RE.search(line)
        if m and (key := event_key(m.group(1))) not in seen:
            seen.add(key)
            try:
                out.append(json.loads(m.group(1)))
            except json.JSONDecodeError:
                continue
    return out


def job_status(c, job_id: str) -> str:
    status = c.get_job_status(job_id)
    return getattr(status, "value", str(status))


def follow(handle: ClusterHandle, run: RunRecord, on_event: Callable[[dict], None], on_line: Callable[[str], None] | None = None,
           poll_s: float = 1.0, on_poll: Callable[[], None] | None = None) -> str:
    """Poll the job's status and logs until it ends; call back for every new event and log line."""
    c = client(handle)
    seen = 0
    delivered: set[str] = set()  # Ray can forward a worker's line twice; each event counts once
    while True:
        try:
            status = job_status(c, run.job_id)
            logs = c.get_job_logs(run.job_id)
        except (ConnectionError, RuntimeError, OSError) as exc:
            raise BurstError(f"lost contact with cluster {handle.name!r} ({exc.__class__.__name__}); "
                             f"the run may still be going: see `burst status`", exit_code=1) from None
        new, seen = logs[seen:], len(logs)
        for line in new.splitlines():
            m = EVENT_RE.search(line)
            if m:
                key = event_key(m.group(1))
                if key in delivered:
                    continue
                delivered.add(key)
                try:
                    on_event(json.loads(m.group(1)))
                except json.JSONDecodeError:
                    pass
            elif on_line is not None:
                on_line(line)
        if status in TERMINAL:
            return status
        if on_poll is not None:
            on_poll()
        time.sleep(poll_s)


def collect(handle: ClusterHandle, run: RunRecord, runs_root: Path) -> Path:
    """Copy the job's outputs from the cluster's storage (a directory or a bucket) into ``burst-runs/<run-id>/``."""
    from . import storage as cluster_storage

    dest = runs_root / run.run_id
    dest.mkdir(parents=True, exist_ok=True)
    src = cluster_storage.join(handle.storage_uri, "runs", run.run_id)
    if not cluster_storage.exists(src):
        raise BurstError(f"run {run.run_id}: the cluster storage holds no results at {src}", exit_code=1)
    for item in ("report", "history.json", "job_provenance.json"):
        cluster_storage.copy(cluster_storage.join(src, item), str(dest / item))
    (dest / "checkpoint_uri.txt").write_text(cluster_storage.join(src, "checkpoint") + "\n")
    return dest
