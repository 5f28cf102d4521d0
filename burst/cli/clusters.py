"""``burst up | down | status``: clusters."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from .placement_options import PlacementRequest, takes_placement
from .render import ConsoleReporter, console, emit_json, out

Hours = Annotated[Optional[float], typer.Option(help="lease: cloud resources are labelled to expire after this many hours; slurm: the walltime")]
PolicyFile = Annotated[Optional[Path], typer.Option("--policy", help="policy YAML (default: policies/default.yaml)")]


@takes_placement("cpus", "storage", "image", "bundle", "partition", "context", "namespace", "batch_per_replica", "epochs")
def up(
    name: Annotated[Optional[str], typer.Option(help="cluster name (default: local, or the provider's name)")] = None,
    policy_file: PolicyFile = None,
    hours: Hours = None,
    wait: Annotated[bool, typer.Option("--wait", help="slurm, kubernetes with Kueue: wait for a queued allocation to start")] = False,
    idle_minutes: Annotated[Optional[float], typer.Option("--idle-minutes", help="a watcher process takes the cluster down after this many minutes without a job, with or without a CLI (clouds: also at the lease's end)")] = None,
    check: Annotated[bool, typer.Option("--check", help="cloud: only run the pre-flight (quota, zone, runtime) against the provider's APIs; create nothing")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="render the cloud stack offline (Pulumi mocks) and print what it would create")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the cluster handle as JSON")] = False,
    placement: PlacementRequest = None,
) -> None:
    """Start a cluster and save its handle (on this machine with --provider local)."""
    from .. import api

    report = ConsoleReporter()
    if dry_run:
        _print_dry_run(api.render(name=name, policy=policy_file, hours=hours, report=report, placement=placement), as_json)
        return
    if check:
        api.check(policy=policy_file, report=report, placement=placement)
        return
    result = api.up(name=name, policy=policy_file, hours=hours, wait=wait, idle_minutes=idle_minutes, report=report, placement=placement)
    handle = result.handle
    if as_json:
        emit_json({**handle.model_dump(mode="json"), "created_now": result.created_now})
        return
    if handle.state != "running":
        console.print(f"cluster {handle.name} ({handle.provider}) recorded; it is not running yet")
        return
    verb = f"started in {result.seconds:.1f} s" if result.created_now else "already running"
    console.print(f"cluster {handle.name} ({handle.provider}) {verb}; dashboard {handle.dashboard_url or 'through a tunnel'}")


def _print_dry_run(rendering: dict, as_json: bool) -> None:
    if as_json:
        emit_json(rendering)
        return
    if "stack" not in rendering:  # manifests for a Kubernetes cluster burst did not create
        t = Table(title=f"{rendering['provider']} {rendering['context']}/{rendering['namespace']} (dry run: nothing was created)")
        for col in ("kind", "name", "namespace"):
            t.add_column(col, overflow="fold")
        for r in rendering["resources"]:
            t.add_row(r["kind"], r["metadata"]["name"], r["metadata"].get("namespace", "-"))
        out.print(t)
        out.print(f"{rendering['operator']}; storage: {rendering['storage']}; ${rendering['hourly_usd']:,.2f}/h; {rendering['note']}")
        return
    t = Table(title=f"{rendering['provider']} stack {rendering['stack']} (dry run: nothing was created)")
    for col in ("type", "name", "key inputs"):
        t.add_column(col, overflow="fold")
    for r in rendering["resources"]:
        t.add_row(r["type"], r["name"], ", ".join(f"{k}={v}" for k, v in r.get("summary", {}).items()))
    out.print(t)
    out.print(f"layout: {rendering['layout']['description']}; ${rendering['hourly_usd']:,.2f}/h"
              f"{' (preemptible)' if rendering['preemptible'] else ''}")
    store = rendering.get("store")
    if store:
        if store["named"]:
            out.print(f"store: {store['uri']} (named; the cluster is granted access, `burst down` leaves it)")
        else:
            days = ", ".join(f"{what} {n} d" for what, n in store["lifecycle_days"].items())
            out.print(f"store: {store['uri']}: stack {store['stack']} ({len(store['resources'])} resources), made once for the region "
                      f"and kept after `burst down`; deletes {days} after they are written")


def down(
    name: Annotated[Optional[str], typer.Argument(help="cluster name (default: local)")] = None,
    all_clusters: Annotated[bool, typer.Option("--all", help="stop every cluster burst started")] = False,
    expired: Annotated[bool, typer.Option("--expired", help="destroy every cluster whose lease has passed")] = False,
    discard_checkpoints: Annotated[bool, typer.Option("--discard-checkpoints", help="take down a cluster whose claim holds a stopped run's checkpoints that cannot be copied off")] = False,
) -> None:
    """Stop (local), forget (on-prem) or destroy (cloud) a cluster, verifying nothing is left."""
    from .. import api

    if not api.down(name, all_clusters=all_clusters, expired=expired, report=ConsoleReporter(),
                    discard_checkpoints=discard_checkpoints) and (all_clusters or expired):
        console.print("no expired clusters" if expired else "no clusters to stop")


def _progress(r) -> str:
    """A run's progress in a few words; a value of the wrong kind (the record is the job's word) is shown as written."""
    p = r.progress or {}
    number = lambda v: v if isinstance(v, (int, float)) and not isinstance(v, bool) else None  # noqa: E731
    if r.kind == "scan":
        best = f"; best {number(p.get('best')):.4g}" if number(p.get("best")) is not None else ""
        return f"trials: {p.get('running', '?')} running, {p.get('terminated', '?')} ended, {p.get('pending', '?')} pending{best}"
    done = p.get("epoch") if p.get("epoch") is not None else 0
    usage = f"; {p['usage']}" if isinstance(p.get("usage"), str) and r.state == "RUNNING" else ""  # the job's last usage line
    return f"epoch {done}/{p.get('epochs', '-')}{usage}" if p else "-"


def status(
    run_id: Annotated[Optional[str], typer.Argument(help="one run: its row, its attempts and its moves' timeline")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Clusters (provider, layout, age, expiry, accrued cost) and runs (state, progress)."""
    from .. import api

    now = api.status(run_id)
    if as_json:
        emit_json(now.model_dump(mode="json"))
        return
    t = Table(title="clusters")
    for col in ("name", "provider", "state", "layout", "age", "lease ends", "accrued $"):
        t.add_column(col)
    for c in now.clusters:
        layout = c.layout.get("description") or json.dumps(c.layout)
        ends = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.expires)) if c.expires else "-"
        t.add_row(c.name, c.provider, c.state, layout, f"{c.age_s} s", ends, f"{c.accrued_usd:.2f}")
    for d in now.damaged:
        if d.kind == "cluster record":
            t.add_row(d.name, "-", "damaged", f"{d.path}: {d.why}; {d.fix}", "-", "-", "-")
    out.print(t)
    t = Table(title="runs")
    for col in ("run", "cluster", "state", "progress", "run dir"):
        t.add_column(col)
    for r in now.runs:
        t.add_row(r.run_id, r.cluster, r.state, _progress(r), r.run_dir or "-")
    for d in now.damaged:
        if d.kind != "cluster record":
            t.add_row(d.name, "-", "damaged", f"{d.kind} {d.path}: {d.why}; {d.fix}", "-")
    out.print(t)
    if run_id is not None and now.attempts.get(run_id):
        _attempts_table(now.attempts[run_id])
        for line in now.timelines.get(run_id, []):
            out.print(f"moved: {line}", highlight=False, soft_wrap=True)
    for moved_id, lines in now.moves.items():
        for line in lines:
            out.print(f"{moved_id}: {line}", highlight=False)
    for run_id in now.revived:
        console.print(f"managed run {run_id}: its controller was gone; started again")
    for name in now.revived_watchers:
        console.print(f"cluster {name}: its watcher (idle stop, lease end) was gone; started again")


