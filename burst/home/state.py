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
from typing import Annotated, Iterator, Literal, Optional, Type, TypeVar
from urllib.parse import urlsplit

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import BurstError
from .records import Damaged, ensure_dir, read_record, write_json_atomic

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


def home_path() -> Path:
    """burst's state directory, whether or not it exists yet."""
    return Path(os.environ.get("BURST_HOME") or Path.home() / ".burst").expanduser()


def home() -> Path:
    path = home_path()
    try:
        return ensure_dir(path, "burst's state directory", private=True)
    except Damaged as exc:
        raise Damaged(exc.what, exc.path, exc.why, f"{exc.fix}, or point BURST_HOME at a directory") from None


@contextmanager
def locked(timeout: float = 60.0) -> Iterator[None]:
    """Serialise state changes across burst processes."""
    path = home() / "state.lock"
    lock = FileLock(str(path), timeout=timeout)
    try:
        lock.acquire()
    except (IsADirectoryError, PermissionError, NotADirectoryError) as exc:
        why = "a directory, not a file" if isinstance(exc, IsADirectoryError) else exc.strerror
        raise Damaged("state lock", path, why, f"remove it (rm -r {path}); burst makes it again") from None
    try:
        yield
    finally:
        lock.release()


# What a record may hold: times since the epoch before the year 5000, prices an hour, process ids.
Timestamp = Annotated[float, Field(ge=0, le=95_617_584_000)]
HourlyUsd = Annotated[float, Field(ge=0, le=1_000_000)]
BudgetUsd = Annotated[float, Field(ge=0, le=1e8)]  # the policy's bound
Pid = Annotated[int, Field(ge=1, le=2**31 - 1)]


def _dashboard_url(url: Optional[str]) -> Optional[str]:
    """An http(s) address with a host and a valid port, or None: what the Jobs API client is given."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url[:80]!r} is not an http(s) address with a host")
    return url


CLUSTER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class ClusterHandle(BaseModel):
    """Everything later commands need to reach a cluster burst started."""

    model_config = ConfigDict(allow_inf_nan=False)

    name: str
    provider: str
    cluster_id: str
    state: Literal["starting", "running", "stopping"] = "starting"
    created: Timestamp = Field(default_factory=time.time)
    expires: Timestamp | None = None
    dashboard_url: str | None = None
    gcs_address: str | None = None
    token_path: str | None = None
    temp_dir: str | None = None
    storage_uri: str
    datasets_days: Annotated[int, Field(ge=1, le=36500)] | None = None  # its store deletes staged datasets this old (None: no such rule)
    layout: dict = Field(default_factory=dict)  # e.g. {"nodes": 1, "cpus": 2, "gpus": 0}
    hourly_usd: HourlyUsd = 0.0
    budget_usd: BudgetUsd | None = None  # the policy's total budget: `burst train` stops before it is spent
    pids: list[Pid] = Field(default_factory=list)
    starter_pid: Pid | None = None  # the `burst up` that is starting it (a second `up` waits for it, never kills it)
    region: str | None = None
    accelerator: str | None = None
    preemptible: bool = False
    lease_id: str | None = None
    stack: str | None = None  # Pulumi stack name (cloud providers)
    outputs: dict = Field(default_factory=dict)  # non-secret stack outputs
    plan: dict = Field(default_factory=dict)  # the plan's prediction at `up` (batch, epoch seconds, power): runs compare against it
    idle_minutes: Annotated[float, Field(ge=0, le=1e6)] | None = None  # its watcher takes it down after this long without a job
    watcher_pid: Pid | None = None  # that watcher (burst.controller cluster NAME)

    @field_validator("dashboard_url")
    @classmethod
    def _check_dashboard(cls, url: Optional[str]) -> Optional[str]:
        return _dashboard_url(url)

    @field_validator("cluster_id")
    @classmethod
    def _check_cluster_id(cls, cluster_id: str) -> str:
        """One cluster's id: what ``down`` matches processes, directories and objects on (an empty or
        odd one, from a hand edit, would match other clusters' too)."""
        if not CLUSTER_ID.fullmatch(cluster_id):
            raise ValueError(f"{cluster_id[:40]!r} is not a cluster id (1 to 64 letters, digits, '.', '_' or '-', the first a letter or digit)")
        return cluster_id

    @model_validator(mode="after")
    def _temp_dir_is_the_cluster_s(self) -> "ClusterHandle":
        """The Ray directory ``down`` stops every process in and removes is this cluster's own (an
        absolute path named by its id), never a directory a hand edit put there."""
        if self.temp_dir is not None:
            path = Path(self.temp_dir)
            if not path.is_absolute() or path.name != self.cluster_id or len(path.parts) < 3 or ".." in path.parts:
                raise ValueError(f"temp_dir {self.temp_dir[:80]!r} is not this cluster's Ray directory (an absolute path named by its id "
                                 f"{self.cluster_id!r})")
        return self


class RunRecord(BaseModel):
    """One training run or scan: where it ran, its job, its progress and where its results are."""

    model_config = ConfigDict(allow_inf_nan=False)

    run_id: str
    kind: Literal["run", "scan"] = "run"  # a training run (burst.lifecycle.runs) or a hyper-parameter scan (burst.lifecycle.scans)
    workload: str
    cluster: str
    provider: str
    job_id: str | None = None
    state: str = "PENDING"
    created: Timestamp = Field(default_factory=time.time)
    finished: Timestamp | None = None
    config: dict = Field(default_factory=dict)
    progress: dict = Field(default_factory=dict)
    run_dir: str | None = None
    hourly_usd: HourlyUsd = 0.0
    message: str | None = None
    storage_uri: str | None = None  # the storage its checkpoints went to (where `burst train --resume` finds them)
    attempts: Annotated[int, Field(ge=1, le=10_000)] = 1  # 1 + the number of `--resume`s
    managed: bool = False  # carried by a controller (burst.controller), which moves it when its cluster is lost

    @model_validator(mode="before")
    @classmethod
    def _kind_of_an_older_record(cls, data):
        """Records written before ``kind`` existed said a scan in ``config["kind"]``."""
        if not isinstance(data, dict):
            return data  # not a record at all: the model says so
        config = data.get("config")
        if "kind" not in data and isinstance(config, dict) and config.get("kind") == "scan":
            data = {**data, "kind": "scan"}
        return data


