"""``burst train | run | logs | report``: training runs.

A training flag is a field of ``TrainRequest`` (or of the ``TrainSettings`` it shares with the
job), declared once in ``training_options``: the commands here receive them as one request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..lifecycle.runs import TrainRequest
from .clusters import Hours, PolicyFile
from .placement_options import PlacementRequest, takes_placement
from .render import ConsoleReporter, console, emit_json
from .training_options import takes_training


def _finished(run) -> None:
    if run.run_dir:
        console.print(f"report: {run.run_dir}/report/report.html")


@takes_training(TrainRequest, "cluster", "workers", "cancel_on_interrupt", "gate", "checkpoint_every_steps", "resume", "managed")
def train(
    policy_file: Annotated[Optional[Path], typer.Option("--policy", help="with --managed: the policy a move to another target is planned under")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    request: TrainRequest = None,
) -> None:
    """Train a workload on a running cluster as a Ray job, then validate it."""
    from .. import api

    run = api.train(request, ConsoleReporter(), policy=policy_file)
    _finished(run)
    if as_json:
        emit_json(run.model_dump(mode="json"))


@takes_placement("cpus", "storage", "image", "bundle")
@takes_training(TrainRequest, "workers", "gate", "checkpoint_every_steps", "managed")
def run(
    cluster: Annotated[str, typer.Option("--name", help="name of the temporary cluster")] = "run-local",
    hours: Hours = None,
    policy_file: PolicyFile = None,
    placement: PlacementRequest = None,
    request: TrainRequest = None,
) -> None:
    """up + train + validate + down in one; down happens on success, failure and Ctrl-C alike."""
    from .. import api

    _finished(api.run(request, policy=policy_file, hours=hours, report=ConsoleReporter(), placement=placement))


def logs(run_id: Annotated[str, typer.Argument()], follow: Annotated[bool, typer.Option("--follow", "-f")] = False) -> None:
    """Print a run's job log (from its cluster), optionally following it until the job ends."""
    from .. import api

    from ..unattended.managed import moves

    for line in moves(run_id):  # a managed run: where it ran and why it moved
        typer.echo(f"managed: {line}")
    def notice(line: str) -> None:
        typer.echo(f"note: {line}", err=True)

    if follow:
        api.logs(run_id, follow=True, on_line=typer.echo, on_notice=notice,
                 on_event=lambda e: typer.echo(f"BURST_EVENT {json.dumps(e.model_dump(mode='json'))}"))
    else:
        typer.echo(api.logs(run_id, on_notice=notice), nl=False)


def report(run_id: Annotated[str, typer.Argument()], open_browser: Annotated[bool, typer.Option("--open")] = False) -> None:
    """Print the path of a run's (or a scan's) HTML report (or open it with --open); a scan's trials first."""
    from .. import api

    path = api.report(run_id)
    if path.name == "report.html" and (path.parent / "trials.json").exists():  # a scan: its trials, best first
        from ..lifecycle.scans import table_lines

        for line in table_lines(path.parent):
            console.print(line, highlight=False)
    for line in api.prediction_lines(run_id):
        console.print(line)
    if open_browser:
        import webbrowser

        webbrowser.open(path.as_uri())
    typer.echo(str(path))


def calibrate(run_ids: Annotated[list[str], typer.Argument(help="finished runs on one accelerator")]) -> None:
    """Refit an accelerator's speed from measured runs; later plans use it and say "measured here"."""
    from ..lifecycle.calibrate import calibrate as run_calibration

    c = run_calibration(run_ids)
    console.print(f"{c.accelerator}: {c.per_event_s * 1000:.2f} ms per event per replica (profile said {c.before_s * 1000:.2f}; "
                  f"{c.speed_change:.2f}x the speed) from {len(c.runs)} run(s); recorded in {c.path}")
