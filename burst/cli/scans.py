"""``burst tune``: a hyper-parameter scan, judged on physics, on a running cluster or on one started for it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..lifecycle.scans import TuneRequest
from .clusters import Hours, PolicyFile
from .placement_options import PlacementRequest, takes_placement
from .render import ConsoleReporter, console, emit_json
from .training_options import takes_training


@takes_placement("cpus", "image", "bundle")
@takes_training(TuneRequest, "space", "trials", "gpus_per_trial", "max_concurrent", "metric", "grace_period", "reduction_factor",
                "search", "cancel_on_interrupt")
def tune(
    cluster: Annotated[Optional[str], typer.Option(help="running cluster to scan on (default: start one with --provider, else where the plan for the scan says, and take it down after)")] = None,
    hours: Hours = None,
    policy_file: PolicyFile = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    placement: PlacementRequest = None,
    request: TuneRequest = None,
) -> None:
    """Scan a workload's knobs with Ray Tune (ASHA early stopping), each trial a Ray Train run judged on physics."""
    from .. import api
    from ..errors import BurstError

    provider = placement.provider
    if cluster is not None and provider is not None:
        raise BurstError("--cluster names a running cluster, --provider starts one for the scan: give one of them")
    start = cluster is None  # no running cluster named: start one (--provider, else the plan's choice) and take it down after
    if start:
        request = request.model_copy(update={"cluster": f"tune-{provider or 'planned'}"})
    record = api.tune(request, start=start, policy=policy_file, hours=hours, report=ConsoleReporter(), placement=placement)
    if record.run_dir:
        from ..lifecycle.scans import table_lines

        for line in table_lines(Path(record.run_dir)):
            console.print(line, highlight=False)
        console.print(f"report: {record.run_dir}/report.html")
    if as_json:
        emit_json(record.model_dump(mode="json"))
