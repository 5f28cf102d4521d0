"""burst from Python: the same verbs as the command line, returning data and printing nothing.

    from burst import api
    cluster = api.up("local", cpus=2).handle
    run = api.train(api.TrainRequest.of(cluster=cluster.name, epochs=2, synthetic=1000))
    print(run.run_dir, api.report(run.run_id))
    api.down(cluster.name)

Errors are ``burst.errors.BurstError`` with a one-line message and the exit code the CLI uses.
Pass a ``Reporter`` (``burst.targets.base``) to hear about progress; the default says nothing.
"""

from __future__ import annotations


import time
from pathlib import Path
from typing import Callable, Optional

from pydantic import BaseModel

from .lifecycle import budget, runs
from .home import state
from . import targets
from .errors import BurstError
from .home.records import Damaged
from .placement.request import PlacementRequest
from .lifecycle.runs import TrainRequest
from .home.state import ClusterHandle, RunRecord
from .targets.base import QUIET, Lease, Reporter
from .lifecycle.placing import load_policy, place

__all__ = ["connect", "plan", "up", "render", "down", "train", "run", "tune", "status", "logs", "report", "TrainRequest", "UpResult", "Status",
           "ClusterStatus", "DamagedRecord", "StagedDataset", "datasets", "remove_dataset", "BurstError"]

MAX_LEASE_HOURS = 8760.0


class UpResult(BaseModel):
    handle: ClusterHandle
    created_now: bool
    seconds: float


class ClusterStatus(BaseModel):
    name: str
    provider: str
    state: str
    layout: dict
    age_s: int
    expires: Optional[float]
    accrued_usd: float
    dashboard: Optional[str]


class DamagedRecord(BaseModel):
    """A record in the state directory that cannot be read: shown, never acted on."""

    kind: str   # "cluster record", "run record", "managed-run record"
    name: str
    path: str
    why: str
    fix: str

    @classmethod
    def of(cls, exc: Damaged) -> "DamagedRecord":
        return cls(kind=exc.what, name=exc.path.stem, path=str(exc.path), why=exc.why, fix=exc.fix)


class Status(BaseModel):
    clusters: list[ClusterStatus]
    runs: list[RunRecord]
    moves: dict[str, list[str]] = {}  # a managed run's move log, one line each (run id -> lines)
    timelines: dict[str, list[str]] = {}  # a managed run's moves as times: lost, judged, next cluster up, first step (run id -> lines)
    attempts: dict[str, list[dict]] = {}  # a managed run's attempts as recorded (run id -> attempts, oldest first)
    revived: list[str] = []           # managed runs whose controller was gone and was started again
    revived_watchers: list[str] = []  # clusters whose watcher (idle stop, lease end) was gone and was started again
    damaged: list[DamagedRecord] = []  # records that cannot be read (the rest is shown as usual)


def plan(workload: Optional[str] = None, policy=None, catalog: Optional[Path] = None, *, placement: Optional[PlacementRequest] = None,
         data: Optional[str] = None, **flags):
    """Every candidate target, estimated and ranked under the policy, with the choice and why.

    ``placement`` (or its fields as keywords: ``gpus``, ``epochs``, ``events``, ``provider``,
    ``accelerator``, ``preemptible``, ``region``, ``scan``: a ``placement.scan.ScanShape``, the
    plan is then for a hyper-parameter scan's trials side by side, ...) narrows it; ``data``: the
    run's dataset directory (a store this machine already staged it on costs no staging)."""
    from .catalog import offers as catalog_mod
    from .placement import planner, profile

    ask = PlacementRequest.given(placement, workload=workload, **flags)
    if data is not None:
        from .home import staged

        if "://" not in str(data) and not Path(data).is_dir():
            raise BurstError(f"--data {data}: no such directory; give the dataset directory the run trains on")
        ask = ask.but(staged_on=staged.holding(data))
    ask = ask.checked()
    return planner.plan(load_policy(policy), profile.load(ask.workload_name), catalog_mod.load(catalog), ask)


def _lease(hours: Optional[float], wait: bool = False, idle_minutes: Optional[float] = None) -> Lease:
    if hours is not None and not 0 < hours <= MAX_LEASE_HOURS:  # also NaN
        raise BurstError(f"--hours must be a number of hours above 0 and at most {MAX_LEASE_HOURS:.0f} (a year), got {hours}")
    return Lease(hours=hours, wait=wait, idle_minutes=idle_minutes)


