"""The submitting side of a training job: submit it to a cluster's Ray Jobs API, follow its events,
keep track of what they say, and collect its results from the cluster's storage."""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..home import state
from ..errors import BurstError
from ..home.records import write_text_atomic
from ..home.state import ClusterHandle, RunRecord
from ..runtime.ray_head import auth_headers
from .jobs_rest import JobsAPI

from ..runtime.job import EVENT_LINE, FIXED_NODES, DoneEvent, EpochEvent, FailedEvent, JobEvent, RunFiles, StartEvent, StepEvent, StoppedEvent, UsageEvent, event_key, parse_event, parse_events

__all__ = ["JobRuntime", "client", "submit", "follow", "collect", "RunTracker", "parse_events", "job_status", "TERMINAL"]

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
PREEMPTION_WATCHER = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"  # Ray Train's switch for its node-drain watcher


@dataclass(frozen=True)
class JobRuntime:
    """How the job's entry point is started on the cluster: the Python to run and Ray's runtime env
    (each target says which: ``Target.job_runtime``)."""

    python: str = sys.executable
    runtime_env: dict = field(default_factory=dict)
    # whether the cluster's nodes change under a run: Ray told that a node is going (a cloud's spot
    # notice, an autoscaler's scale-down), nodes added on demand. Ray Train then runs an actor per
    # run that watches for drained nodes, and tells Ray's autoscaling coordinator (another actor)
    # what its workers need; on a machine or an allocation whose nodes are fixed, each is one more
    # Python process per run for nothing
    nodes_drain: bool = True


def client(handle: ClusterHandle) -> JobsAPI:
    """The Jobs API of the handle's own cluster (read without importing Ray: ``jobs_rest``). A
    handle without a dashboard address is refused: Ray's client, given none, finds a cluster by
    itself (``RAY_ADDRESS``, or the newest Ray started on this machine), and burst would list, stop
    or submit jobs on a cluster it never named."""
    if not handle.dashboard_url:
        raise BurstError(f"cluster {handle.name!r} has no Ray dashboard address (state {handle.state}); "
                         f"`burst status` shows it, `burst down {handle.name}` forgets it", exit_code=1)
    try:
        return JobsAPI(handle.dashboard_url, headers=auth_headers(handle))
    except (ConnectionError, RuntimeError) as exc:
        raise BurstError(f"cannot reach the Ray cluster {handle.name!r} at {handle.dashboard_url} ({exc}); check `burst status`", exit_code=1) from None


def submit(handle: ClusterHandle, run: RunRecord, cfg, runtime: JobRuntime, module: str = "burst.runtime.entry") -> str:
    """Submit ``python -m MODULE CONFIG`` (a training job; ``burst.runtime.scan`` for a scan) and
    record the job id in the run."""
    # oneDNN on for every worker unless the user chose otherwise (stock TensorFlow leaves it off on
    # AVX2-only CPUs, ~6x slower); workers read it when they first import TensorFlow.
    # Ray folds lines that differ only in numbers into "[repeated Nx across cluster]"; a scan's
    # trials print such events side by side, and every one of them counts.
    # A storage emulator on this machine (tests, a laptop's dry run of a bucket store) serves the job's buckets too.
    from ..runtime import storage

    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1"), "RAY_DEDUP_LOGS": "0",
           **storage.emulator_env(), **({} if runtime.nodes_drain else {PREEMPTION_WATCHER: "0", FIXED_NODES: "1"})}
    runtime_env = {**runtime.runtime_env, "env_vars": {**runtime.runtime_env.get("env_vars", {}), **env}}
    entry = f"{shlex.quote(runtime.python)} -m {module} {shlex.quote(cfg.to_arg())}"
    submission = run.run_id if run.attempts == 1 else f"{run.run_id}-attempt{run.attempts}"  # unique on a cluster
    job_id = submitted(client(handle), entrypoint=entry, submission_id=submission, runtime_env=runtime_env)
    run.job_id = job_id
    run.state = "RUNNING"
    with state.locked():
        state.save(run)
    return job_id


AGENT_WAIT_S = 120.0


