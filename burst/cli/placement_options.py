"""The placement flags, declared once for every command that places a cluster (``plan``, ``up``,
``run``, ``tune``).

Each flag is a field of ``placement.request.PlacementRequest`` and one entry of ``OPTIONS``; a
command marked ``@takes_placement(...)`` gets the common flags and the extra ones it names as
parameters of its own (so ``--help`` lists them), and receives the ones the user gave as one
``PlacementRequest``, ``placement``, which it hands to ``burst.api`` whole. A new placement flag is
therefore a field there and a line here, whichever commands take it.
"""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Annotated, Any, Callable, Optional

import typer

from ..placement.request import PlacementRequest
from ..targets import PROVIDERS  # the registry's names only: no target module is imported

__all__ = ["OPTIONS", "COMMON", "PlacementRequest", "takes_placement"]  # the commands' modules take the request's type from here

OPTIONS: dict[str, Any] = {
    "provider": Annotated[Optional[str], typer.Option(help=f"{' | '.join(PROVIDERS)} (default: the plan's choice under --policy)")],
    "gpus": Annotated[Optional[int], typer.Option(help="accelerators in all (GPUs; TPU chips); local: GPUs of this machine to offer")],
    "accelerator": Annotated[Optional[str], typer.Option(help="V100, A100 (the 40 GB one), H100, ... or a TPU slice such as v3-8 (`burst catalog` lists them)")],
    "gpus_per_node": Annotated[Optional[int], typer.Option(help="one node shape holding this many GPUs (default: the fullest nodes)")],
    "preemptible": Annotated[Optional[bool], typer.Option("--preemptible/--on-demand", help="spot/preemptible or on-demand capacity (default: the policy's preference)")],
    "region": Annotated[Optional[str], typer.Option(help="cloud region (default: the plan's choice)")],
    "nodes": Annotated[Optional[int], typer.Option(help="on-prem scheduler: nodes to allocate (default: enough for --gpus, else 1); plan: only layouts over this many nodes")],
    "cpus": Annotated[Optional[int], typer.Option(help="this machine: CPUs for the local Ray head (default: all)")],
    "storage": Annotated[Optional[str], typer.Option(help="the store for checkpoints, data and results: local, a directory or a bucket URI (gs://, abfs://, file://); a cloud, a bucket of its own (default: the policy's stores)")],
    "image": Annotated[Optional[str], typer.Option(help="gcp/azure: the runtime image the Ray pods run, built from docker/Dockerfile (default: stock Ray image, packages installed at every job start)")],
    "bundle": Annotated[Optional[str], typer.Option(help="slurm/ray: a `burst pack` bundle on storage the nodes share; they install burst from it, not from the network")],
    "partition": Annotated[Optional[str], typer.Option(help="slurm: the partition (default: the policy's, else the cluster's default)")],
    "context": Annotated[Optional[str], typer.Option(help="kubernetes: the kubeconfig context of the cluster (default: the policy's onprem.context, else the current one)")],
    "namespace": Annotated[Optional[str], typer.Option(help="kubernetes: the namespace of burst's objects (default: the policy's onprem.namespace)")],
    "batch_per_replica": Annotated[Optional[int], typer.Option(help="batch per replica the plan predicts (default: the preset's)")],
    "epochs": Annotated[Optional[int], typer.Option(help="epochs the plan estimates (default: the policy's, then the workload profile's)")],
    "events": Annotated[Optional[int], typer.Option(help="training events the plan estimates (default: the workload profile's dataset)")],
    "max_price_per_hour": Annotated[Optional[float], typer.Option(help="no cluster dearer than this many USD an hour (a managed run's moves keep to it too)")],
    "min_gpu_memory": Annotated[Optional[float], typer.Option(help="no accelerator with less memory than this many GB (the catalog's accelerator_memory_gb)")],
}
COMMON = ("provider", "gpus", "accelerator", "gpus_per_node", "preemptible", "region", "nodes", "max_price_per_hour", "min_gpu_memory")


def takes_placement(*extra: str) -> Callable[[Callable], Callable]:
    """Give a command the common placement flags and ``extra`` ones; it receives those given as
    ``placement``, one ``PlacementRequest`` (flags left out keep the field's default)."""
    fields = COMMON + tuple(f for f in extra if f not in COMMON)
    unknown = [f for f in fields if f not in OPTIONS]
    if unknown:
        raise ValueError(f"no placement flag {unknown}")

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command)
        hints = typing.get_type_hints(command, include_extras=True)  # the command's own options, evaluated (its annotations are strings)
        own = [p.replace(annotation=hints[p.name]) for p in signature.parameters.values() if p.name != "placement"]
        added = [inspect.Parameter(f, inspect.Parameter.KEYWORD_ONLY, annotation=OPTIONS[f], default=None) for f in fields]

        @functools.wraps(command)
        def with_placement(**given: Any) -> Any:
            placement = PlacementRequest(**{f: v for f in fields if (v := given.pop(f)) is not None})
            return command(placement=placement, **given)

        with_placement.__signature__ = signature.replace(parameters=own + added)  # what Typer reads the options from
        return with_placement

    return decorate
