"""``burst tune``: a hyper-parameter scan, judged on physics, on a running cluster or on one started for it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import workloads
from .clusters import Hours, PolicyFile
from .placement_options import PlacementRequest, takes_placement
from .render import ConsoleReporter, console, emit_json
from .runs import Batch, Data, Epochs, Precision, Preset, Seed, Steps, Synthetic


@takes_placement("cpus", "image", "bundle")
def tune(
    workload: Annotated[str, typer.Argument(help=f"workload to scan: {' | '.join(workloads.NAMES)}")],
    space: Annotated[Path, typer.Option("--space", help="search-space YAML (examples: workloads/<name>/tune-small.yaml)")],
    trials: Annotated[int, typer.Option(help="trials to sample (a grid dimension multiplies them)")] = 8,
    gpus_per_trial: Annotated[Optional[int], typer.Option(help="GPUs each trial trains on (default 1 on a GPU cluster; CPU clusters: leave out)")] = None,
    max_concurrent: Annotated[Optional[int], typer.Option(help="trials at a time (default: as many as the cluster holds)")] = None,
    epochs: Epochs = 6,
    metric: Annotated[Optional[str], typer.Option(help="physics metric to minimise, computed on held-out MC after every epoch (default: the workload's first)")] = None,
    budget_usd: Annotated[Optional[float], typer.Option("--budget", help="stop every trial (each checkpoints) before this many USD are spent")] = None,
    cluster: Annotated[Optional[str], typer.Option(help="running cluster to scan on (default: start one with --provider, else where the plan for the scan says, and take it down after)")] = None,
    hours: Hours = None,
    policy_file: PolicyFile = None,
    preset: Preset = None,
    batch_per_replica: Batch = None,
    data: Data = None,
    synthetic: Synthetic = None,
    seed: Seed = 0,
    steps_per_epoch: Steps = None,
    precision: Precision = None,
    val_events: Annotated[int, typer.Option(help="held-out events each trial is judged on after every epoch")] = 300,
    grace_period: Annotated[int, typer.Option(help="ASHA: epochs every trial gets before it may be stopped")] = 1,
    reduction_factor: Annotated[int, typer.Option(help="ASHA: 1 in this many trials goes on at each rung")] = 2,
    search: Annotated[str, typer.Option(help="random (grid dimensions expanded) | optuna (pip install 'burst[optuna]')")] = "random",
    detach: Annotated[bool, typer.Option("--detach", help="submit and return")] = False,
    cancel_on_interrupt: Annotated[bool, typer.Option("--cancel", help="Ctrl-C stops every trial instead of detaching")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    placement: PlacementRequest = None,
) -> None:
    """Scan a workload's knobs with Ray Tune (ASHA early stopping), each trial a Ray Train run judged on physics."""
    from .. import api
    from ..errors import BurstError
    from ..lifecycle.scans import TuneRequest

    workloads.check(workload)
    provider = placement.provider
    if search not in ("random", "optuna"):
        raise BurstError(f"--search {search}: choose random or optuna")
    if cluster is not None and provider is not None:
        raise BurstError("--cluster names a running cluster, --provider starts one for the scan: give one of them")
    start = cluster is None  # no running cluster named: start one (--provider, else the plan's choice) and take it down after
    cluster = cluster or f"tune-{provider or 'planned'}"
    request = TuneRequest.of(space, workload=workload, trials=trials, gpus_per_trial=gpus_per_trial, max_concurrent=max_concurrent, epochs=epochs, metric=metric,
                             budget_usd=budget_usd, cluster=cluster, preset=preset, batch_per_replica=batch_per_replica, data=data,
                             synthetic=synthetic, seed=seed, steps_per_epoch=steps_per_epoch, precision=precision, val_events=val_events, grace_period=grace_period,
                             reduction_factor=reduction_factor, search=search, detach=detach, cancel_on_interrupt=cancel_on_interrupt)
    record = api.tune(request, start=start, policy=policy_file, hours=hours, report=ConsoleReporter(), placement=placement)
    if record.run_dir:
        from ..lifecycle.scans import table_lines

        for line in table_lines(Path(record.run_dir)):
            console.print(line, highlight=False)
        console.print(f"report: {record.run_dir}/report.html")
    if as_json:
        emit_json(record.model_dump(mode="json"))