def up(provider: Optional[str] = None, name: Optional[str] = None, *, placement: Optional[PlacementRequest] = None, policy=None,
       hours: Optional[float] = None, wait: bool = False, idle_minutes: Optional[float] = None, report: Reporter = QUIET,
       **flags) -> UpResult:
    """Start a cluster (or find it running) and record its handle. Without ``provider`` the plan
    under the policy picks the target; ``placement`` (or its fields as keywords: ``gpus``,
    ``accelerator``, ``region``, ``cpus``, ``storage``, ...) pins it, under the same policy rules.
    On a batch scheduler ``wait`` waits for a queued allocation to start (else ``up`` says it is
    queued and returns; the handle's ``state`` is then ``starting``). ``idle_minutes``: a watcher
    process takes the cluster down after that long without a job (and at its lease's end),
    whether or not a CLI is running; ``hours``: the lease."""
    return up_for(PlacementRequest.given(placement, provider=provider, **flags), name, policy=policy, hours=hours, wait=wait,
                  idle_minutes=idle_minutes, report=report)


def up_for(ask: PlacementRequest, name: Optional[str] = None, *, policy=None, hours: Optional[float] = None, wait: bool = False,
           idle_minutes: Optional[float] = None, report: Reporter = QUIET) -> UpResult:
    """``up`` for a placement request (what ``up``'s keywords make): the one path every start takes."""
    started = time.perf_counter()
    if name is not None:
        state.check_name(name)
    _lease(hours)  # a bad --hours fails before anything is planned
    if idle_minutes is not None and not 0 < idle_minutes <= MAX_LEASE_HOURS * 60:  # also NaN
        raise BurstError(f"--idle-minutes must be a number of minutes above 0, got {idle_minutes}")
    placement, pol = place(ask, policy, report)
    target = targets.get(placement.provider)
    name = state.check_name(name or target.default_cluster_name)
    if state.load(ClusterHandle, name) is None:
        _within_reserved(placement, hours)
    handle, created = target.up(name, placement, _lease(hours, wait, idle_minutes), report)
    if created:  # what the runs on it are held to: the policy's budget, and the plan's prediction to compare against
        kept = {"budget_usd": budget.run_budget(None, policy=pol),
                **({"plan": prediction(placement, ask.workload_name)} if placement.estimate is not None else {})}
        if any(v is not None for v in kept.values()):
            handle = handle.model_copy(update=kept)
            state.save(handle)
    if created and (idle_minutes is not None or handle.expires is not None):
        from .unattended import watcher

        handle = watcher.watch_cluster(handle, idle_minutes, report)  # a lease alone is watched on clouds only
    return UpResult(handle=handle, created_now=created, seconds=round(time.perf_counter() - started, 2))


def _within_reserved(placement, hours: Optional[float]) -> None:
    """Through a burst server, a new cluster's lease commits its price for its hours: no more than
    the team's money the server reserved for this verb (``SERVED_COMMIT_USD``), said before anything is made."""
    import os

    from .values.served import SERVED_COMMIT_USD

    reserved = os.environ.get(SERVED_COMMIT_USD)
    if reserved is None or hours is None:
        return
    commits = placement.hourly_usd * hours
    if commits > float(reserved):
        raise BurstError(f"--hours {hours:g} at ${placement.hourly_usd:,.2f}/h commits ${commits:,.2f}, and your team has "
                         f"${float(reserved):,.2f} left to commit: ask for fewer --hours, or an admin for more budget", exit_code=3)


def prediction(placement, workload: str) -> dict:
    """What the plan predicted for a placement of ``workload``, kept on the cluster's handle for the runs on it to compare against."""
    from .placement import profile

    e = placement.estimate
    held_h = e.training_h + e.preemption_h
    layout = placement.layout
    prof = profile.load(workload)
    return {"workload": workload, "preset": prof.preset, "batch_per_replica": e.batch, "precision": e.precision, "events": prof.events,
            "accelerator": placement.accelerator, "count": placement.count,
            "nodes": layout.nodes if layout is not None else (placement.nodes or 1),
            "epoch_s": round(e.epoch_s, 3), "hours": round(e.hours, 4), "cost_usd": round(e.cost_usd, 2),
            "kw": round(e.energy_kwh / held_h, 4) if held_h > 0 else 0.0, "grid_gco2_per_kwh": e.grid_g_per_kwh,
            "kgco2e": None if e.kgco2e is None else round(e.kgco2e, 3)}


