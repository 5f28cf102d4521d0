"""The interface every target implements, and the small types that cross it.

A target turns a ``Placement`` (what the placement module chose, or what the user pinned) and a
``Lease`` (how long, how much) into a running Ray cluster recorded as a ``ClusterHandle``; it says
how a job on that cluster is shaped (``job_resources``, ``job_runtime``), how this machine reaches
the cluster's head (``reach``), and how to take everything down again (``down``).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Iterator, Literal, Optional

from ..errors import BurstError
from ..client.jobs import JobRuntime
from ..home.state import ClusterHandle

if TYPE_CHECKING:
    from ..values.placement import Placement

class Reporter:
    """How a long operation tells its user what is happening. This base says nothing (the Python
    API's default); the CLI's reporter prints lines and draws progress bars."""

    def say(self, message: str) -> None:
        """One line for the user."""

    @contextmanager
    def stack_progress(self, verb: str) -> Iterator["StackWatcher"]:
        """Watch one Pulumi operation (``verb``: creating, destroying)."""
        yield StackWatcher()


    @contextmanager
    def run_progress(self, run, tracker) -> Iterator["RunWatcher"]:
        """Watch one training run's events (``tracker`` holds what they said so far)."""
        yield RunWatcher()


class RunWatcher:
    """Receives a training run's events as they come (this base ignores them)."""

    def on_event(self, event) -> None:
        pass


class StackWatcher:
    """Receives a Pulumi operation's engine events and output lines (this base ignores them)."""

    def on_event(self, event) -> None:
        pass

    def on_output(self, line: str) -> None:
        pass


QUIET = Reporter()


@dataclass(frozen=True)
class Lease:
    """How long a cluster may live (``None``: no limit set) and how it starts; what a run on it may
    spend is not the target's to know (``burst.lifecycle.budget.run_budget``)."""

    hours: Optional[float] = None
    wait: bool = False  # a scheduler's allocation: wait until it starts (False: say it is queued and return)
    idle_minutes: Optional[float] = None  # the cluster ends itself after this long without a job (its keeper)


@dataclass(frozen=True)
class QueueWait:
    """A scheduler's answer: hours until a job would start (None: it could not be asked, and why)."""

    hours: Optional[float]
    note: str = ""


@dataclass(frozen=True)
class JobResources:
    """How a training job is spread over a cluster: Ray Train workers and what each one gets."""

    workers: int
    cpus_per_worker: int = 1
    gpus_per_worker: int = 0
    threads: Optional[int] = None  # TensorFlow CPU threads per worker (None: TensorFlow decides)
    tpu: bool = False              # the job runs as one Ray task on a TPU host, not under Ray Train
    tpu_hosts: int = 1             # hosts of the TPU slice
    tpu_name: Optional[str] = None  # the slice's name (what TPUClusterResolver resolves on a multi-host slice)

    def runs_precision(self, precision: Optional[str], cluster: str) -> None:
        """BurstError unless these devices can compute in ``precision``: float16 is for NVIDIA GPUs
        (TPUs compute in bfloat16, and TensorFlow has no float16 CPU kernel for 3D pooling)."""
        if precision == "mixed_float16" and (self.tpu or not self.gpus_per_worker):
            raise BurstError(f"--precision mixed_float16 needs NVIDIA GPUs, and cluster {cluster} has "
                             f"{'TPUs' if self.tpu else 'none'}; use mixed_bfloat16 or float32 (or auto)")


class Target(ABC):
    """One provider. Subclasses set the class attributes and implement ``up``, ``down``, ``is_alive``."""

    provider: ClassVar[str]
    kind: ClassVar[Literal["local", "onprem", "cloud"]]
    default_cluster_name: ClassVar[str] = "local"
    vendor: ClassVar[Optional[str]] = None  # the cloud whose network and storage it uses (data residency, egress)
    provisions: ClassVar[bool] = False      # creates resources with `up` and destroys them with `down`
    supports_spot: ClassVar[bool] = False   # offers preemptible capacity
    is_scheduler: ClassVar[bool] = False    # runs jobs through a batch scheduler with a queue
    keeper_ends_lease: ClassVar[bool] = False  # a keeper beside the cluster ends it at its lease's end (not a walltime's notice):
                                               # a run on it is asked to checkpoint before, and what the keeper ended is not lost
    renders_offline: ClassVar[bool] = False  # `up --dry-run` can show what it would create
    reads_local_paths: ClassVar[bool] = True  # the job's nodes can read this machine's files
    takes_storage: ClassVar[bool] = False   # `up --storage` chooses where results go
    runs_images: ClassVar[bool] = False     # `up --image` chooses the container image its nodes run
    takes_bundle: ClassVar[bool] = False    # `up --bundle` installs burst on its nodes from a `burst pack` bundle
    takes_context: ClassVar[bool] = False   # `up --context/--namespace` choose a Kubernetes cluster and namespace
    store_schemes: ClassVar[tuple[str, ...]] = ()  # the bucket URIs of its cloud (gs, abfs): what keeping data there costs
    tpu_hosts_driven: ClassVar[Optional[int]] = None  # TPU slices: how many hosts its jobs train on (None: any)

    # ------------------------------------------------------------------ lifecycle

    def check_prerequisites(self, action: str) -> None:
        """Raise one line naming what is missing (a CLI, credentials) before anything is created."""

    @abstractmethod
    def up(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> tuple[ClusterHandle, bool]:
        """Start (or find) the cluster ``name``; returns (handle, created now)."""

    def render(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> dict:
        """What ``up`` would create, computed offline."""
        raise BurstError(f"--dry-run renders cloud stacks; the {self.provider} target creates no cloud resources")

    @abstractmethod
    def down(self, handle: ClusterHandle, report: Reporter = QUIET) -> None:
        """Stop or destroy the cluster, verify nothing is left, forget the handle."""

    @abstractmethod
    def is_alive(self, handle: ClusterHandle, timeout: float = 2.0) -> bool:
        """True while the cluster can take jobs."""

    def kept_job_log(self, handle: ClusterHandle, job_id: str) -> Optional[Path]:
        """Where a job's log outlives its Ray head on this machine (``burst logs`` of a run whose head
        died reads it there); None: it lives only on the head."""
        return None

    def is_gone(self, handle: ClusterHandle) -> bool:
        """True only when the target knows the cluster has ended (its scheduler says the job ended,
        none of its processes is left), asked without reaching its Ray head: a controller that cannot
        reach a head tells a broken way to it (wait, reopen) from a cluster that is gone (move the
        run now). False where the target cannot tell without the head."""
        return False

    def adopt(self, handle: ClusterHandle, report: Reporter = QUIET) -> Optional[ClusterHandle]:
        """A cluster whose starter died while creating it (``state`` starting): wait for what is
        still creating it to finish and return the handle, running, if it came up; None when it
        did not (then it may be taken down: nothing works on it any more)."""
        return None

    def storage_outlives(self, handle: ClusterHandle) -> bool:
        """True when the cluster's storage is still there after ``down`` (a directory, a bucket it
        was given); False when ``down`` deletes it with the cluster (its own bucket or claim), so
        that what a run must keep is copied off first."""
        return True

    def answers_here(self, handle: ClusterHandle) -> bool:
        """True when this machine reaches the head without opening a tunnel (``status`` asks only these)."""
        return True

    @contextmanager
    def reach(self, handle: ClusterHandle) -> Iterator[ClusterHandle]:
        """The handle with a dashboard URL reachable from here, for the length of a command."""
        yield handle

    def metrics_discovery(self, handle: ClusterHandle) -> Optional[Path]:
        """Where `burst monitor` finds every node's metrics endpoint, for a cluster that answers
        here: Ray's own service-discovery file where it is readable here, None to ask the cluster's
        dashboard for its nodes (its nodes are on a network this machine reaches). A cluster reached
        through a tunnel is scraped through the head's metrics relay instead (``forward_command``)."""
        return None

    def forward_command(self, handle: ClusterHandle, local_port: int, remote_port: int, workdir: Path) -> Optional[list[str]]:
        """A command that forwards 127.0.0.1:``local_port`` to ``remote_port`` on the head's loopback
        until it is stopped, through the tunnel burst reaches the cluster by (``burst monitor`` holds
        one to the head's metrics relay; files it needs go in ``workdir``); None for a cluster that
        answers here."""
        return None

    def serves(self, site) -> bool:
        """True when this target runs jobs on the policy's on-prem ``site`` (on-prem targets only)."""
        return False

    def queue_estimate(self, site, nodes: int, hours: float) -> "QueueWait":
        """How long a job of ``nodes`` nodes for ``hours`` would wait now (schedulers ask theirs)."""
        return QueueWait(None, "not a scheduler")

    def describe_state(self, handle: ClusterHandle) -> str:
        """The cluster's state as ``burst status`` shows it, asked live where that is cheap."""
        if handle.state != "running":
            return handle.state
        return "running" if not self.answers_here(handle) or self.is_alive(handle, timeout=1.0) else "unreachable"

    def stopped_reason(self, handle: ClusterHandle) -> str:
        """Why a cluster that was running stopped, as far as the target can tell."""
        return "its Ray head does not answer"

    def not_ready(self, handle: ClusterHandle) -> str:
        """Why a recorded cluster takes no jobs, and what to do (when ``is_alive`` is false)."""
        return f"cluster {handle.name!r} is not answering; run `burst down {handle.name}` then `burst up`"

    # ------------------------------------------------------------------ jobs

    def job_resources(self, handle: ClusterHandle, workers: int) -> JobResources:
        """Ray Train workers over the cluster's CPUs and GPUs (``workers`` asked by the user)."""
        cpus = int(handle.layout.get("cpus", 1))
        gpus = int(handle.layout.get("gpus", 0))
        # Ray schedules each worker on (cpus - 1) / W CPUs so the job driver keeps one, but the
        # driver idles while training, so TensorFlow may use every core of the worker's share.
        return JobResources(workers=workers, cpus_per_worker=max(1, (cpus - 1) // workers), threads=max(1, cpus // workers),
                            gpus_per_worker=gpus // workers if gpus else 0)

    def job_runtime(self, handle: ClusterHandle) -> JobRuntime:
        """The cluster runs the same Python as this machine (same burst installation)."""
        return JobRuntime()

    def job_storage(self, handle: ClusterHandle) -> str:
        """The cluster's storage as the job sees it (the same URI as here, unless the nodes mount it elsewhere)."""
        return handle.storage_uri

    def job_path(self, handle: ClusterHandle, uri: str) -> str:
        """``uri`` on this cluster's storage as the job sees it (other URIs unchanged)."""
        here, there = handle.storage_uri.rstrip("/"), self.job_storage(handle).rstrip("/")
        return there + uri[len(here):] if here != there and (uri == here or uri.startswith(here + "/")) else uri

    def stage_data(self, handle: ClusterHandle, data: str, run_id: str, report: Reporter = QUIET) -> str:
        """Where the job finds ``--data``: a bucket URI as given, a path the cluster can read, or the
        dataset staged on the cluster's store once, under its content hash (``client.datasets``)."""
        if "://" in str(data):
            return str(data)
        if self.reads_local_paths:
            return str(Path(data).resolve())
        from ..client import datasets

        report.say(f"staging {data} on {handle.storage_uri} (once per store: a dataset is kept under its content hash)")
        staged = datasets.stage(Path(data), handle.storage_uri, in_use_until=handle.expires, datasets_days=handle.datasets_days)
        from ..home import staged as index

        index.remember(Path(data), staged.key, handle.storage_uri, staged.bytes_total, staged.staged_at)  # the plan prices staging here at 0 next time
        if staged.renewed_from is not None:
            report.say(f"dataset {staged.key} was staged {time.strftime('%Y-%m-%d', time.gmtime(staged.renewed_from))} and the store "
                       f"deletes datasets after {handle.datasets_days} days, before this cluster's lease ends: copied again, "
                       f"its age starts over")
        report.say(f"dataset {staged.key}: {staged.bytes_copied:,} of {staged.bytes_total:,} bytes copied"
                   + (" (already on the store)" if staged.bytes_copied == 0 else "") + f"; {staged.uri}")
        return staged.uri
