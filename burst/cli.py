"""The ``burst`` command line. Imports only typer/rich/pydantic at start-up (design decision 9)."""

from __future__ import annotations

import json
import platform
import sys
import time
import uuid
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from . import __version__, state
from .errors import BurstError
from .state import ClusterHandle, RunRecord
from .console import console, out
from .console import emit_json as _emit_json
from .console import fail as _fail
from .planning import bench, catalog, plan, policy_app
from .targets import check_provider

MAX_LEASE_HOURS = 8760.0
app = typer.Typer(add_completion=False, no_args_is_help=True, help="Burst a training run from this machine to whatever hardware a policy allows.")

WORKLOADS = ("gan3d",)
DEFAULT_CLUSTER = "local"
RUNS_ROOT = Path("burst-runs")


def _check_workload(workload: str) -> None:
    if workload not in WORKLOADS:
        raise BurstError(f"unknown workload {workload!r}; choose one of: {', '.join(WORKLOADS)}")


def _positive(name: str, value: Optional[int]) -> None:
    if value is not None and value < 1:
        raise BurstError(f"--{name} must be a positive whole number, got {value}")


def _cluster(name: str) -> ClusterHandle:
    handle = state.load(ClusterHandle, name)
    if handle is None:
        raise BurstError(f"no cluster named {name!r}; start one with `burst up --provider local --name {name}`")
    return handle


# --------------------------------------------------------------------------- up / down


def _choose(pol, gpus: Optional[int], accelerator: Optional[str], preemptible: Optional[bool], provider: Optional[str] = None):
    """The plan's choice under the (loaded) policy and the command line's narrowing."""
    from .planning import make_plan

    plan, _ = make_plan("gan3d", None, None, loaded_policy=pol, gpus=gpus, accelerator=accelerator, preemptible=preemptible,
                        provider=provider)
    if plan.choice is None:
        raise BurstError(f"the plan finds no feasible target: {plan.why}; see `burst plan`")
    return plan.choice


def _up(provider: Optional[str], name: str, cpus: Optional[int], gpus: Optional[int], *, policy_file: Optional[Path] = None,
        accelerator: Optional[str] = None, preemptible: Optional[bool] = None, region: Optional[str] = None,
        hours: Optional[float] = None, dry_run: bool = False, storage: Optional[str] = None) -> tuple[ClusterHandle, bool]:
    """Create (or find) a cluster. Without --provider the plan under the policy picks the target."""
    from . import policy as policy_mod

    if provider is not None:
        check_provider(provider)
    pol = policy_mod.load(policy_file) if policy_file or provider != "local" else None
    if provider is None:
        choice = _choose(pol, gpus, accelerator, preemptible)
        provider = choice.provider
        console.print(f"plan: {choice.provider} {choice.region} {choice.accelerator} x{choice.count}"
                      f"{' preemptible' if choice.preemptible else ''} ({choice.estimate.hours:.1f} h, ${choice.estimate.cost_usd:,.2f})")
        if choice.target == "cloud":
            gpus, accelerator, preemptible, region = choice.count, choice.accelerator, choice.preemptible, choice.region
    budget = pol.budget_usd if pol else None
    if provider == "local":
        if dry_run:
            raise BurstError("--dry-run renders cloud stacks; the local target starts nothing but Ray on this machine")
        from .targets import local

        return local.up(name, cpus=cpus, gpus=gpus, hourly_usd=pol.local.usd_per_hour if pol else 0.0, budget_usd=budget,
                        storage_uri=storage)
    if provider == "ray":
        if dry_run:
            raise BurstError("--dry-run renders cloud stacks; the on-prem Ray cluster already exists")
        site = pol.onprem if pol else None
        if site is None:
            raise BurstError("--provider ray needs a policy with an onprem section (ray_address, accelerator, gpus); pass --policy FILE")
        from .targets import ray as ray_target

        return ray_target.up(name, site.ray_address, gpus or site.gpus, site.accelerator, site.usd_per_gpu_hour * (gpus or site.gpus),
                             storage_uri=site.storage, token_path=site.token_file, budget_usd=budget)
    from .targets import cloud

    if accelerator is None or region is None:
        # Let the plan, narrowed to this provider and what the command line fixed, fill the rest.
        choice = _choose(pol, gpus, accelerator, preemptible, provider=provider)
        accelerator, region = choice.accelerator, region or choice.region
        gpus = gpus or (None if choice.layout and choice.layout.is_tpu else choice.count)
        preemptible = choice.preemptible if preemptible is None else preemptible
        console.print(f"plan: {choice.accelerator} x{choice.count} in {choice.region}{' preemptible' if choice.preemptible else ''} "
                      f"({choice.estimate.hours:.1f} h, ${choice.estimate.cost_usd:,.2f} for {choice.estimate.training_h:.1f} h of training)")
    elif preemptible is None:
        preemptible = pol.preemptible != "never"
    return cloud.up(name, provider, gpus=gpus, accelerator=accelerator, preemptible=bool(preemptible), region=region,
                    policy=pol, hours=hours, dry_run=dry_run)