def check(provider: Optional[str] = None, *, placement: Optional[PlacementRequest] = None, policy=None, report: Reporter = QUIET,
          **flags) -> None:
    """The cloud pre-flight alone: quotas, zones and images of the layout ``up`` would create for
    the same ``placement``, asked of the provider's APIs (credentials needed); creates nothing.
    Raises on a shortfall."""
    chosen, _ = place(PlacementRequest.given(placement, provider=provider, **flags), policy, report)
    target = targets.get(chosen.provider)
    if not hasattr(target, "preflight"):
        raise BurstError(f"--check asks a cloud provider about quotas; {chosen.provider} is not a cloud target")
    target.check(chosen, report)


def render(provider: Optional[str] = None, name: Optional[str] = None, *, placement: Optional[PlacementRequest] = None, policy=None,
           hours: Optional[float] = None, report: Reporter = QUIET, **flags) -> dict:
    """What ``up`` would create for the same ``placement``, rendered offline (no credentials, no
    network, nothing recorded; a scheduler's queue is not asked)."""
    if name is not None:
        state.check_name(name)
    _lease(hours)
    chosen, _ = place(PlacementRequest.given(placement, provider=provider, **flags).but(live=False), policy, report)
    target = targets.get(chosen.provider)
    return target.render(state.check_name(name or target.default_cluster_name), chosen, _lease(hours), report)


def _known_providers(handles: list[ClusterHandle], damaged: list[Damaged]) -> list[ClusterHandle]:
    """The handles whose provider burst knows; the others (a hand edit) go to ``damaged``."""
    for h in handles:
        if h.provider not in targets.PROVIDERS:
            damaged.append(state.damaged(ClusterHandle, h.name, f"provider {h.provider[:40]!r} is not one burst knows"))
    return [h for h in handles if h.provider in targets.PROVIDERS]


RESUMABLE = ("STOPPED", "STOPPED_BUDGET", "LOST", "FAILED")  # a run that `burst train --resume` may go on with


def _keep_resumable(handle: ClusterHandle, report: Reporter) -> None:
    """Before a cluster whose storage goes with it (a site claim) is taken down: the newest checkpoint
    of every run on it that may be resumed is copied to this machine; one that cannot be read stops
    the down (nothing deleted) with the way out."""
    if targets.get(handle.provider).storage_outlives(handle):
        return
    for run in state.load_all(RunRecord, []):
        if run.cluster != handle.name or run.storage_uri != handle.storage_uri or run.state not in RESUMABLE:
            continue
        try:
            kept = runs.keep_checkpoint(run)
        except (BurstError, OSError) as exc:
            raise BurstError(f"cluster {handle.name!r} not taken down: run {run.run_id} ({run.state}) may be resumed, and its checkpoints "
                             f"on the cluster's storage could not be copied off ({str(exc)[:200]}); nothing was deleted: fix the way to it "
                             f"and run `burst down {handle.name}` again, or `burst down {handle.name} --discard-checkpoints`",
                             exit_code=1) from None
        if kept is not None:
            report.say(f"run {run.run_id}'s newest checkpoint kept on this machine at {kept} before the storage of {handle.name} goes "
                       f"(`burst train --resume {run.run_id}` goes on from it)")


def down(name: Optional[str] = None, *, all_clusters: bool = False, expired: bool = False, report: Reporter = QUIET,
         discard_checkpoints: bool = False) -> list[ClusterHandle]:
    """Stop (local), forget (on-prem) or destroy (cloud) clusters, verifying nothing is left; returns those taken down.
    A cluster whose storage goes with it keeps the checkpoints of its stopped runs first (``_keep_resumable``)."""
    damaged: list[Damaged] = []
    if expired:
        now = time.time()
        handles = [h for h in state.load_all(ClusterHandle, damaged) if h.expires is not None and h.expires < now]
    elif all_clusters:
        handles = state.load_all(ClusterHandle, damaged)
    else:
        handles = [runs.cluster(name or "local")]
    handles = _known_providers(handles, damaged)
    from .unattended.watcher import stop_watcher

    from .monitor import stop as stop_monitor

    for handle in handles:
        if not discard_checkpoints:
            _keep_resumable(handle, report)  # a claim goes with its cluster: what a stopped run resumes from is copied off first
        targets.get(handle.provider).down(handle, report)
        stop_watcher(handle)
        stop_monitor(handle.name)  # a local cluster's went with its processes; any other's goes now
        report.say(f"cluster {handle.name} ({handle.provider}) down; nothing left")
    if damaged:  # the readable ones are down; a damaged record names no cluster burst could stop
        first = damaged[0]
        more = f" (and {len(damaged) - 1} more damaged cluster record(s): `burst status` lists them)" if len(damaged) > 1 else ""
        raise Damaged(first.what, first.path, first.why, first.fix + more)
    return handles


