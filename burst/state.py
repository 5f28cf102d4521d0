"""The state directory: one JSON file per cluster and per run, atomic writes under a file lock.

``~/.burst`` unless ``BURST_HOME`` says otherwise. Nothing secret is stored in these files: a
cluster's Ray token lives in its own user-only file and handles hold only its path.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Literal, Type, TypeVar

from filelock import FileLock
from pydantic import BaseModel, Field, model_validator

from .errors import BurstError
from .records import write_json_atomic

M = TypeVar("M", bound=BaseModel)

# Cluster and run names become file names here, Ray and Kubernetes labels and Pulumi stack names:
# one rule that suits all of them, so no path or resource name is ever built from raw user input.
NAME_RULE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
NAME_RULE_TEXT = "1 to 40 lowercase letters, digits and '-', starting with a letter or digit"


def check_name(name: str, what: str = "cluster") -> str:
    """``name`` when it follows the naming rule; otherwise one line saying the rule."""
    if not isinstance(name, str) or not NAME_RULE.fullmatch(name):
        shown = repr(name) if len(str(name)) <= 60 else repr(str(name)[:57] + "...")
        raise BurstError(f"{what} name {shown} is not allowed: use {NAME_RULE_TEXT}")
    return name


def home() -> Path:
    path = Path(os.environ.get("BURST_HOME") or Path.home() / ".burst").expanduser()
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


@contextmanager
def locked(timeout: float = 60.0) -> Iterator[None]:
    """Serialise state changes across burst processes."""
    lock = FileLock(str(home() / "state.lock"), timeout=timeout)
    with lock:
        yield


class ClusterHandle(BaseModel):
    """Everything later commands need to reach a cluster burst started."""

    name: str
    provider: str
    cluster_id: str
    state: Literal["starting", "running", "stopping"] = "starting"
    created: float = Field(default_factory=time.time)
    expires: float | None = None
    dashboard_url: str | None = None
    gcs_address: str | None = None
    token_path: str | None = None
    temp_dir: str | None = None
    storage_uri: str
    layout: dict = Field(default_factory=dict)  # e.g. {"nodes": 1, "cpus": 2, "gpus": 0}
    hourly_usd: float = 0.0
    budget_usd: float | None = None  # the policy's total budget: `burst train` stops before it is spent
    pids: list[int] = Field(default_factory=list)
    starter_pid: int | None = None  # the `burst up` that is starting it (a second `up` waits for it, never kills it)
    region: str | None = None
    accelerator: str | None = None
    preemptible: bool = False
    lease_id: str | None = None
    stack: str | None = None  # Pulumi stack name (cloud providers)
    outputs: dict = Field(default_factory=dict)  # non-secret stack outputs
    plan: dict = Field(default_factory=dict)  # the plan's prediction at `up` (batch, epoch seconds, power): runs compare against it
    idle_minutes: float | None = None  # its watcher takes it down after this long without a job
    watcher_pid: int | None = None  # that watcher (burst.controller cluster NAME)


class RunRecord(BaseModel):
    """One training run or scan: where it ran, its job, its progress and where its results are."""

    run_id: str
    kind: Literal["run", "scan"] = "run"  # a training run (burst.runs) or a hyper-parameter scan (burst.scans)
    workload: str
    cluster: str
    provider: str
    job_id: str | None = None
    state: str = "PENDING"
    created: float = Field(default_factory=time.time)
    finished: float | None = None
    config: dict = Field(default_factory=dict)
    progress: dict = Field(default_factory=dict)
    run_dir: str | None = None
    hourly_usd: float = 0.0
    message: str | None = None
    storage_uri: str | None = None  # the storage its checkpoints went to (where `burst train --resume` finds them)
    attempts: int = 1  # 1 + the number of `--resume`s
    managed: bool = False  # carried by a controller (burst.controller), which moves it when its cluster is lost

    @model_validator(mode="before")
    @classmethod
    def _kind_of_an_older_record(cls, data):
        """Records written before ``kind`` existed said a scan in ``config["kind"]``."""
        if isinstance(data, dict) and "kind" not in data and (data.get("config") or {}).get("kind") == "scan":
            data = {**data, "kind": "scan"}
        return data


def new_run_id(workload: str) -> str:
    """A fresh run id: the workload, the time and four random hex digits."""
    return f"{workload}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def cluster_dir(name: str) -> Path:
    """``clusters/<name>/`` under the state directory, user-only: a cluster's token file, job script, local storage."""
    path = _dir("clusters") / check_name(name)
    path.mkdir(exist_ok=True, mode=0o700)
    return path


def claim(handle: ClusterHandle) -> ClusterHandle | None:
    """Record ``handle`` unless a cluster of its name is recorded already, in one locked step; returns
    the one already recorded (None: the name is now this caller's). Every target's ``up`` claims its
    name this way before it creates anything, so two ``up``s of one name never both create."""
    with locked():
        existing = load(ClusterHandle, handle.name)
        if existing is not None:
            return existing
        save(handle)
        return None


def release(handle: ClusterHandle) -> None:
    """Forget ``handle``'s record if it is still this one (same cluster id): a failed ``up`` gives its name back."""
    with locked():
        current = load(ClusterHandle, handle.name)
        if current is not None and current.cluster_id == handle.cluster_id:
            delete(ClusterHandle, handle.name)


def starter_alive(handle: ClusterHandle) -> bool:
    """True when the ``burst up`` that is starting ``handle`` still runs (another process than this one)."""
    import psutil

    pid = handle.starter_pid
    if not pid or pid == os.getpid():
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _dir(kind: str) -> Path:
    d = home() / kind
    d.mkdir(parents=True, exist_ok=True)
    return d


def save(obj: BaseModel) -> None:
    kind, key = ("clusters", obj.name) if isinstance(obj, ClusterHandle) else ("runs", obj.run_id)
    check_name(key, "cluster" if kind == "clusters" else "run")
    write_json_atomic(_dir(kind) / f"{key}.json", obj.model_dump(mode="json"), private=True)


def load(model: Type[M], key: str) -> M | None:
    kind = "clusters" if model is ClusterHandle else "runs"
    check_name(key, "cluster" if kind == "clusters" else "run")
    return _read(model, _dir(kind) / f"{key}.json")


def _read(model: Type[M], path: Path) -> M | None:
    if not path.exists():
        return None
    try:
        return model.model_validate_json(path.read_text())
    except ValueError as exc:
        raise BurstError(f"state file {path} is corrupt ({exc.__class__.__name__}); remove it and run the command again") from None


def load_all(model: Type[M]) -> list[M]:
    kind = "clusters" if model is ClusterHandle else "runs"
    out = []
    for path in sorted(_dir(kind).glob("*.json")):  # files already here (a state dir from before the naming rule included)
        item = _read(model, path)
        if item is not None:
            out.append(item)
    return sorted(out, key=lambda m: m.created)


def delete(model: Type[BaseModel], key: str) -> None:
    kind = "clusters" if model is ClusterHandle else "runs"
    path = _dir(kind) / f"{key}.json"
    if path.parent == _dir(kind):  # names come from handles already on disk; never step outside
        path.unlink(missing_ok=True)