@app.command()
def up(
    provider: Optional[str] = typer.Option(None, help="local | ray | gcp | gcp-tpu | azure (default: the plan's choice under --policy)"),
    name: Optional[str] = typer.Option(None, help="cluster name (default: local, or the cloud provider's name)"),
    cpus: Optional[int] = typer.Option(None, help="CPUs for the local Ray head (default: all)"),
    gpus: Optional[int] = typer.Option(None, help="GPUs (local: GPUs of this machine to offer)"),
    accelerator: Optional[str] = typer.Option(None, help="V100, A100-40GB, ... or a TPU slice such as v3-8"),
    preemptible: Optional[bool] = typer.Option(None, "--preemptible/--on-demand", help="spot/preemptible capacity (default: the policy's preference)"),
    region: Optional[str] = typer.Option(None, help="cloud region (default: the plan's choice)"),
    policy_file: Optional[Path] = typer.Option(None, "--policy", help="policy YAML (default: policies/default.yaml)"),
    hours: Optional[float] = typer.Option(None, help="lease: resources are labelled to expire after this many hours"),
    storage: Optional[str] = typer.Option(None, help="local: where checkpoints and results go, a directory or a bucket URI (gs://, abfs://, file://)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="render the cloud stack offline (Pulumi mocks) and print what it would create"),
    as_json: bool = typer.Option(False, "--json", help="print the cluster handle as JSON"),
) -> None:
    """Start a cluster and save its handle (on this machine with --provider local)."""
    try:
        _positive("cpus", cpus)
        _positive("gpus", gpus)
        if hours is not None and not 0 < hours <= MAX_LEASE_HOURS:  # also NaN
            raise BurstError(f"--hours must be a number of hours above 0 and at most {MAX_LEASE_HOURS:.0f} (a year), got {hours}")
        started = time.perf_counter()
        from .targets import CLOUD

        name = state.check_name(name or (provider if provider in CLOUD else DEFAULT_CLUSTER))
        if storage is not None and provider != "local":
            raise BurstError("--storage applies to --provider local; cloud clusters get their own bucket")
        result = _up(provider, name, cpus, gpus, policy_file=policy_file, accelerator=accelerator, preemptible=preemptible,
                     region=region, hours=hours, dry_run=dry_run, storage=storage)
    except BurstError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        raise typer.Exit(130)
    if dry_run:
        _print_dry_run(result, as_json)
        return
    handle, created = result
    if as_json:
        _emit_json({**handle.model_dump(mode="json"), "created_now": created})
        return
    verb = f"started in {time.perf_counter() - started:.1f} s" if created else "already running"
    console.print(f"cluster [bold]{name}[/bold] ({handle.provider}) {verb}; dashboard {handle.dashboard_url}")


def _print_dry_run(rendering, as_json: bool) -> None:
    if as_json:
        _emit_json(rendering)
        return
    t = Table(title=f"{rendering['provider']} stack {rendering['stack']} (dry run: nothing was created)")
    for col in ("type", "name", "key inputs"):
        t.add_column(col, overflow="fold")
    for r in rendering["resources"]:
        t.add_row(r["type"], r["name"], ", ".join(f"{k}={v}" for k, v in r.get("summary", {}).items()))
    out.print(t)
    out.print(f"layout: {rendering['layout']['description']}; ${rendering['hourly_usd']:,.2f}/h"
              f"{' (preemptible)' if rendering['preemptible'] else ''}")


@app.command()
def down(
    name: Optional[str] = typer.Argument(None, help="cluster name (default: local)"),
    all_clusters: bool = typer.Option(False, "--all", help="stop every cluster burst started"),
    expired: bool = typer.Option(False, "--expired", help="destroy every cluster whose lease has passed"),
) -> None:
    """Stop (local), forget (on-prem) or destroy (cloud) a cluster, verifying nothing is left."""
    from . import targets

    try:
        if expired:
            now = time.time()
            handles = [h for h in state.load_all(ClusterHandle) if h.expires is not None and h.expires < now]
            if not handles:
                console.print("no expired clusters")
        elif all_clusters:
            handles = state.load_all(ClusterHandle)
            if not handles:
                console.print("no clusters to stop")
        else:
            handles = [_cluster(name or DEFAULT_CLUSTER)]
        for handle in handles:
            targets.down(handle)
            console.print(f"cluster [bold]{handle.name}[/bold] ({handle.provider}) down; nothing left")
    except BurstError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        raise typer.Exit(130)


# --------------------------------------------------------------------------- train / run


def _new_run_id(workload: str) -> str:
    return f"{workload}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    got = {"burst": __version__, "python": platform.python_version()}
    for pkg in ("tensorflow", "keras", "ray", "numpy", "h5py"):
        try:
            got[pkg] = version(pkg)
        except PackageNotFoundError:
            got[pkg] = None
    return got


def _train(handle: ClusterHandle, *args, **kwargs) -> RunRecord:
    """Train on a cluster reachable from here (cloud: through a tunnel open for the command)."""
    from . import targets

    with targets.connect(handle) as reachable:
        return _train_on(reachable, *args, **kwargs)


def _train_on(
    handle: ClusterHandle, workload: str, preset: str, epochs: int, batch_per_replica: Optional[int],
    data: Optional[str], synthetic: Optional[int], workers: int, detach: bool, cancel: bool, seed: int,
    val_events: int, steps: Optional[int], budget_usd: Optional[float] = None,
) -> RunRecord:
    from . import jobs
    from .progress import RunProgress

    run = RunRecord(run_id=_new_run_id(workload), workload=workload, cluster=handle.name, provider=handle.provider,
                    hourly_usd=handle.hourly_usd, config={"preset": preset, "epochs": epochs})
    cpus = int(handle.layout.get("cpus", 1))
    gpus = int(handle.layout.get("gpus", 0))
    job_config = {
        "run_id": run.run_id, "storage": handle.storage_uri, "preset": preset, "epochs": epochs,
        "batch_per_replica": batch_per_replica, "seed": seed, "workers": workers,
        # Ray schedules each worker on (cpus - 1) / W CPUs so the job driver keeps one, but the
        # driver idles while training, so TensorFlow may use every core of the worker's share.
        "cpus_per_worker": max(1, (cpus - 1) // workers),
        "threads": max(1, cpus // workers),
        "gpus_per_worker": gpus // workers if gpus else 0, "val_events": val_events, "steps_per_epoch": steps,
    }
    from .targets import KUBERAY

    if handle.provider in KUBERAY:
        # One Ray Train worker per GPU group of a node (a whole node when the pools are uniform).
        per_worker = int(handle.layout.get("gpus_per_worker", 1))
        job_config.update(workers=int(handle.layout["count"]) // per_worker, gpus_per_worker=per_worker, cpus_per_worker=1, threads=None)
    elif handle.provider == "gcp-tpu":
        job_config.update(tpu=True, workers=1, gpus_per_worker=0, threads=None)
    if data is not None:
        job_config["data"] = _data_for(handle, data, run.run_id)
    else:
        job_config["synthetic"] = synthetic
    run.config = {k: v for k, v in job_config.items() if k not in ("storage",)}
    from .budget import BudgetGuard

    guard = BudgetGuard.for_cluster(handle, budget_usd)
    if guard is not None:
        guard.check_can_start()
    submitted = time.time()
    jobs.submit(handle, run, job_config)
    console.print(f"run [bold]{run.run_id}[/bold] submitted to cluster {handle.name}; its full log: `burst logs {run.run_id}`")
    if detach:
        console.print(f"detached; follow with `burst logs {run.run_id} --follow`")
        return run
    progress = RunProgress(console, run, submitted)

    def watch_budget() -> None:
        message = guard.poll(run.run_id, stop_job=lambda: jobs.client(handle).stop_job(run.job_id)) if guard else None
        if message:
            console.print(f"[yellow]budget guard:[/yellow] {message}")

    try:
        with progress:
            status = jobs.follow(handle, run, progress.on_event, on_poll=watch_budget)
    except KeyboardInterrupt:
        if cancel:
            jobs.client(handle).stop_job(run.job_id)
            run.state = "STOPPED"
            console.print(f"run {run.run_id} cancelled")
        else:
            console.print(f"detached; the run goes on. Follow with `burst logs {run.run_id} --follow`")
        with state.locked():
            state.save(run)
        raise
    run.state = status
    run.finished = time.time()
    run.progress = progress.snapshot()
    (RUNS_ROOT / run.run_id).mkdir(parents=True, exist_ok=True)
    (RUNS_ROOT / run.run_id / "job.log").write_text(jobs.client(handle).get_job_logs(run.job_id))
    stopped = progress.stopped is not None or (guard is not None and guard.requested_at is not None)
    if status == "SUCCEEDED":
        run_dir = jobs.collect(handle, run, RUNS_ROOT)
        run.run_dir = str(run_dir.resolve())
        _write_run_files(run, handle, progress, submitted, run_dir)
    else:
        run.message = progress.failure or f"job ended {status}; see `burst logs {run.run_id}`"
    if stopped:
        run.state = "STOPPED_BUDGET"
        where = progress.stopped or {}
        run.message = (f"stopped by the budget guard at epoch {where.get('epoch', '?')} step {where.get('step', '?')}: "
                       f"${guard.accrued():,.2f} of ${guard.budget_usd:,.2f} spent; final checkpoint {Path(handle.storage_uri) / 'runs' / run.run_id / 'checkpoint'}")
    with state.locked():
        state.save(run)
    if stopped:
        from . import targets

        targets.down(handle)
        raise BurstError(f"run {run.run_id} {run.message}; cluster {handle.name!r} torn down", exit_code=3)
    if status != "SUCCEEDED":
        raise BurstError(f"run {run.run_id} {status.lower()}: {run.message}", exit_code=1)
    console.print(f"report: {Path(run.run_dir) / 'report' / 'report.html'}")
    return run


def _data_for(handle: ClusterHandle, data, run_id: str) -> str:
    """Where the job finds ``--data``: a bucket URI as given, a local path on a local cluster, and
    on a cloud cluster a copy in its bucket (the job's nodes cannot read this machine's disk)."""
    from . import storage
    from .targets import CLOUD

    if "://" in str(data):
        return str(data)
    if handle.provider not in CLOUD:
        return str(Path(data).resolve())
    dest = storage.join(handle.storage_uri, "data", run_id, "source")
    console.print(f"copying {data} to {dest}")
    storage.copy_dir(str(Path(data).resolve()), dest)
    return dest


def _write_run_files(run: RunRecord, handle: ClusterHandle, progress, submitted: float, run_dir: Path) -> None:
    hours = (run.finished - submitted) / 3600
    cost = {"provider": handle.provider, "hourly_usd": handle.hourly_usd, "hours": round(hours, 5), "cost_usd": round(handle.hourly_usd * hours, 4)}
    (run_dir / "cost.json").write_text(json.dumps(cost, indent=1))
    metrics_path = run_dir / "report" / "metrics.json"
    if metrics_path.exists():
        (run_dir / "metrics.json").write_text(metrics_path.read_text())
    job_prov = json.loads((run_dir / "job_provenance.json").read_text()) if (run_dir / "job_provenance.json").exists() else {}
    provenance = {
        "run_id": run.run_id, "workload": run.workload, "config": run.config, "versions": _versions(),
        "target": {"provider": handle.provider, "cluster": handle.name, "layout": handle.layout},
        "timings": {"submitted": submitted, "first_step": progress.first_step_time, "finished": run.finished,
                    "submit_to_first_step_s": (progress.first_step_time - submitted) if progress.first_step_time else None,
                    **job_prov.get("timings", {})},
        "data_hashes": job_prov.get("data_hashes", {}),
        "resumes": progress.resumes,
        "machine": progress.machine,
    }
    (run_dir / "provenance.json").write_text(json.dumps(provenance, indent=1, default=str))


@app.command()
def train(
    workload: str = typer.Argument(..., help="workload to train (gan3d)"),
    cluster: str = typer.Option(DEFAULT_CLUSTER, help="cluster name"),
    preset: str = typer.Option("small", help="small | paper"),
    epochs: int = typer.Option(6),
    batch_per_replica: Optional[int] = typer.Option(None),
    data: Optional[str] = typer.Option(None, help="directory of CERN HDF5 files (or converted TFRecords), or a bucket URI"),
    synthetic: Optional[int] = typer.Option(None, help="train on this many synthetic Monte Carlo events"),
    workers: int = typer.Option(1, help="Ray Train workers (one per node; CPU workers locally)"),
    detach: bool = typer.Option(False, help="submit and return"),
    cancel: bool = typer.Option(False, help="Ctrl-C cancels the job instead of detaching"),
    seed: int = typer.Option(0),
    val_events: int = typer.Option(400, help="held-out events used by validation"),
    steps: Optional[int] = typer.Option(None, help="steps per epoch (default: events // global batch)"),
    budget: Optional[float] = typer.Option(None, help="stop and tear down before this many USD are spent (default: the policy's, from `burst up`)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Train a workload on a running cluster as a Ray job, then validate it."""
    try:
        if budget is not None and budget <= 0:
            raise BurstError(f"--budget must be positive, got {budget}")
        run = _checked_train(workload, cluster, preset, epochs, batch_per_replica, data, synthetic, workers, detach, cancel, seed, val_events, steps, budget)
    except BurstError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        raise typer.Exit(130)
    if as_json:
        _emit_json(run.model_dump(mode="json"))


def _checked_train(workload, cluster, preset, epochs, batch_per_replica, data, synthetic, workers, detach, cancel, seed, val_events, steps, budget=None) -> RunRecord:
    _check_workload(workload)
    for n, v in (("epochs", epochs), ("batch-per-replica", batch_per_replica), ("workers", workers), ("synthetic", synthetic), ("val-events", val_events), ("steps", steps)):
        _positive(n, v)
    if preset not in ("small", "paper"):
        raise BurstError(f"unknown preset {preset!r}; choose small or paper")
    if data is not None and synthetic is not None:
        raise BurstError("give either --data DIR or --synthetic N, not both")
    remote_data = data is not None and "://" in str(data)
    if data is not None and not remote_data and not Path(data).exists():
        raise BurstError(f"--data {data}: no such file or directory")
    if data is None and synthetic is None:
        synthetic = 3000
    handle = _cluster(cluster)
    from .targets import is_alive

    if not is_alive(handle):
        raise BurstError(f"cluster {cluster!r} is not answering; run `burst down {cluster}` then `burst up`", exit_code=1)
    return _train(handle, workload, preset, epochs, batch_per_replica, data, synthetic, workers, detach, cancel, seed, val_events, steps, budget)


@app.command()
def run(
    workload: str = typer.Argument("gan3d", help="workload to run (gan3d)"),
    provider: Optional[str] = typer.Option(None, help="local | ray | gcp | gcp-tpu | azure (default: the plan's choice under --policy)"),
    name: str = typer.Option("run-local", help="name of the temporary cluster"),
    cpus: Optional[int] = typer.Option(None),
    gpus: Optional[int] = typer.Option(None),
    accelerator: Optional[str] = typer.Option(None),
    preemptible: Optional[bool] = typer.Option(None, "--preemptible/--on-demand"),
    policy_file: Optional[Path] = typer.Option(None, "--policy", help="policy YAML (default: policies/default.yaml)"),
    preset: str = typer.Option("small"),
    epochs: int = typer.Option(6),
    batch_per_replica: Optional[int] = typer.Option(None),
    data: Optional[str] = typer.Option(None),
    synthetic: Optional[int] = typer.Option(None),
    workers: int = typer.Option(1),
    seed: int = typer.Option(0),
    val_events: int = typer.Option(400),
    steps: Optional[int] = typer.Option(None),
) -> None:
    """up + train + validate + down in one; down happens on success, failure and Ctrl-C alike."""
    handle = None
    code = 0
    try:
        _check_workload(workload)
        state.check_name(name)
        _positive("cpus", cpus)
        _positive("gpus", gpus)
        handle, _ = _up(provider, name, cpus, gpus, policy_file=policy_file, accelerator=accelerator, preemptible=preemptible)
        console.print(f"cluster [bold]{name}[/bold] up; dashboard {handle.dashboard_url}")
        _checked_train(workload, name, preset, epochs, batch_per_replica, data, synthetic, workers, False, True, seed, val_events, steps)
    except BurstError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    finally:
        if handle is not None:
            from . import targets

            try:
                targets.down(handle)
                console.print(f"cluster [bold]{name}[/bold] stopped")
            except BurstError as exc:
                console.print(f"[red]error:[/red] {exc}", highlight=False)
                code = code or exc.exit_code
    if code:
        raise typer.Exit(code)


# --------------------------------------------------------------------------- status / logs / report


def _refresh_run(run: RunRecord, handles: dict[str, ClusterHandle]) -> RunRecord:
    """Ask the cluster for the state of a run that is not finished yet."""
    if run.state in ("SUCCEEDED", "FAILED", "STOPPED", "STOPPED_BUDGET") or run.job_id is None:
        return run
    handle = handles.get(run.cluster)
    if handle is None:
        run.state = "LOST"
        run.message = f"cluster {run.cluster!r} is gone"
        return run
    from .targets import CLOUD, is_alive

    if handle.provider in CLOUD:
        return run  # reaching a cloud head needs a tunnel; `burst logs RUN` opens one
    if not is_alive(handle):
        run.state = "UNREACHABLE"
        return run
    from . import jobs

    c = jobs.client(handle)
    run.state = jobs.job_status(c, run.job_id)
    events = jobs.parse_events(c.get_job_logs(run.job_id))
    epochs = [e for e in events if e["type"] == "epoch"]
    if epochs:
        run.progress = {"epoch": epochs[-1]["epoch"], "epochs": epochs[-1]["epochs"], "samples_per_s": epochs[-1].get("samples_per_s")}
    return run


@app.command()
def status(as_json: bool = typer.Option(False, "--json")) -> None:
    """Clusters (provider, layout, age, expiry, accrued cost) and runs (state, progress)."""
    try:
        handles = state.load_all(ClusterHandle)
        runs = state.load_all(RunRecord)
        now = time.time()
        cluster_rows = []
        for h in handles:
            alive = False
            if h.state == "running":
                from .targets import is_alive

                alive = is_alive(h, timeout=1.0)
            hours = (now - h.created) / 3600
            cluster_rows.append({"name": h.name, "provider": h.provider, "state": h.state if alive or h.state != "running" else "unreachable",
                                 "layout": h.layout, "age_s": round(now - h.created), "expires": h.expires,
                                 "accrued_usd": round(h.hourly_usd * hours, 4), "dashboard": h.dashboard_url})
        by_name = {h.name: h for h in handles}
        run_rows = [_refresh_run(r, by_name).model_dump(mode="json") for r in runs]
    except BurstError as exc:
        _fail(exc)
    if as_json:
        _emit_json({"clusters": cluster_rows, "runs": run_rows})
        return
    t = Table(title="clusters")
    for col in ("name", "provider", "state", "layout", "age", "lease ends", "accrued $"):
        t.add_column(col)
    for c in cluster_rows:
        layout = c["layout"].get("description") or json.dumps(c["layout"])
        ends = time.strftime("%Y-%m-%d %H:%M", time.localtime(c["expires"])) if c["expires"] else "-"
        t.add_row(c["name"], c["provider"], c["state"], layout, f"{c['age_s']} s", ends, f"{c['accrued_usd']:.2f}")
    out.print(t)
    t = Table(title="runs")
    for col in ("run", "cluster", "state", "progress", "run dir"):
        t.add_column(col)
    for r in run_rows:
        p = r.get("progress") or {}
        t.add_row(r["run_id"], r["cluster"], r["state"], f"epoch {p.get('epoch', '-')}/{p.get('epochs', '-')}" if p else "-", r.get("run_dir") or "-")
    out.print(t)


def _run(run_id: str) -> RunRecord:
    record = state.load(RunRecord, run_id)
    if record is None:
        raise BurstError(f"no run named {run_id!r}; `burst status` lists them")
    return record


@app.command()
def logs(run_id: str = typer.Argument(...), follow: bool = typer.Option(False, "--follow", "-f")) -> None:
    """Print a run's job log (from its cluster), optionally following it until the job ends."""
    from . import jobs

    try:
        record = _run(run_id)
        handle = state.load(ClusterHandle, record.cluster)
        saved = Path(record.run_dir or RUNS_ROOT / run_id) / "job.log"
        if handle is None:  # the cluster is gone (e.g. after `burst run`): show the saved log
            if not saved.exists():
                raise BurstError(f"cluster {record.cluster!r} of run {run_id} is gone and no saved log is at {saved}", exit_code=1)
            typer.echo(saved.read_text(), nl=False)
        else:
            from . import targets

            with targets.connect(handle) as reachable:
                if follow:
                    jobs.follow(reachable, record, on_event=lambda e: typer.echo(f"BURST_EVENT {json.dumps(e)}"), on_line=typer.echo)
                else:
                    typer.echo(jobs.client(reachable).get_job_logs(record.job_id), nl=False)
    except BurstError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        raise typer.Exit(130)


def _collect_finished(record: RunRecord) -> RunRecord:
    """Fetch the results of a run that succeeded while no CLI was attached (detached or killed)."""
    handle = state.load(ClusterHandle, record.cluster)
    if handle is None:
        return record
    record = _refresh_run(record, {handle.name: handle})
    if record.state != "SUCCEEDED":
        return record
    from . import jobs
    from .progress import RunProgress

    progress = RunProgress(console, record, record.created)
    for event in jobs.parse_events(jobs.client(handle).get_job_logs(record.job_id)):
        progress.record(event)
    record.finished = record.finished or time.time()
    run_dir = jobs.collect(handle, record, RUNS_ROOT)
    record.run_dir = str(run_dir.resolve())
    _write_run_files(record, handle, progress, record.created, run_dir)
    with state.locked():
        state.save(record)
    return record


@app.command()
def report(run_id: str = typer.Argument(...), open_browser: bool = typer.Option(False, "--open")) -> None:
    """Print the path of a run's HTML report (or open it with --open)."""
    try:
        record = _run(run_id)
        if not record.run_dir:
            record = _collect_finished(record)
        if not record.run_dir:
            raise BurstError(f"run {run_id} has no report yet (state {record.state})", exit_code=1)
        path = Path(record.run_dir) / "report" / "report.html"
        if not path.exists():
            raise BurstError(f"report {path} is missing; was the run directory moved?", exit_code=1)
    except BurstError as exc:
        _fail(exc)
    if open_browser:
        import webbrowser

        webbrowser.open(path.as_uri())
    typer.echo(str(path))


app.command()(plan)
app.command()(catalog)
app.command()(bench)
app.add_typer(policy_app, name="policy")


@app.callback()
def _main(version: bool = typer.Option(False, "--version", help="print the version")) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main() -> None:
    import signal

    # Ctrl-C must work even when a parent started us with SIGINT ignored (a background job of a
    # script), and SIGTERM (a batch system, `kill`) gets the same clean-up as Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        app()
    except BurstError as exc:  # defensive: any command that forgot to catch
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