def train(request: TrainRequest, report: Reporter = QUIET, policy=None) -> RunRecord:
    """Train on a running cluster as a Ray job, validate, collect; the finished run's record.

    ``request.managed``: a controller process carries the run (``burst.controller``): it goes on
    when this process ends, and moves to another cluster, planned under ``policy`` (default: the
    default policy), when this one is lost."""
    if not request.managed:
        return runs.train(request, report)
    if policy is not None:
        policy = load_policy(policy)
        request = with_policy_settings(request, policy)
    handle = runs.cluster(request.cluster)
    target = targets.get(handle.provider)
    if not target.is_alive(handle):
        raise BurstError(target.not_ready(handle), exit_code=1)
    from .unattended import managed

    record = managed.hand_over(request, {"provider": handle.provider, "workload": request.workload}, policy, own_first=False,
                               budget_usd=budget.run_budget(request.budget_usd, handle=handle), report=report)
    return record if request.detach else _follow_managed(record.run_id, report)


def run(request: TrainRequest, provider: Optional[str] = None, *, placement: Optional[PlacementRequest] = None, policy=None,
        hours: Optional[float] = None, report: Reporter = QUIET, **flags) -> RunRecord:
    """up + train + validate + down in one (the plan estimates the run's own epochs and batch;
    ``placement`` and keywords: as ``up``'s); the cluster (``request.cluster``) goes down on success,
    failure and interruption alike. With ``request.managed`` a controller process does all of it
    (and moves the run when its cluster is lost); this call follows it unless ``request.detach``."""
    if request.detach and not request.managed:
        raise BurstError("--detach applies to `burst run --managed` (a controller then carries the run); `burst run` alone follows its cluster to the end")
    ask = PlacementRequest.given(placement, provider=provider, **flags)
    if policy is not None or _plans_precision(request, ask.provider):
        policy = policy_for(request, policy)  # loaded once: its checkpoint interval and precision, and the placement below
        request = with_policy_settings(request, policy)
    from .home import staged

    ask = ask.but(staged_on=staged.holding(request.data))  # a store already holding the data costs the plan no staging
    if request.managed:
        return _run_managed(request, ask, report, policy=policy, hours=hours)
    return _on_own_cluster(runs.train, request, ask, report, policy=policy, hours=hours)


def _plans_precision(request, provider: Optional[str]) -> bool:
    """Whether a plan will estimate this request, so that the request's own precision must reach it
    (this machine, named, is placed without a plan unless a policy is given)."""
    return request.precision is not None and (provider is None or targets.get(provider).kind != "local")


def policy_for(request, policy):
    """The loaded policy, with the request's own precision in place of the policy's: the plan then
    estimates the precision the run will compute in."""
    policy = load_policy(policy)
    if request.precision is not None and request.precision != policy.precision:
        policy = policy.model_copy(update={"precision": request.precision})
    return policy


def with_policy_settings(request: TrainRequest, policy) -> TrainRequest:
    """The policy's ``checkpoint_every_steps`` and ``precision`` where the request sets none of its own."""
    if policy is None:
        return request
    update = {}
    if request.checkpoint_every_steps is None and policy.checkpoint_every_steps is not None:
        update["checkpoint_every_steps"] = policy.checkpoint_every_steps
    if request.precision is None:
        update["precision"] = policy.precision
    return request.model_copy(update=update) if update else request


def _run_managed(request: TrainRequest, ask: PlacementRequest, report: Reporter, *, policy, hours: Optional[float] = None) -> RunRecord:
    """Check the placement here (a bad flag is one line now, not in a detached process), then hand
    the run to its controller."""
    from .unattended import managed

    _lease(hours)
    ask = _sized_for(request, ask)
    chosen, pol = place(ask, policy, report)
    flags = {**ask.but(provider=ask.provider or chosen.provider).flags(), **({"hours": hours} if hours is not None else {})}
    record = managed.hand_over(request, flags, policy, own_first=True, budget_usd=budget.run_budget(request.budget_usd, policy=pol),
                               report=report)
    return record if request.detach else _follow_managed(record.run_id, report)


def _follow_managed(run_id: str, report: Reporter) -> RunRecord:
    """Follow a managed run to its end; its final state as the CLI's exit (Ctrl-C leaves it running)."""
    from .unattended import managed
    from .lifecycle import quality

    try:
        record = managed.follow(run_id, report)
    except KeyboardInterrupt:
        report.say(f"detached; managed run {run_id} goes on under its controller: `burst status`, `burst logs {run_id} --follow`")
        raise
    if record.state == "SUCCEEDED":
        return record
    codes = {"STOPPED_BUDGET": 3, "FAILED_QUALITY": quality.EXIT_CODE}
    raise BurstError(f"run {run_id} {record.state.lower()}: {record.message}", exit_code=codes.get(record.state, 1))