def submitted(c, wait_s: float = AGENT_WAIT_S, **job) -> str:
    """``submit_job`` once the head can take it. A head answers 500 "No available agent to submit
    job, please try again later" until a node's dashboard agent has registered with it: seconds
    after the head starts, longer on a loaded machine (a run on a Slurm allocation on two busy
    cores met it). Ray asks to try again; anything else is raised as it came."""
    deadline = time.monotonic() + wait_s
    delay = 0.5
    while True:
        try:
            return c.submit_job(**job)
        except RuntimeError as exc:
            if "No available agent" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 8.0)


def job_status(c, job_id: str) -> str:
    status = c.get_job_status(job_id)
    return getattr(status, "value", str(status))


def follow(handle: ClusterHandle, run: RunRecord, on_event: Callable[[JobEvent], None], on_line: Callable[[str], None] | None = None,
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
            m = EVENT_LINE.search(line)
            if m:
                key = event_key(m.group(1))
                if key in delivered:
                    continue
                delivered.add(key)
                event = parse_event(m.group(1))
                if event is not None:
                    on_event(event)
            elif on_line is not None:
                on_line(line)
        if status in TERMINAL:
            return status
        if on_poll is not None:
            on_poll()
        time.sleep(poll_s)


class RunTracker:
    """What a run's events say, kept for its record: timings, restarts, the last epoch, why it ended."""

    def __init__(self, epochs: int):
        self.epochs = epochs
        self.steps = 1
        self.first_step_time: Optional[float] = None
        self.resumes: list[dict] = []
        self.failure: Optional[str] = None
        self.stopped: Optional[StoppedEvent] = None
        self.done: Optional[DoneEvent] = None
        self.last_epoch: Optional[EpochEvent] = None
        self.last_step: Optional[StepEvent] = None
        self.starts = 0  # worker (re)starts seen: every one after the first is a lost worker
        self.machine: dict = {}  # the training worker's CPU, SIMD and oneDNN state, as TensorFlow saw them
        self.usage: Optional[UsageEvent] = None  # the cluster's utilisation, throughput and money, last said

    def record(self, event: JobEvent) -> None:
        if isinstance(event, StartEvent):
            self.starts += 1
            self.steps = max(1, event.steps)
            self.epochs = event.epochs
            self.machine = event.machine or self.machine
            if event.resumed:
                self.resumes.append({"epoch": event.epoch, "time": event.time})
        elif isinstance(event, StepEvent):
            if self.first_step_time is None:
                self.first_step_time = event.time
            self.last_step = event
        elif isinstance(event, EpochEvent):
            self.last_epoch = event
        elif isinstance(event, FailedEvent):
            self.failure = event.message
        elif isinstance(event, StoppedEvent):
            self.stopped = event
        elif isinstance(event, UsageEvent):
            self.usage = event
        elif isinstance(event, DoneEvent):
            self.done = event

    def resume_line(self, start: StartEvent) -> str:
        """What a restart means, in burst's words: where the lost worker was, where training goes on."""
        where = f"at epoch {self.last_step.epoch} step {self.last_step.step}" if self.last_step else "before its first step"
        if start.resumed:
            return f"worker lost {where}; resumed from the checkpoint of epoch {start.epoch}"
        return f"worker lost {where}; no checkpoint yet, training restarted from the beginning"

    def snapshot(self, running: bool = False) -> dict:
        """The run's progress for its record; ``running``: with the cluster's last usage line (what
        `burst status` shows while the run goes on; a finished run's record keeps none)."""
        last = self.last_epoch
        snap = {"epoch": last.epoch if last else None, "epochs": self.epochs, "samples_per_s": last.samples_per_s if last else None}
        if running and self.usage is not None:
            snap["usage"] = self.usage.line()
        return snap


def collect(handle: ClusterHandle, run: RunRecord, runs_root: Path) -> Path:
    """Copy the job's outputs from the cluster's storage (a directory or a bucket) into ``<runs_root>/<run-id>/``."""
    from ..runtime import storage

    dest = runs_root / run.run_id
    dest.mkdir(parents=True, exist_ok=True)
    src = RunFiles(handle.storage_uri, run.run_id).run_dir
    if not storage.exists(src):
        raise BurstError(f"run {run.run_id}: the cluster storage holds no results at {src}", exit_code=1)
    for item in ("report", "history.json", "job_provenance.json"):
        storage.copy(storage.join(src, item), str(dest / item))
    write_text_atomic(dest / "checkpoint_uri.txt", storage.join(src, "checkpoint") + "\n")
    return dest
