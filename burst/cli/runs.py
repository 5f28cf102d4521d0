"""``burst train | run | logs | report``: training runs.

A train option is a field of ``TrainRequest`` (or of the ``TrainSettings`` it shares with the job)
plus one parameter here with the same name: ``_request`` hands every such parameter on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import workloads
from .clusters import Hours, PolicyFile
from .placement_options import PlacementRequest, takes_placement
from .render import ConsoleReporter, console, emit_json

Workload = Annotated[str, typer.Argument(help=f"workload to train: {' | '.join(workloads.NAMES)}")]
Preset = Annotated[Optional[str], typer.Option(help="the workload's model preset (default: its first; `burst workloads` lists them)")]
Epochs = Annotated[int, typer.Option()]
Batch = Annotated[Optional[int], typer.Option(help="events per replica per step (default: the preset's)")]
Data = Annotated[Optional[str], typer.Option(help="directory of CERN HDF5 files (or converted TFRecords), or a bucket URI")]
Synthetic = Annotated[Optional[int], typer.Option(help="train on this many synthetic Monte Carlo events (default 3000)")]
Workers = Annotated[int, typer.Option(help="Ray Train workers (one per node; CPU workers locally)")]
Seed = Annotated[int, typer.Option()]
ValEvents = Annotated[int, typer.Option(help="held-out events used by validation")]
Steps = Annotated[Optional[int], typer.Option("--steps", help="steps per epoch (default: events // global batch)")]
CheckpointEvery = Annotated[Optional[int], typer.Option("--checkpoint-every", help="also checkpoint inside an epoch every this many steps "
                                                                              "(default: the policy's checkpoint_every_steps; whole epochs only without either)")]
Precision = Annotated[Optional[str], typer.Option(help="what the layers compute in: auto | float32 | mixed_bfloat16 | mixed_float16 "
                                                    "(default: the policy's precision, else auto: bfloat16 where the hardware runs it fast, "
                                                    "float16 on V100/T4, else float32)")]
Managed = Annotated[bool, typer.Option("--managed", help="hand the run to a controller process: it goes on without this terminal, moves to "
                                                          "another target (policy: recovery) when its cluster is lost, enforces the budget and the lease")]
GateFile = Annotated[Optional[Path], typer.Option("--gate", help="quality gate: YAML of summary metric -> largest accepted value; "
                                                                 "a run that misses it ends FAILED_QUALITY (exit 4)")]


def _request(flags: dict):
    """The request made of a command's parameters that are ``TrainRequest`` fields (the gate file
    read into the gate it holds)."""
    from ..lifecycle import quality
    from .. import workloads
    from ..lifecycle.runs import TrainRequest

    fields = {k: v for k, v in flags.items() if k in TrainRequest.model_fields}
    if flags.get("gate_file") is not None:
        fields["gate"] = quality.load(flags["gate_file"], flags.get("workload") or workloads.DEFAULT)
    return TrainRequest.of(**fields)


def _finished(run) -> None:
    if run.run_dir:
        console.print(f"report: {run.run_dir}/report/report.html")


def train(
    workload: Workload,
    cluster: Annotated[str, typer.Option(help="cluster name")] = "local",
    preset: Preset = None,
    epochs: Epochs = 6,
    batch_per_replica: Batch = None,
    data: Data = None,
    synthetic: Synthetic = None,
    workers: Workers = 1,
    detach: Annotated[bool, typer.Option("--detach", help="submit and return")] = False,
    cancel_on_interrupt: Annotated[bool, typer.Option("--cancel", help="Ctrl-C cancels the job instead of detaching")] = False,
    seed: Seed = 0,
    val_events: ValEvents = 400,
    steps_per_epoch: Steps = None,
    gate_file: GateFile = None,
    checkpoint_every_steps: CheckpointEvery = None,
    precision: Precision = None,
    resume: Annotated[Optional[str], typer.Option(help="go on with this earlier run (stopped, failed or lost) from its newest checkpoint, with its settings")] = None,
    budget_usd: Annotated[Optional[float], typer.Option("--budget", help="stop and tear down before this many USD are spent (default: the policy's, from `burst up`)")] = None,
    managed: Managed = False,
    policy_file: Annotated[Optional[Path], typer.Option("--policy", help="with --managed: the policy a move to another target is planned under")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Train a workload on a running cluster as a Ray job, then validate it."""
    from .. import api

    run = api.train(_request(locals()), ConsoleReporter(), policy=policy_file)
    _finished(run)
    if as_json:
        emit_json(run.model_dump(mode="json"))


@takes_placement("cpus", "storage", "image", "bundle")
def run(
    workload: Annotated[str, typer.Argument(help=f"workload to run: {' | '.join(workloads.NAMES)}")] = workloads.DEFAULT,
    cluster: Annotated[str, typer.Option("--name", help="name of the temporary cluster")] = "run-local",
    hours: Hours = None,
    policy_file: PolicyFile = None,
    preset: Preset = None,
    epochs: Epochs = 6,
    batch_per_replica: Batch = None,
    data: Data = None,
    synthetic: Synthetic = None,
    workers: Workers = 1,
    seed: Seed = 0,
    val_events: ValEvents = 400,
    steps_per_epoch: Steps = None,
    gate_file: GateFile = None,
    checkpoint_every_steps: CheckpointEvery = None,
    precision: Precision = None,
    budget_usd: Annotated[Optional[float], typer.Option("--budget", help="stop and tear down before this many USD are spent (default: the policy's)")] = None,
    managed: Managed = False,
    detach: Annotated[bool, typer.Option("--detach", help="with --managed: hand the run over and return")] = False,
    placement: PlacementRequest = None,
) -> None:
    """up + train + validate + down in one; down happens on success, failure and Ctrl-C alike."""
    from .. import api

    _finished(api.run(_request(locals()), policy=policy_file, hours=hours, report=ConsoleReporter(), placement=placement))


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