def _sized_for(request, ask: PlacementRequest) -> PlacementRequest:
    """The request with the run's (or scan's) own workload, batch and epochs, which the plan estimates."""
    return PlacementRequest.given(ask, workload=request.workload, batch_per_replica=request.batch_per_replica, epochs=request.epochs)


def _on_own_cluster(work: Callable, request, ask: PlacementRequest, report: Reporter, *, policy=None, hours: Optional[float] = None):
    """``work(request, report)`` on a cluster started for it (``request.cluster``), taken down after
    on success, failure and interruption alike (so the work may neither detach nor outlive it)."""
    request = request.model_copy(update={"detach": False, "cancel_on_interrupt": True})  # nothing may outlive the cluster
    result = up_for(_sized_for(request, ask), request.cluster, policy=policy, hours=hours, wait=True, report=report)
    if not result.created_now:  # someone else's cluster (another `burst run`, the user's own `burst up`): not ours to take down
        raise BurstError(f"cluster {request.cluster!r} is already up, started by another command; `burst run` and `burst tune` "
                         f"start a cluster of their own and take it down after: pass another --name, or use `burst train --cluster "
                         f"{request.cluster}` to train on that one")
    report.say(f"cluster {request.cluster} up; dashboard {result.handle.dashboard_url}")
    try:
        record = work(request, report)
    except BaseException:
        _down_quietly(result.handle, report)  # the work's own error is the one to see
        raise
    _down_quietly(result.handle, report, raise_errors=True)
    return record


def tune(request, provider: Optional[str] = None, *, start: bool = False, placement: Optional[PlacementRequest] = None, policy=None,
         hours: Optional[float] = None, report: Reporter = QUIET, **flags) -> RunRecord:
    """A hyper-parameter scan (``scans.TuneRequest``) on the running cluster ``request.cluster``, or,
    with ``start``, on a cluster started for it (``provider``, else the plan's choice for the scan
    under the policy; ``placement`` and keywords: as ``up``'s) and taken down after (success, failure and Ctrl-C alike)."""
    from .lifecycle import scans

    ask = PlacementRequest.given(placement, provider=provider, **flags)
    if policy is not None or (start and _plans_precision(request, ask.provider)):
        policy = policy_for(request, policy)
        request = with_policy_settings(request, policy)
    if not start:
        return scans.tune(request, report)
    if ask.provider is None:  # the plan sizes the scan and picks where it runs
        from .placement.scan import ScanShape

        shape = ScanShape(request.total_trials, request.gpus_per_trial, request.max_concurrent, request.grace_period, request.reduction_factor)
        chosen = plan(policy=policy, placement=_sized_for(request, ask.narrowing()).but(scan=shape))
        if chosen.choice is None:
            raise BurstError(f"no target fits the scan under the policy: {chosen.why}", exit_code=1)
        c = chosen.choice
        report.say(f"plan: {c.provider} {c.region} {c.accelerator} x{c.count}: {c.estimate.hours:.2f} h, ${c.estimate.cost_usd:,.2f} ({chosen.scan})")
        ask = ask.but(provider=c.provider)
        if targets.get(c.provider).kind != "local":
            ask = ask.but(gpus=c.count, accelerator=c.accelerator, preemptible=c.preemptible, region=c.region if c.target == "cloud" else ask.region)
    return _on_own_cluster(scans.tune, request, ask, report, policy=policy, hours=hours)


def _down_quietly(handle: ClusterHandle, report: Reporter, raise_errors: bool = False) -> None:
    if state.load(ClusterHandle, handle.name) is None:
        return  # already torn down (the budget guard does that)
    from .unattended.watcher import stop_watcher

    try:
        targets.get(handle.provider).down(handle, report)
        stop_watcher(handle)
        report.say(f"cluster {handle.name} stopped")
    except BurstError as exc:
        if raise_errors:
            raise
        report.say(f"error: {exc}")


