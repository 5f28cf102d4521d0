"""The contract between the machine that submits a training job and the job on the cluster.

``JobConfig`` is what the job is told (one JSON argument); the events are what it says back, as
``BURST_EVENT {json}`` lines in its log, so that a run can be followed, detached from and picked up
again by any later command. ``RunFiles`` names the files a run keeps on the cluster's storage.
Both sides import this module; it imports nothing heavy.
"""

from __future__ import annotations

import json
import re
import time
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

EVENT_PREFIX = "BURST_EVENT"
EVENT_LINE = re.compile(rf"{EVENT_PREFIX} (\{{.*\}})\s*$")
DEFAULT_VAL_EVENTS = 400  # held-out events validation generates and compares
DEFAULT_SYNTHETIC_EVENTS = 3000
# set to "1" in a job's environment by its submitter (jobs.submit) where the cluster neither loses nor
# gains nodes; read by the driver (ray_train.fixed_nodes)
FIXED_NODES = "BURST_FIXED_NODES"


class TrainSettings(BaseModel):
    """How to train: the options a user sets that the job reads as they are. A new option is one
    field here (and its CLI flag): the request, the job config and the run record all carry it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    workload: str = Field(default_factory=lambda: _workloads().DEFAULT, description="the workload to train (`burst workloads` lists them), "
                                                                              "or its code: package.module:OBJECT, path/to/file.py:OBJECT")
    workload_source: Optional[str] = Field(None, description="the code a workload named by it came from (module:OBJECT, /abs/file.py:OBJECT): "
                                                             "what a job on another node loads it from")
    preset: Optional[str] = Field(None, description="the workload's model preset (default: its first; `burst workloads` lists them)")
    epochs: int = Field(6, gt=0, description="epochs to train")
    batch_per_replica: Optional[int] = Field(None, gt=0, description="events per replica per step (default: the preset's)")
    seed: int = Field(0, description="seed of the data's split and shuffle and of the model's initial weights")
    steps_per_epoch: Optional[int] = Field(None, gt=0, description="steps per epoch (default: events // global batch)")
    val_events: int = Field(DEFAULT_VAL_EVENTS, gt=0, description="held-out events validation (a scan's trial: after every epoch) judges on")
    gate: Optional[dict[str, float]] = Field(None, description="quality gate: summary metric -> largest accepted value (burst.lifecycle.quality)")
    checkpoint_every_steps: Optional[int] = Field(None, gt=0, description="also checkpoint inside an epoch every this many steps (default: the "
                                                                     "policy's checkpoint_every_steps; whole epochs only without either)")
    precision: Optional[str] = Field(None, description="what the layers compute in: auto | float32 | mixed_bfloat16 | mixed_float16 "
                                                       "(default: the policy's precision, else auto: bfloat16 where the hardware runs it fast, "
                                                       "float16 on V100/T4, else float32)")

    @field_validator("precision")
    @classmethod
    def _known_precision(cls, v):
        from workloads.common import precision  # light: names only

        return v if v is None else precision.check(v)

    @model_validator(mode="after")
    def _known_workload_and_preset(self):
        """The workload is registered and the preset is one of its own (none given: its default)."""
        workload = _workloads().get(self.workload, self.workload_source)  # BurstError (one line) for an unknown name
        if self.workload != workload.name:  # named by its code: the run knows it by its name, and the job by both
            object.__setattr__(self, "workload_source", getattr(workload, "spec", None) or self.workload)
            object.__setattr__(self, "workload", workload.name)
        elif self.workload_source is None and getattr(workload, "spec", None):
            object.__setattr__(self, "workload_source", workload.spec)
        if self.preset is None:
            object.__setattr__(self, "preset", workload.default_preset)  # frozen: set once, while validating
        workload.check_preset(self.preset)  # ValueError: the caller names the flag
        return self


def _workloads():
    from .. import workloads  # the registry: light, imports no workload until one is asked for

    return workloads


class JobConfig(TrainSettings):
    """Everything the job needs, set once on the submitting side."""

    run_id: str
    storage: str                        # the cluster's storage: a directory or a bucket URI
    data: Optional[str] = None          # a directory or bucket URI of HDF5/TFRecord files
    synthetic: Optional[int] = Field(None, gt=0)  # or this many synthetic Monte Carlo events
    # how the job is spread over the cluster (the target's ``job_resources``)
    workers: int = Field(1, gt=0)
    cpus_per_worker: int = Field(1, gt=0)
    gpus_per_worker: int = Field(0, ge=0)
    threads: Optional[int] = Field(None, gt=0)
    tpu: bool = False
    tpu_hosts: int = Field(1, gt=0)     # hosts of the TPU slice (more than one: host 0 drives them all, runtime.tpu)
    tpu_name: Optional[str] = None      # the slice's name, which TPUClusterResolver resolves to every host's address
    hourly_usd: float = Field(0.0, ge=0)  # the cluster's price: what the usage line and the report say idle devices cost
    max_failures: int = Field(3, ge=0)
    resume_from: Optional[str] = None   # checkpoints of an earlier attempt of this run (another cluster's storage)
    notices: Optional[str] = None       # this cluster's notice directory (notice.root); None: no one posts notices
    # filled in by the job's driver once the data is ready: where every worker reads it
    train_files: tuple[str, ...] = ()
    # a scan's trial (burst tune): the preset knobs it sets, physics on held-out MC after every
    # epoch, and its stop requests (the scan's, from the budget guard; its own, from ASHA)
    overrides: dict[str, Any] = Field(default_factory=dict)
    val_files: tuple[str, ...] = ()
    validate_each_epoch: bool = False
    stop_files: tuple[str, ...] = ()  # default: the run's own stop request

    def to_arg(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_arg(cls, text: str) -> "JobConfig":
        return cls.model_validate_json(text)


# --------------------------------------------------------------------------- events


class _Event(BaseModel):
    model_config = ConfigDict(extra="allow")  # a newer job may say more than this side knows
    time: float = Field(default_factory=time.time)


class StatusEvent(_Event):
    type: Literal["status"] = "status"
    message: str


class StartEvent(_Event):
    """A worker (re)started: from which epoch, with how many steps per epoch, on what machine."""

    type: Literal["start"] = "start"
    epoch: int
    epochs: int
    steps: int
    replicas: int = 1
    global_batch: Optional[int] = None
    resumed: bool = False
    pid: Optional[int] = None
    machine: dict = Field(default_factory=dict)
    run_id: Optional[str] = None  # which run (a scan's trials share one log)


class StepEvent(_Event):
    type: Literal["step"] = "step"
    epoch: int
    step: int
    steps: int
    elapsed: Optional[float] = None


class EpochEvent(_Event):
    """An epoch ended; its metrics (losses, samples/s, ...) are the extra fields."""

    type: Literal["epoch"] = "epoch"
    epoch: int
    epochs: int
    replayed: bool = False  # re-announced from a restored checkpoint, not trained again
    samples_per_s: Optional[float] = None
    said: str = ""          # the workload's line for the epoch (its losses in its own words)


# The text of a stop request: who asked. Only its owner's cancel changes how the run ends (STOPPED,
# its cluster kept); the others end it as a stop on request (the budget's, a lease's, a scan's).
CANCEL_REQUEST = "cancel"  # its owner (the web view's Cancel, an attached `burst train`'s)
BUDGET_REQUEST = "budget"  # a budget guard: the run's, or a team's on a burst server
LEASE_REQUEST = "lease"    # a managed run's controller at the cluster's lease end
ASHA_REQUEST = "asha"      # a scan's scheduler, stopping a trailing trial early


class StoppedEvent(_Event):
    """Training ended early at this position, its checkpoint saved: on request (the budget guard;
    ``cancel``: its owner) or on a notice."""

    type: Literal["stopped"] = "stopped"
    epoch: int
    step: int
    steps: int
    reason: str = "request"

    @property
    def on_notice(self) -> bool:
        return self.reason.startswith("notice")

    @property
    def cancelled(self) -> bool:
        return self.reason == CANCEL_REQUEST


class CheckpointEvent(_Event):
    """A checkpoint inside an epoch (the step interval, or a notice) is on storage."""

    type: Literal["checkpoint"] = "checkpoint"
    epoch: int
    step: int
    steps: int


class TrialEvent(_Event):
    """A scan's trial started, reported an epoch's physics, or ended (``state``: RUNNING, TERMINATED, ERROR)."""

    type: Literal["trial"] = "trial"
    trial: str
    state: str
    epoch: Optional[int] = None
    metric: Optional[float] = None
    config: dict = Field(default_factory=dict)
    message: Optional[str] = None


class UsageEvent(_Event):
    """How busy the cluster is now (``burst.runtime.usage``): utilisation, throughput, money."""

    type: Literal["usage"] = "usage"
    nodes: int
    cpu_percent: Optional[float] = None
    accelerator: str = "CPU"                     # what the cluster pays for: GPU, TPU, or its CPUs
    accelerator_percent: Optional[float] = None  # their mean utilisation (a TPU's duty cycle)
    mem_percent: Optional[float] = None
    samples_per_s: Optional[float] = None        # all workers together
    input_wait_percent: Optional[float] = None   # of the workers' epoch time, waiting for the next batch
    spent_usd: float = 0.0                       # since the job started, at the cluster's price
    hourly_usd: float = 0.0
    idle_usd_per_h: Optional[float] = None       # the part of the price that pays for idle devices now

    def line(self) -> str:
        """The live line: utilisation, throughput and money, in a few words."""
        parts = [f"CPU {self.cpu_percent:.0f} %" if self.cpu_percent is not None else "CPU -"]
        if self.accelerator != "CPU":
            parts.append(f"{self.accelerator} {self.accelerator_percent:.0f} %" if self.accelerator_percent is not None else f"{self.accelerator} -")
        if self.mem_percent is not None:
            parts.append(f"memory {self.mem_percent:.0f} %")
        if self.samples_per_s is not None:
            parts.append(f"{self.samples_per_s:,.0f} samples/s" if self.samples_per_s >= 100 else f"{self.samples_per_s:.3g} samples/s")
        if self.input_wait_percent is not None:
            parts.append(f"input wait {self.input_wait_percent:.0f} %")
        where = f"{', '.join(parts)} on {self.nodes} node(s)"
        if not self.hourly_usd:
            return where  # a cluster with no price (this machine, unpriced): no money to speak of
        money = f"{_usd(self.spent_usd)} spent"
        if self.idle_usd_per_h is not None:
            money += f", {_usd(self.idle_usd_per_h)}/h idle"
        return f"{where}; {money}"


def _usd(amount: float) -> str:
    """Money in a few characters: cents from a dollar up, three figures below (a local run's $0.0017)."""
    return f"${amount:,.2f}" if amount >= 1 or amount == 0 else f"${amount:.2g}"


class DoneEvent(_Event):
    type: Literal["done"] = "done"
    run_dir: str
    stopped: bool = False
    summary: dict = Field(default_factory=dict)
    said: str = ""          # the workload's headline of the validation summary


class FailedEvent(_Event):
    type: Literal["failed"] = "failed"
    message: str


JobEvent = Annotated[Union[StatusEvent, StartEvent, StepEvent, EpochEvent, StoppedEvent, CheckpointEvent, TrialEvent, UsageEvent, DoneEvent,
                           FailedEvent],
                     Field(discriminator="type")]
_EVENT = TypeAdapter(JobEvent)


def event_line(event: _Event) -> str:
    fields = event.model_dump(mode="json")
    return f"{EVENT_PREFIX} {json.dumps({'type': fields.pop('type'), **fields})}"


def emit(event: _Event) -> None:
    """Say something to whoever follows the job (its log is the channel)."""
    print(event_line(event), flush=True)


def parse_event(payload: str) -> Optional[JobEvent]:
    """An event from its JSON, or None for text that is not one this side understands."""
    try:
        return _EVENT.validate_json(payload)
    except ValidationError:
        return None


def event_key(payload: str) -> str:
    """Identity of an event: epoch events by epoch number (a resumed worker re-announces them),
    every other event by its exact text (Ray may forward a worker's line twice)."""
    try:
        event = json.loads(payload)
    except json.JSONDecodeError:
        return payload
    return f"epoch:{event.get('epoch')}" if isinstance(event, dict) and event.get("type") == "epoch" else payload


def parse_events(text: str) -> list[JobEvent]:
    """Distinct events of a job log, in order."""
    out, seen = [], set()
    for line in text.splitlines():
        m = EVENT_LINE.search(line)
        if m and (key := event_key(m.group(1))) not in seen:
            seen.add(key)
            event = parse_event(m.group(1))
            if event is not None:
                out.append(event)
    return out


# --------------------------------------------------------------------------- files on the cluster's storage


class RunFiles:
    """Where one run keeps its files on the cluster's storage (a directory or a bucket)."""

    def __init__(self, storage: str, run_id: str):
        self.storage = storage.rstrip("/")
        self.run_id = run_id

    @property
    def run_dir(self) -> str:
        """What the job publishes: report, history, provenance, final checkpoint."""
        return f"{self.storage}/runs/{self.run_id}"

    @property
    def stop_request(self) -> str:
        """A file whose presence asks the workers to checkpoint and stop (the budget guard)."""
        return f"{self.run_dir}/STOP"

    def ask_to_stop(self, who: str) -> None:
        """Write the stop request, saying ``who`` asked (``*_REQUEST``): every writer of one goes
        through here, so that the workers' reader (``training.requested_by``) sees one format.
        Raises whatever the store raised; each caller decides what a failed write means."""
        from . import storage

        storage.write_text(self.stop_request, who + "\n")

    @property
    def data_error(self) -> str:
        """The one-line verdict a worker leaves on a bad training file, for the driver."""
        return f"{self.run_dir}/DATA_ERROR"

    @property
    def ray_train_root(self) -> str:
        """Ray Train's storage path (it keeps each run under its name there)."""
        return f"{self.storage}/ray-train"

    @property
    def ray_train_dir(self) -> str:
        """Ray Train's own checkpoints of the run."""
        return f"{self.ray_train_root}/{self.run_id}"

    @property
    def tpu_checkpoints(self) -> str:
        return f"{self.storage}/tpu-checkpoints/{self.run_id}"

    @property
    def pod_input(self) -> str:
        """A TPU pod slice's training shards (TFRecords, one set per run) that every host copies its own from."""
        return f"{self.storage}/pod-input/{self.run_id}"

    def data_dir(self, part: str) -> str:
        """A copy of the run's data on the storage (``source``: as uploaded, ``train``: for workers)."""
        return f"{self.storage}/data/{self.run_id}/{part}"


# --------------------------------------------------------------------------- scans (burst tune)


class ScanConfig(BaseModel):
    """What the scan job is told: the trials' common job (its ``run_id`` is the scan's), the search
    space (``burst.runtime.scan_space`` data), how many trials, what to minimise and how to stop early."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    job: JobConfig
    space: dict[str, Any]
    trials: int = Field(gt=0)
    metric: str                         # one of the workload's epoch metrics
    concurrent: int = Field(1, gt=0)
    grace_period: int = Field(1, gt=0)      # ASHA: epochs every trial gets before it can be stopped
    reduction_factor: int = Field(2, gt=1)  # ASHA: 1/reduction_factor of the trials go on at each rung
    search: Literal["random", "optuna"] = "random"
    report_events: int = Field(DEFAULT_VAL_EVENTS, gt=0)  # held-out events of the best trial's full report

    @property
    def scan_id(self) -> str:
        return self.job.run_id

    def to_arg(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_arg(cls, text: str) -> "ScanConfig":
        return cls.model_validate_json(text)


# --------------------------------------------------------------------------- failures

# A DataError raised in a worker's input pipeline reaches the driver wrapped twice (TensorFlow's
# InvalidArgumentError inside Ray Train's worker-group error); its own message is the useful part.
_DATA_ERROR = re.compile(r"DataError: (.+?)(?:\s*\[\[|\s*$)", re.MULTILINE)


def failure_line(exc: BaseException) -> str:
    """One line in burst's words for why the job failed (the traceback stays in the job log)."""
    text = str(exc)
    if exc.__class__.__name__ == "DataError":
        return f"bad input data: {text}"
    found = _DATA_ERROR.findall(text)
    if found:
        return f"bad input data: {found[-1].strip()}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if first.endswith(":") and len(lines) > 1:  # a heading ("Training failed due to controller error:"): its cause is the next line
        first = f"{first} {lines[1]}"
    return f"{exc.__class__.__name__}: {first}" if first else exc.__class__.__name__