def _attempts_table(attempts: list[dict]) -> None:
    """A managed run's attempts: where each ran, its times of day, how it ended, what it cost."""
    from ..unattended.timeline import clock

    t = Table(title="attempts")
    for col in ("#", "cluster", "provider", "began", "cluster up", "first step", "last answered", "ended", "how", "$"):
        t.add_column(col)
    for a in attempts:
        t.add_row(str(a["number"]), a["cluster"], a["provider"] or "-", clock(a["started"]), clock(a.get("cluster_up")),
                  clock(a.get("first_step")), clock(a.get("last_seen")), clock(a.get("ended")), a.get("how") or "running",
                  f"{a.get('cost_usd') or 0:.4f}")
    out.print(t)


def monitor(
    name: Annotated[str, typer.Argument(help="cluster name")],
    port: Annotated[Optional[int], typer.Option(help="Prometheus' port on 127.0.0.1 (default: a free one)")] = None,
    stop: Annotated[bool, typer.Option("--stop", help="stop the cluster's Prometheus")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """A Prometheus on this machine's loopback scraping the cluster's Ray metrics (every node, and
    each training worker's samples/s); Grafana dashboards beside it. `burst down` stops it."""
    from .. import api

    mon = api.monitor(name, port=port, stop=stop)
    if mon is None:
        console.print(f"cluster {name}: its Prometheus is stopped")
        return
    if as_json:
        emit_json(mon.model_dump(mode="json"))
        return
    out.print(f"Prometheus for cluster {name} at {mon.url} (pid {mon.pid}; loopback only; data in {mon.directory})", highlight=False)
    if mon.relay_url:
        out.print(f"it scrapes the cluster's nodes through the metrics relay on its head, tunnelled to {mon.relay_url} (pid {mon.forward_pid})",
                  highlight=False)
    out.print("a run's throughput: ray_burst_samples_per_second{run=\"RUN\"}; a node's CPU: ray_node_cpu_utilization", highlight=False)
    out.print(f"Grafana dashboards (import them, with this Prometheus as the data source): {', '.join(mon.dashboards)}", highlight=False)
    out.print(f"`burst monitor {name} --stop` or `burst down {name}` stops it", highlight=False)