def monitor(name: str, *, port: Optional[int] = None, stop: bool = False):
    """A Prometheus on this machine's loopback scraping the cluster's Ray metrics (``burst.monitor``):
    the running one, else one started now; with ``stop``, stopped (None)."""
    from . import monitor as prometheus

    if stop:
        prometheus.stop(name)
        return None
    handle = runs.cluster(name)
    running = prometheus.running(name)
    if running is not None and prometheus.tunnel_holds(running):
        return running
    if running is not None:
        prometheus.stop(name)  # its tunnel to the head broke (a laptop's network changed): started again, tunnel and all
    target = targets.get(handle.provider)
    if not target.is_alive(handle):
        raise BurstError(target.not_ready(handle), exit_code=1)
    if not target.answers_here(handle):
        return prometheus.start_relayed(handle, target, port)
    return prometheus.start(handle, target.metrics_discovery(handle), port)


def connect(url: str, token: str, ca_file: Optional[str] = None):
    """A burst server's API as the bearer of ``token`` (``burst.client.server.ServerClient``): their
    team's clusters, runs and money, and verbs run there as them."""
    from .client.server import ServerClient

    return ServerClient(url, token, ca_file)


def status(run_id: Optional[str] = None) -> Status:
    """Clusters (provider, layout, age, expiry, accrued cost) and runs (state, progress); with
    ``run_id``, that run alone (and the clusters all the same), its attempts and moves beside it."""
    from .unattended import managed, timeline, watcher
    from .lifecycle import tracking

    damaged: list[Damaged] = []
    # first what must not wait for any cluster: a killed controller or watcher picks up again
    revived = managed.revive(damaged)
    revived_watchers = watcher.revive_watchers()
    handles = _known_providers(state.load_all(ClusterHandle, damaged), damaged)
    now = time.time()
    states = asked_each([lambda h=h: targets.get(h.provider).describe_state(h) for h in handles], STATUS_ASK_S)
    rows = [ClusterStatus(name=h.name, provider=h.provider,
                          state=got if ok else f"unreachable (no answer in {STATUS_ASK_S:g} s)" if got is None else f"unreachable ({got})",
                          layout=h.layout, age_s=round(now - h.created), expires=h.expires,
                          accrued_usd=round(h.hourly_usd * (now - h.created) / 3600, 4), dashboard=h.dashboard_url)
            for h, (ok, got) in zip(handles, states)]
    by_name = {h.name: h for h in handles}
    records = state.load_all(RunRecord, damaged)
    if run_id is not None:
        records = [r for r in records if r.run_id == run_id]
        if not records:
            raise BurstError(f"no run {run_id!r} on this machine; `burst status` lists the runs", exit_code=2)
    pending = [r for r in records if not r.managed]
    refreshed = dict(zip((r.run_id for r in pending),
                         asked_each([lambda r=r: tracking.refresh(r, by_name) for r in pending], STATUS_ASK_S)))
    runs_now = [r if r.managed or not refreshed[r.run_id][0] else refreshed[r.run_id][1] for r in records]  # unanswered: as recorded
    wanted = {r.run_id for r in records if r.managed}
    kept = {m.run_id: m for m in managed.load_all([]) if m.run_id in wanted}  # a damaged one is in ``damaged`` already (revive)
    return Status(clusters=rows, runs=runs_now, moves={r.run_id: managed.moves(r.run_id) for r in records if r.managed},
                  timelines={k: timeline.lines(m) for k, m in kept.items()},
                  attempts={k: [a.model_dump(mode="json") for a in m.attempts] for k, m in kept.items()},
                  revived=revived, revived_watchers=revived_watchers,
                  damaged=[DamagedRecord.of(d) for d in damaged])


STATUS_ASK_S = 10.0  # `burst status` waits this long for any one cluster (an ssh to a login host, a kubectl) before going on


