"""What a command asks of placement, as one value: the workload, and every flag that narrows the
plan or pins a target (provider, GPUs, accelerator, region, spot, node shape, storage, image...).

The CLI (``cli/placement_options.py``: each flag declared once) builds one ``PlacementRequest`` at
its boundary, and the Python API's verbs (``up``, ``check``, ``render``, ``run``, ``tune``,
``plan``) take one (``placement=``; their keywords make one, ``PlacementRequest.given``). From
there it travels whole: ``api``, the planner, the scan and the managed run's controller derive
new ones with ``but``, ``narrowing`` and ``elsewhere`` and never rebuild one field by field. A new
placement option is therefore one field here, one flag line in ``cli/placement_options.py`` and one
filter in ``filters.FILTERS``, which the plan applies pinned or not; a field narrows the plan and follows a managed run to its next
target unless it is named in ``HOW_TO_BUILD`` or ``TARGET_BOUND`` below. ``checked`` turns a bad
value into one line naming its flag.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import BurstError
from .scan import ScanShape

# fields that must be positive whole numbers when given, with their flags
_POSITIVE = {"cpus": "--cpus", "gpus": "--gpus", "nodes": "--nodes", "batch_per_replica": "--batch-per-replica",
             "epochs": "--epochs", "events": "--events", "gpus_per_node": "--gpus-per-node"}

#: the fields that say how to build what the plan chose, on the one target pinned: they never
#: narrow the plan's choice (every other field but ``provider`` does)
HOW_TO_BUILD = ("cpus", "partition", "context", "namespace", "storage", "image", "bundle")
#: the fields bound to the target a managed run lost: its next attempt is planned without them
#: (the rest of the first request, its sizing and limits, goes with the run)
TARGET_BOUND = ("provider", "region", "accelerator", "preemptible", "gpus_per_node", "nodes") + HOW_TO_BUILD


@dataclass(frozen=True)
class PlacementRequest:
    provider: Optional[str] = None          # pin this target (None: the plan picks one)
    workload: Optional[str] = None          # whose profile estimates the run (None: the default workload)
    gpus: Optional[int] = None              # devices (GPUs, TPU chips) in all; on-prem: GPUs to allocate
    cpus: Optional[int] = None              # this machine: CPUs for the local Ray cluster
    accelerator: Optional[str] = None
    preemptible: Optional[bool] = None      # None: the policy's preference
    region: Optional[str] = None
    gpus_per_node: Optional[int] = None     # one node shape only
    nodes: Optional[int] = None             # on-prem scheduler: nodes to allocate; plan: layouts over this many nodes
    partition: Optional[str] = None         # on-prem scheduler's partition
    context: Optional[str] = None           # a Kubernetes site: kubeconfig context (default: the policy's, then the current one)
    namespace: Optional[str] = None         # a Kubernetes site: namespace of burst's objects (default: the policy's)
    storage: Optional[str] = None           # this machine: where checkpoints and results go
    image: Optional[str] = None             # cloud Kubernetes: a prebuilt runtime image
    bundle: Optional[str] = None            # on-prem: a `burst pack` bundle on shared storage
    batch_per_replica: Optional[int] = None  # what the plan estimates (default: the workload's for its preset)
    epochs: Optional[int] = None            # what the plan estimates (default: the policy's, then the profile's)
    events: Optional[int] = None            # training events the plan estimates (default: the profile's dataset)
    scan: Optional[ScanShape] = None        # a hyper-parameter scan's trials side by side
    avoid: tuple[str, ...] = ()             # targets a managed run lost a cluster on: ``provider`` or ``provider:region``
    staged_on: tuple[tuple[str, float], ...] = ()  # (store, staged at) of stores already holding the run's dataset (``burst.home.staged``)
    live: bool = True                       # ask a scheduler for its queue now (False: the policy's figure; a dry run asks nothing)
    max_price_per_hour: Optional[float] = None  # no target dearer than this many dollars an hour (the cluster's price)
    min_gpu_memory: Optional[float] = None  # no accelerator with less memory than this many GB (the catalog's figure)

    def __post_init__(self) -> None:
        # lists from JSON (a managed run's recorded flags) or a caller: hashable tuples, as the fields say
        object.__setattr__(self, "avoid", tuple(self.avoid))
        object.__setattr__(self, "staged_on", tuple(tuple(s) for s in self.staged_on))

    def checked(self) -> "PlacementRequest":
        """This request, or one line naming the flag whose value cannot be placed."""
        from ..values import command_values
        from .. import targets, workloads

        for name, flag in _POSITIVE.items():
            value = getattr(self, name)
            if value is not None and value < 1:
                raise BurstError(f"{flag} must be a positive whole number, got {value}")
        if self.max_price_per_hour is not None and not 0 < self.max_price_per_hour < 1e7:  # also NaN
            raise BurstError(f"--max-price-per-hour must be a number of dollars above 0, got {self.max_price_per_hour}")
        if self.min_gpu_memory is not None and not 0 < self.min_gpu_memory < 1e4:  # also NaN
            raise BurstError(f"--min-gpu-memory must be a number of GB above 0, got {self.min_gpu_memory}")
        if self.provider is not None:
            targets.check_provider(self.provider)
        command_values.kube_context(self.context, "--context")
        command_values.k8s_name(self.namespace, "--namespace")
        if self.workload is not None:
            workloads.check(self.workload)
        return self

    def narrowing(self) -> "PlacementRequest":
        """This request less what only pins a target or says how to build it: what the plan
        chooses a target with when none is pinned."""
        return self.but(provider=None, **{name: None for name in HOW_TO_BUILD})

    def elsewhere(self) -> "PlacementRequest":
        """This request less what binds it to one target (provider, region, accelerator, node
        shape, how to build there): what a managed run's next attempt is planned with."""
        return self.but(**{name: None for name in TARGET_BOUND})

    def but(self, **changes: Any) -> "PlacementRequest":
        """A copy with some fields changed: how every request after the first is made."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def given(cls, placement: "PlacementRequest | None" = None, **flags: Any) -> "PlacementRequest":
        """The request a Python API call asks for: ``placement`` with the keywords given (those
        that are not None) on top; a keyword that is no field is refused in one line."""
        unknown = cls._unknown(flags)
        if unknown:
            raise BurstError(f"{', '.join(unknown)}: not a placement option (options: {', '.join(sorted(cls._fields()))})", exit_code=2)
        return (placement or cls()).but(**{k: v for k, v in flags.items() if v is not None})

    @classmethod
    def _fields(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    @classmethod
    def _unknown(cls, names) -> list[str]:
        """The names among ``names`` that are no field (a renamed field, a mistyped keyword)."""
        return sorted(set(names) - cls._fields())

    @property
    def workload_name(self) -> str:
        from .. import workloads

        return self.workload or workloads.DEFAULT

    def flags(self) -> dict:
        """The fields that are set, as JSON data (a managed run keeps its first placement so)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("scan", "avoid", "live", "staged_on")}
        out = {k: v for k, v in out.items() if v is not None}
        if self.avoid:
            out["avoid"] = list(self.avoid)
        return out

    @classmethod
    def from_flags(cls, flags: dict) -> "PlacementRequest":
        """The request ``flags`` wrote (unknown keys are refused: a field was renamed)."""
        unknown = cls._unknown(flags)
        if unknown:
            raise BurstError(f"placement flags {', '.join(unknown)} are not placement fields")
        return cls(**{**flags, "avoid": tuple(flags.get("avoid", ()))})