OWNER = "BURST_OWNER"  # set by a burst server for a member's verbs: their id, in every run id they make


def new_run_id(workload: str) -> str:
    """A fresh run id: the workload, the time and four random hex digits; on a burst server, the
    member's id before them, since run ids name directories on stores the whole group shares."""
    owner = os.environ.get(OWNER, "")
    owner = owner if re.fullmatch(r"[0-9a-f]{1,8}", owner) else ""
    return f"{workload}-{time.strftime('%Y%m%d-%H%M%S')}-{owner}{uuid.uuid4().hex[:4]}"


def own_token(handle: ClusterHandle) -> Path | None:
    """The token file ``down`` may delete: the handle's, where burst made it, in the cluster's own
    directory; None for a token the user keeps (an on-prem site's) or a path a hand edit put there."""
    if not handle.token_path:
        return None
    path = Path(handle.token_path)
    home = _dir("clusters") / check_name(handle.name)
    return path if path.parent == home and path.name == "auth_token" else None


def cluster_dir(name: str) -> Path:
    """``clusters/<name>/`` under the state directory, user-only: a cluster's token file, job script, local storage."""
    return ensure_dir(_dir("clusters") / check_name(name), f"cluster {name}'s directory", private=True)


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
    return ensure_dir(home() / kind, f"the {kind} directory")


def save(obj: BaseModel) -> None:
    kind, key = ("clusters", obj.name) if isinstance(obj, ClusterHandle) else ("runs", obj.run_id)
    check_name(key, "cluster" if kind == "clusters" else "run")
    write_json_atomic(_dir(kind) / f"{key}.json", obj.model_dump(mode="json"), private=True)
    if isinstance(obj, ClusterHandle):
        _journal({"event": "saved", "name": obj.name, "cluster_id": obj.cluster_id, "provider": obj.provider, "region": obj.region or "",
                  "hourly_usd": obj.hourly_usd, "created": obj.created, "expires": obj.expires})


JOURNAL = "clusters.journal"


def _journal(entry: dict) -> None:
    """One line in the clusters' journal: every cluster this state directory has had, with its price,
    from its first record to its last, kept after the record goes (a cluster that came and went
    between two looks of a burst server is still charged to its owner: ``burst.server.ledger``)."""
    import json

    with open(home() / JOURNAL, "a") as out:
        out.write(json.dumps({**entry, "at": time.time()}) + "\n")


def record_path(model: Type[BaseModel], key: str) -> Path:
    """Where the record of cluster or run ``key`` is kept."""
    kind = "clusters" if model is ClusterHandle else "runs"
    return _dir(kind) / f"{check_name(key, 'cluster' if kind == 'clusters' else 'run')}.json"


def load(model: Type[M], key: str) -> M | None:
    return _read(model, record_path(model, key))


def damaged(model: Type[BaseModel], key: str, why: str) -> Damaged:
    """A record that reads well but names what cannot be (an unknown provider): damaged all the same."""
    path = record_path(model, key)
    what, fix = _what(model, path)
    return Damaged(what, path, why, fix)


def _what(model: Type[BaseModel], path: Path) -> tuple[str, str]:
    """How a record is named in a message, and how to be rid of a damaged one."""
    if model is ClusterHandle:
        return ("cluster record", f"if cluster {path.stem} still runs, stop it where it runs (its processes, its Slurm job, its "
                f"cloud stack: `pulumi destroy`); then remove the record (rm -r {path})")
    return "run record", f"remove it (rm -r {path}); the run's directory under burst-runs/ keeps its results"


def _read(model: Type[M], path: Path) -> M | None:
    what, fix = _what(model, path)
    try:
        return read_record(path, what, fix, model)
    except FileNotFoundError:
        return None


def load_all(model: Type[M], damaged: Optional[list[Damaged]] = None) -> list[M]:
    """Every record of the kind, oldest first. A damaged one is appended to ``damaged`` when a list
    is given (the caller goes on with the rest and says so), else raised."""
    kind = "clusters" if model is ClusterHandle else "runs"
    out = []
    for path in sorted(_dir(kind).glob("*.json")):  # files already here (a state dir from before the naming rule included)
        try:
            item = _read(model, path)
        except Damaged as exc:
            if damaged is None:
                raise
            damaged.append(exc)
            continue
        if item is not None:
            out.append(item)
    return sorted(out, key=lambda m: m.created)


def delete(model: Type[BaseModel], key: str) -> None:
    kind = "clusters" if model is ClusterHandle else "runs"
    path = _dir(kind) / f"{key}.json"
    if path.parent != _dir(kind):  # names come from handles already on disk; never step outside
        return
    try:
        gone = _read(model, path) if model is ClusterHandle else None
    except Damaged:  # a damaged record's cluster was never journalled as it is now: nothing to close
        gone = None
    path.unlink(missing_ok=True)
    if gone is not None:
        _journal({"event": "gone", "name": gone.name, "cluster_id": gone.cluster_id})