def asked_each(questions: list[Callable[[], object]], timeout: float) -> list[tuple[bool, object]]:
    """Every question asked at once, each in a daemon thread: (True, answer), (False, the error in
    one line), or (False, None) when no answer came within ``timeout`` (its thread is left to end on
    its own and never holds the command's exit)."""
    import threading

    boxes: list[dict] = [{} for _ in questions]

    def ask(question, box):
        try:
            box["answer"] = question()
        except Exception as exc:  # noqa: BLE001 - one cluster's failure is its row, not the command's
            box["error"] = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else exc.__class__.__name__

    threads = [threading.Thread(target=ask, args=(q, b), daemon=True) for q, b in zip(questions, boxes)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [(True, b["answer"]) if "answer" in b else (False, b.get("error")) for b in boxes]


class StagedDataset(BaseModel):
    """A dataset on a store (``burst.client.datasets``): its size and what keeping it costs a month."""

    store: str
    key: str
    uri: str
    complete: bool
    bytes: int
    files: int
    staged_at: Optional[float]
    source: Optional[str]
    usd_per_month: Optional[float]  # None: a directory or a site claim, not billed by a cloud


def known_stores() -> list[str]:
    """Every store a recorded cluster or run uses, once each (the stores that are this user's own)."""
    damaged: list[Damaged] = []
    uris = [h.storage_uri for h in state.load_all(ClusterHandle, damaged)] + [r.storage_uri for r in state.load_all(RunRecord, damaged)]
    return list(dict.fromkeys(u for u in uris if u))


def _staged(entry) -> StagedDataset:
    from .placement.estimate import provider_facts

    provider = targets.store_provider(entry.store)
    price = provider_facts()[provider].storage_usd_per_gb_month if provider in provider_facts() else None
    return StagedDataset(store=entry.store, key=entry.key, uri=entry.uri, complete=entry.complete, bytes=entry.bytes, files=entry.files,
                         staged_at=entry.staged_at, source=entry.source,
                         usd_per_month=None if price is None else round(entry.bytes / 2**30 * price, 4))


def datasets(stores: Optional[list[str]] = None) -> list[StagedDataset]:
    """The datasets staged on ``stores`` (default: every store a recorded cluster or run uses)."""
    from .client import datasets as staged

    out = []
    for store in stores or known_stores():
        try:
            out += [_staged(e) for e in staged.listed(store)]
        except OSError as exc:
            raise BurstError(f"cannot list the datasets on {store}: {exc}", exit_code=1) from None
    return out


def store_lifecycle(provider: str, region: str, *, policy=None, report: Reporter = QUIET, **days: Optional[int]) -> str:
    """Change the lifecycle rules of burst's store of ``provider`` in ``region`` (``checkpoints_days``,
    ``datasets_days``, ``notices_days``; those not given stay as the store has them): the one way
    they change once the store is made. Returns the store's URI."""
    from .placement import policy as policy_mod

    target = targets.get(targets.check_provider(provider))
    if not hasattr(target, "make_store"):
        raise BurstError(f"{provider} has no store burst makes (stores are made for the clouds' regions: gcp, gcp-tpu, azure)", exit_code=2)
    given = {k: v for k, v in days.items() if v is not None}
    if not given:
        raise BurstError("say which rule to change: --checkpoints-days, --datasets-days or --notices-days", exit_code=2)
    pol = policy if policy is not None and not isinstance(policy, (str, Path)) else policy_mod.load(Path(policy) if policy else None)
    target.check_prerequisites("change a store's lifecycle")
    spec = target.region_store(region, pol.stores)
    from dataclasses import replace

    return target.make_store(replace(spec, **given), report, set_rules=frozenset(given)).uri


def remove_dataset(store: str, key: str) -> StagedDataset:
    """Delete one staged dataset from a store; returns what was there."""
    from .client import datasets as staged

    found = [d for d in datasets([store]) if d.key == key]
    if not found:
        raise BurstError(f"no dataset {key[:40]!r} on {store}; `burst datasets --store {store}` lists them")
    from .unattended import managed

    def reading(r: RunRecord) -> bool:  # still training, or a managed run its controller has not finished (it may move and read it again)
        if key not in str((r.config or {}).get("data") or ""):
            return False
        m = managed.load(r.run_id) if r.managed else None
        return r.state not in managed.FINAL_STATES or (m is not None and m.phase != "finished")

    readers = [r.run_id for r in state.load_all(RunRecord) if reading(r)]
    if readers:
        raise BurstError(f"dataset {key} on {store} is being read by run(s) {', '.join(sorted(readers))}; nothing was removed: "
                         f"remove it once they have ended (`burst status`)", exit_code=1)
    staged.remove(store, key)
    from .home import staged as index

    index.forget(store, key)
    return found[0]


def logs(run_id: str, *, follow: bool = False, on_line: Optional[Callable[[str], None]] = None,
         on_event: Optional[Callable] = None, on_notice: Optional[Callable[[str], None]] = None) -> str:
    """A run's job log: from its cluster while it answers, else the copy saved with the run, else the
    one its target keeps on this machine (a killed local head's driver log); ``on_notice`` hears
    where it came from when not from the cluster. With ``follow``, ``on_line`` and ``on_event``
    hear the job's output until it ends."""
    from .client import jobs

    record = runs.load_run(run_id)
    handle = state.load(ClusterHandle, record.cluster)
    if handle is None:  # the cluster is gone (e.g. after `burst run`): the saved log
        text = _saved_log(record)
        if text is None:
            raise BurstError(f"cluster {record.cluster!r} of run {run_id} is gone and no saved log is at {_saved_log_path(record)}",
                             exit_code=1)
        if follow and on_line is not None:  # nothing more will come: the saved log is the whole of it
            for line in text.splitlines():
                on_line(line)
        return text
    target = targets.get(handle.provider)
    try:
        with target.reach(handle) as reachable:
            try:
                if follow:  # until the job ends, every line and event as it comes
                    jobs.follow(reachable, record, on_event=on_event or (lambda e: None), on_line=on_line)
                return jobs.client(reachable).get_job_logs(record.job_id)
            except RuntimeError as exc:  # the Jobs API's 404: a cluster of that name started again since
                if "does not exist" not in str(exc):
                    raise
                text = _saved_log(record)
                if text is not None:
                    return text
                raise BurstError(f"cluster {record.cluster!r} no longer knows run {run_id}'s job (the cluster was started again "
                                 "since) and no log was saved for it", exit_code=1) from None
    except BurstError as exc:  # the head does not answer (killed, its tunnel refused): the log kept elsewhere, if any
        if "no longer knows" in str(exc):
            raise
        text, kept = _saved_log(record), _saved_log_path(record)
        if text is None:
            kept = target.kept_job_log(handle, record.job_id) if record.job_id else None
            if kept is None:
                raise BurstError(f"{exc}; no copy of run {run_id}'s log is kept on this machine", exit_code=exc.exit_code) from None
            text = kept.read_text(errors="replace")
        if on_notice is not None:
            on_notice(f"cluster {record.cluster!r} does not answer; the log below is the copy kept at {kept}")
        if follow and on_line is not None:  # nothing more will come from a head that does not answer
            for line in text.splitlines():
                on_line(line)
        return text


def _saved_log_path(record: RunRecord) -> Path:
    from .lifecycle.rundir import RunDirectory

    return Path(record.run_dir) / "job.log" if record.run_dir else RunDirectory(record.run_id).job_log


def _saved_log(record: RunRecord) -> Optional[str]:
    """The job log saved with the run (None: there is none); a damaged one is one line."""
    from .home.records import read_file

    path = _saved_log_path(record)
    try:
        return read_file(path, f"run {record.run_id}'s saved log", f"remove it (rm -r {path})", limit=None).decode(errors="replace")
    except FileNotFoundError:
        return None


def prediction_lines(run_id: str) -> list[str]:
    """The plan against the run, from its cost.json: epoch time predicted and measured, cost, emissions."""
    record = runs.load_run(run_id)
    cost_file = Path(record.run_dir) / "cost.json" if record.run_dir else None
    if cost_file is None or not cost_file.exists():
        return []
    from .lifecycle.rundir import read_cost

    cost = read_cost(cost_file, run_id)
    measured, predicted = cost.measured, cost.predicted
    lines = [f"cost: ${cost.cost_usd:,.4f} over {cost.hours:.3f} h at ${cost.hourly_usd:,.2f}/h"
             + (f"; about {measured.kgco2e:.3f} kgCO2e" if measured.kgco2e is not None else "")]
    if predicted.epoch_s is not None and measured.epoch_s is not None:
        error = measured.epoch_s / predicted.epoch_s - 1
        lines.append(f"epoch: predicted {predicted.epoch_s:.1f} s, measured {measured.epoch_s:.1f} s ({error:+.1%})")
    elif measured.epoch_s is not None:
        lines.append(f"epoch: measured {measured.epoch_s:.1f} s; no prediction: {predicted.why or 'none recorded'}")
    return lines


def profile(workload: str, *, batches: Optional[list[int]] = None, events: Optional[int] = None, seed: int = 0,
            out: Optional[Path] = None, data: Optional[Path] = None, report: Reporter = QUIET):
    """`burst profile`: measure a workload of the public interface on this machine and write the
    profile the plan estimates it from (a ``lifecycle.profiling.ProfileResult``)."""
    from .lifecycle import profiling

    return profiling.profile(workload, batches=batches, events=events, seed=seed, out=out, data=data, report=report)


def report(run_id: str) -> Path:
    """The path of a run's HTML report (its results are collected first if nothing did yet)."""
    from .lifecycle import tracking

    record = runs.load_run(run_id)
    if not record.run_dir:
        record = tracking.collect_finished(record)
    from .lifecycle.rundir import report_page

    path = report_page(record)
    if path is None:
        raise BurstError(f"run {run_id} has no report yet (state {record.state})", exit_code=1)
    if not path.is_file():
        raise BurstError(f"report {path} is {'not a file' if path.exists() else 'missing'}; was the run directory moved?", exit_code=1)
    return path
