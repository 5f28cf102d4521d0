"""The training lifecycle: check a request, submit the job, follow it under the budget guard,
collect its results and record the run. Everything a command or a notebook does with a run."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pydantic import ConfigDict, Field, ValidationError

from . import quality
from ..home import state
from .. import targets
from ..errors import BurstError
from ..home.records import read_json
from .rundir import RunDirectory
from ..runtime import notice
from ..runtime.job import DEFAULT_SYNTHETIC_EVENTS, JobConfig, TrainSettings, parse_events
from ..home.state import ClusterHandle, RunRecord
from ..targets.base import QUIET, Reporter, Target

FINISHED = ("SUCCEEDED", "FAILED", "FAILED_QUALITY", "STOPPED", "STOPPED_BUDGET", "LOST")  # LOST: its cluster went away under it
# FAILED_QUALITY: trained and validated, but the model missed the run's quality gate


class TrainRequest(TrainSettings):
    """One training run as asked for: the settings the job reads plus where and how to run it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    cluster: str = Field("local", description="the running cluster to train on")
    data: Optional[str] = Field(None, description="directory of CERN HDF5 files (or converted TFRecords), or a bucket URI")
    synthetic: Optional[int] = Field(None, gt=0, description="train on this many synthetic Monte Carlo events (default 3000)")
    workers: int = Field(1, gt=0, description="Ray Train workers (one per node; CPU workers locally)")
    budget_usd: Optional[float] = Field(None, gt=0, allow_inf_nan=False, description="stop and tear down before this many USD are spent "
                                                                                       "(default: the policy's, from `burst up`)")
    detach: bool = Field(False, description="submit and return (`burst status`, `burst logs RUN --follow`)")
    cancel_on_interrupt: bool = Field(False, description="Ctrl-C cancels the job instead of detaching")
    resume: Optional[str] = Field(None, description="go on with this earlier run (stopped, failed or lost) from its newest checkpoint, with its settings")
    managed: bool = Field(False, description="hand the run to a controller process: it goes on without this terminal, moves to another "
                                             "target (policy: recovery) when its cluster is lost, enforces the budget and the lease")
    run_id: Optional[str] = Field(None, description="the run's id (default: a new one); a managed run's controller sets it")

    @classmethod
    def of(cls, **fields) -> "TrainRequest":
        """A request from keyword arguments (flags), or one line naming the flag that is wrong."""
        try:
            request = cls(**fields)
        except ValidationError as exc:
            raise BurstError(flag_error(exc)) from None
        check_data(request.data, request.synthetic)
        state.check_name(request.cluster)
        return request

    def settings(self) -> dict:
        """The part of the request the job reads as it is."""
        return self.model_dump(include=set(TrainSettings.model_fields))


def check_data(data: Optional[str], synthetic: Optional[int]) -> None:
    """--data and --synthetic: one of them at most, and a local --data that exists."""
    if data is not None and synthetic is not None:
        raise BurstError("give either --data DIR or --synthetic N, not both")
    if data is not None and "://" not in data and not Path(data).exists():
        raise BurstError(f"--data {data}: no such file or directory")


# fields whose command-line flag is not the field's name (burst.cli.training_options declares the flags)
FLAGS = {"budget_usd": "--budget", "steps_per_epoch": "--steps", "cancel_on_interrupt": "--cancel", "checkpoint_every_steps": "--checkpoint-every",
         "gate": "--gate", "space": "--space"}


def flag_error(exc: ValidationError) -> str:
    """A request's first validation error as one line naming the flag (``FLAGS``) and the value."""
    err = exc.errors()[0]
    if not err["loc"]:  # the whole request's check (burst.runtime.job): a preset the workload lacks
        return err["msg"].removeprefix("Value error, ")
    field = str(err["loc"][0])
    flag = FLAGS.get(field, "--" + field.replace("_", "-"))
    value = err.get("input")
    if err["type"] in ("greater_than", "greater_than_equal"):
        return f"{flag} must be a positive {'number' if field == 'budget_usd' else 'whole number'}, got {value}"
    return f"{flag}: {err['msg'].removeprefix('Value error, ')}"


def cluster(name: str) -> ClusterHandle:
    handle = state.load(ClusterHandle, name)
    if handle is None:
        raise BurstError(f"no cluster named {name!r}; start one with `burst up --provider local --name {name}`")
    return handle


def load_run(run_id: str) -> RunRecord:
    record = state.load(RunRecord, run_id)
    if record is None:
        raise BurstError(f"no run named {run_id!r}; `burst status` lists them")
    return record


def train(request: TrainRequest, report: Reporter = QUIET, resume_from: Optional["ResumePoint"] = None) -> RunRecord:
    """Train on a running cluster as a Ray job, then validate; returns the finished run's record.

    Raises ``BurstError`` when the run fails (exit code 1) or the budget guard stops it (3, the
    cluster torn down); with ``request.detach`` it returns once the job is submitted.
    ``resume_from``: where a resumed run's checkpoints are when not on its earlier storage (staged
    there by a managed run's move).
    """
    handle = cluster(request.cluster)
    target = targets.get(handle.provider)
    earlier = load_run(request.resume) if request.resume else None
    if not target.is_alive(handle):
        raise BurstError(target.not_ready(handle), exit_code=1)
    with target.reach(handle) as reachable:
        return _train_on(target, reachable, request if earlier is None else _resumed(request, earlier), report, earlier, resume_from)


def _resumed(request: TrainRequest, earlier: RunRecord) -> TrainRequest:
    """The request of an earlier run, on the cluster asked for now: same settings, same data."""
    if earlier.state not in FINISHED:
        earlier = refresh(earlier, {h.name: h for h in state.load_all(ClusterHandle, damaged=[])})  # a damaged other record is not this run's
    if earlier.state in ("SUCCEEDED", "RUNNING", "PENDING"):
        raise BurstError(f"run {earlier.run_id} is {earlier.state.lower()}; only a run that stopped, failed or lost its cluster can be resumed")
    if not earlier.storage_uri:
        raise BurstError(f"run {earlier.run_id} recorded no storage; it cannot be resumed (it ran before burst recorded it)")
    old = earlier.config
    kept = {k: old[k] for k in TrainSettings.model_fields if k in old}
    data = old["data_source"] if "data_source" in old else old.get("data")  # a record from before data_source: the job's path
    return request.model_copy(update={**kept, "workload": earlier.workload, "workers": old.get("workers", request.workers),
                                      "data": data, "synthetic": old.get("synthetic"), "managed": earlier.managed or request.managed})


def _train_on(target: Target, handle: ClusterHandle, request: TrainRequest, report: Reporter,
              earlier: Optional[RunRecord] = None, resume_from: Optional["ResumePoint"] = None) -> RunRecord:
    from ..client import jobs
    from .budget import BudgetGuard

    run = RunRecord(run_id=earlier.run_id if earlier else request.run_id or state.new_run_id(request.workload), workload=request.workload,
                    cluster=handle.name, provider=handle.provider, hourly_usd=handle.hourly_usd, storage_uri=handle.storage_uri,
                    attempts=earlier.attempts + 1 if earlier else 1, managed=request.managed)
    planned = handle.plan.get("batch_per_replica")
    same_model = request.preset == handle.plan.get("preset") and request.workload == handle.plan.get("workload", request.workload)
    if request.batch_per_replica is None and planned and same_model and earlier is None:
        request = request.model_copy(update={"batch_per_replica": int(planned)})  # the run the plan estimated
        report.say(f"batch per replica {planned}, as planned by `burst up`")
    resources = target.job_resources(handle, request.workers)
    resources.runs_precision(request.precision, handle.name)  # before anything is staged
    data = target.stage_data(handle, request.data, run.run_id, report) if request.data is not None else None
    point = resume_from or (stage_checkpoint(earlier, handle) if earlier else None)
    resume_from = target.job_path(handle, point.uri) if point else None  # the job's view of the storage
    cfg = JobConfig(**request.settings(), run_id=run.run_id, storage=target.job_storage(handle), data=target.job_path(handle, data) if data else None,
                    synthetic=None if data else (request.synthetic or DEFAULT_SYNTHETIC_EVENTS),
                    workers=resources.workers, cpus_per_worker=resources.cpus_per_worker, gpus_per_worker=resources.gpus_per_worker,
                    threads=resources.threads, tpu=resources.tpu, tpu_hosts=resources.tpu_hosts, tpu_name=resources.tpu_name, resume_from=resume_from,
                    hourly_usd=float(handle.hourly_usd),
                    notices=notice.root(target.job_storage(handle), handle.cluster_id))
    run.config = cfg.model_dump(mode="json", exclude={"storage", "train_files", "resume_from", "notices"})
    run.config["data_source"] = request.data  # as the user gave it: a resume stages it again, not the old cluster's copy
    if earlier:
        report.say(f"resuming run {run.run_id} (attempt {run.attempts}) from {point.describe()}" if point else
                   f"resuming run {run.run_id} (attempt {run.attempts}): no complete checkpoint of it is left (none kept here, none on "
                   f"{earlier.storage_uri or 'its store'}, no final one), so it starts again at epoch 1")
        clear_verdicts(handle.storage_uri, run.run_id)
    guard = BudgetGuard.for_cluster(handle, request.budget_usd)
    if guard is not None:
        guard.check_can_start()
    submitted = time.time()
    from ..client import workload_code

    cfg, runtime = workload_code.carried(cfg, target.job_runtime(handle), target.reads_local_paths)
    jobs.submit(handle, run, cfg, runtime)
    report.say(f"run {run.run_id} submitted to cluster {handle.name}; its full log: `burst logs {run.run_id}`")
    if request.detach:
        report.say(f"detached; follow with `burst logs {run.run_id} --follow`")
        if guard is not None and not request.managed:  # nothing else would stop the spending
            from ..unattended import managed

            managed.guard(state.load(ClusterHandle, handle.name) or handle, run, guard.budget_usd, report)
        return run
    tracker = jobs.RunTracker(cfg.epochs)

    watch_budget = budget_watch(guard, handle, run, report)

    try:
        with report.run_progress(run, tracker) as watcher:
            def on_event(event) -> None:
                tracker.record(event)
                watcher.on_event(event)

            status = jobs.follow(handle, run, on_event, on_poll=watch_budget)
    except BurstError:  # the cluster went away under the run (a scheduler's cancel, a walltime, a failure)
        home_handle = state.load(ClusterHandle, handle.name)
        gone = home_handle is None or not target.is_alive(home_handle)
        if not gone:
            raise
        if tracker.stopped is not None and tracker.stopped.on_notice:  # it saw the end coming and checkpointed where it was
            raise _ended_on_notice(run, tracker) from None
        why = target.stopped_reason(home_handle) if home_handle is not None else "it was taken down"
        _record_lost(run, tracker, f"the cluster stopped ({why}); the run's last checkpoint is {last_checkpoint(handle.storage_uri, run.run_id)}; "
                                   f"`burst train {run.workload} --cluster NAME --resume {run.run_id}` continues on a running cluster")
        where = f"at epoch {tracker.last_step.epoch} step {tracker.last_step.step}" if tracker.last_step else "before its first step"
        raise BurstError(f"run {run.run_id} lost its cluster {where}: {run.message}", exit_code=1) from None
    except KeyboardInterrupt:
        interrupted(handle, run, request.cancel_on_interrupt, report, cancelled=f"run {run.run_id} cancelled", what="run")
        if guard is not None and not request.cancel_on_interrupt and not request.managed:  # the CLI goes; the budget stays enforced
            from ..unattended import managed

            managed.guard(state.load(ClusterHandle, handle.name) or handle, run, guard.budget_usd, report)
        raise
    run.state = status
    run.finished = time.time()
    run.progress = tracker.snapshot()
    run_dir = RunDirectory(run.run_id)
    run_dir.save_log(jobs.client(handle).get_job_logs(run.job_id))
    on_notice = tracker.stopped is not None and tracker.stopped.on_notice and (guard is None or guard.requested_at is None)
    stopped = not on_notice and (tracker.stopped is not None or (guard is not None and guard.requested_at is not None))
    if on_notice:  # the cluster said it is going: the run checkpointed where it was and ended, to go on elsewhere
        raise _ended_on_notice(run, tracker)
    if status == "SUCCEEDED":
        run_dir.collect(handle, run)
        run.run_dir = str(run_dir.path.resolve())
        run_dir.write_summary(run, handle, tracker, submitted)
        _judge(run, run_dir)
    else:
        run.message = tracker.failure or f"job ended {status}; see `burst logs {run.run_id}`"
    cancelled = stopped and tracker.stopped is not None and tracker.stopped.cancelled and (guard is None or guard.requested_at is None)
    if cancelled:
        run.state = "STOPPED"  # its owner cancelled it (the web view): checkpointed where it was
        run.message = (f"cancelled by its owner at epoch {tracker.stopped.epoch} step {tracker.stopped.step}; final checkpoint "
                       f"{_final_checkpoint(target, handle, run)}; --resume goes on from there")
    elif stopped:
        run.state = "STOPPED_BUDGET"
        where = tracker.stopped
        run.message = (f"stopped by the budget guard at epoch {where.epoch if where else '?'} step {where.step if where else '?'}: "
                       f"${guard.accrued():,.2f} of ${guard.budget_usd:,.2f} spent; final checkpoint {_final_checkpoint(target, handle, run)}")
    with state.locked():
        state.save(run)
    if cancelled:  # the cluster stays: its owner resumes there, or takes it down
        raise BurstError(f"run {run.run_id} {run.message}", exit_code=1)
    if stopped:
        target.down(handle, report)
        raise BurstError(f"run {run.run_id} {run.message}; cluster {handle.name!r} torn down", exit_code=3)
    if status != "SUCCEEDED":
        raise BurstError(f"run {run.run_id} {status.lower()}: {run.message}", exit_code=1)
    if run.state == "FAILED_QUALITY":
        raise BurstError(f"run {run.run_id} {run.message}; report: {run.run_dir}/report/report.html", exit_code=quality.EXIT_CODE)
    return run


def _final_checkpoint(target: Target, handle: ClusterHandle, run: RunRecord) -> str:
    """Where a stopped run's final checkpoint stays once its cluster is taken down (copied to this
    machine first when the cluster's storage goes with it), in words for its message."""
    from ..runtime import storage
    from ..runtime.job import RunFiles

    if target.storage_outlives(handle):
        return storage.join(RunFiles(handle.storage_uri, run.run_id).run_dir, "checkpoint")
    kept = keep_checkpoint(run)
    return f"kept on this machine at {kept} (the cluster's storage goes with it)" if kept else "none: no complete checkpoint was written"


def _ended_on_notice(run: RunRecord, tracker) -> BurstError:
    """Record a run that checkpointed where it was on its cluster's notice and ended: LOST, with the step to go on from."""
    where = tracker.stopped
    _record_lost(run, tracker, f"checkpointed at epoch {where.epoch} step {where.step} of {where.steps} on the cluster's {where.reason}; "
                               f"`burst train {run.workload} --cluster NAME --resume {run.run_id}` goes on from that step")
    return BurstError(f"run {run.run_id} {run.message}", exit_code=1)


def _record_lost(run: RunRecord, tracker, message: str) -> None:
    """Save ``run`` as LOST, saying why and where to go on from, with its progress so far."""
    run.state = "LOST"
    run.message = message
    run.progress = tracker.snapshot()
    with state.locked():
        state.save(run)


def clear_verdicts(storage_uri: str, run_id: str) -> None:
    """Before a run goes on: its earlier attempt's stop request (the budget guard's) and bad-data
    verdict would otherwise end the new attempt at its first step."""
    from ..runtime import storage
    from ..runtime.job import RunFiles

    files = RunFiles(storage_uri, run_id)
    for uri in (files.stop_request, files.data_error):
        storage.remove(uri)


def budget_watch(guard, handle: ClusterHandle, record: RunRecord, report: Reporter, suffix: str = ""):
    """What a follower calls at every poll: the budget guard's look (nothing without a guard)."""
    from ..client import jobs

    def watch() -> None:
        message = guard.poll(record.run_id, stop_job=lambda: jobs.client(handle).stop_job(record.job_id)) if guard else None
        if message:
            report.say(f"budget guard: {message}{suffix}")

    return watch


def interrupted(handle: ClusterHandle, record: RunRecord, cancel: bool, report: Reporter, *, cancelled: str, what: str) -> None:
    """Ctrl-C while following a job: stop it (``cancel``) or leave it going; record either (the caller re-raises)."""
    from ..client import jobs

    if cancel:
        jobs.client(handle).stop_job(record.job_id)
        record.state = "STOPPED"
        report.say(cancelled)
    else:
        report.say(f"detached; the {what} goes on. Follow with `burst logs {record.run_id} --follow`")
    with state.locked():
        state.save(record)


def _judge(run: RunRecord, run_dir: RunDirectory) -> None:
    """A run whose model missed its quality gate (the job's verdict in metrics.json) is FAILED_QUALITY."""
    metrics = run_dir.path / "metrics.json"
    verdict = read_json(metrics, f"run {run.run_id}'s metrics").get("verdict") or {} if metrics.exists() else {}
    if verdict.get("passed") is False:
        run.state = "FAILED_QUALITY"
        run.message = "failed its quality gate: " + ", ".join(f"{k} {v['value']:.4g} > {v['max']:.4g}" for k, v in verdict["failing"].items())


def kept_checkpoints(run_id: str) -> Path:
    """Where this machine keeps a run's newest checkpoint when the store it was on goes with its
    cluster (a site claim): the next attempt is staged from here."""
    return state.home() / "checkpoints" / state.check_name(run_id, "run")


def _reachable_checkpoints(record: RunRecord, scratch: Path, strict: bool = False) -> list[Path]:
    """Every checkpoint of the run burst can still reach, as directories here (``_checkpoints_with_origin``)."""
    return [path for path, _ in _checkpoints_with_origin(record, scratch, strict=strict)]


def keep_checkpoint(record: RunRecord) -> Optional[Path]:
    """Copy the run's newest complete checkpoint to this machine (``kept_checkpoints``) before a
    cluster whose storage goes with it is taken down; the copy (None: the run has none)."""
    import os
    import shutil
    import tempfile

    from ..runtime.training import latest_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        newest = latest_checkpoint(_reachable_checkpoints(record, Path(tmp), strict=True))  # a store that does not answer: an error
        if newest is None:
            return None
        dest = kept_checkpoints(record.run_id) / newest.name
        if newest.parent != dest.parent and not dest.exists():
            partial = dest.with_name(f".partial-{newest.name}")  # not a checkpoint_* name: never taken for one while it is copied
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(newest, partial)
            os.replace(partial, dest)
    return dest


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a resumed run goes on from: ``uri`` is what its job reads (a directory of
    checkpoints on the new cluster's store), ``checkpoint`` the one chosen, with how far it got."""

    uri: str
    checkpoint: str
    epochs: int
    step: int

    def describe(self) -> str:
        return f"{self.checkpoint} (epoch {self.epochs}" + (f", step {self.step} of epoch {self.epochs + 1})" if self.step else ")")


def stage_checkpoint(record: RunRecord, handle: ClusterHandle) -> Optional[ResumePoint]:
    """Where the next attempt of ``record`` on ``handle`` resumes from: the newest complete checkpoint
    burst can reach (kept here; on the store it ran on: Ray Train's, the TPU driver's, one staged by
    a move, and the run's final checkpoint ``runs/<id>/checkpoint``, the one a stop names), checked
    to exist and be complete rather than assumed (a store's lifecycle may have deleted what the run
    wrote). One already in ``handle``'s store's own Ray Train directory is read there; any other is
    copied to ``handle``'s store. None: nothing to resume from. Directories, buckets and claims alike."""
    import tempfile

    from ..runtime import storage
    from ..runtime.job import RunFiles
    from ..runtime.training import CHECKPOINT_PREFIXES, latest_checkpoint, progress_in

    with tempfile.TemporaryDirectory() as tmp:
        found = _checkpoints_with_origin(record, Path(tmp), final=True)
        newest = latest_checkpoint([path for path, _ in found])
        if newest is None:
            return None
        origin = next(where for path, where in found if path == newest)
        epochs, step = progress_in(newest)
        own = RunFiles(handle.storage_uri, record.run_id).ray_train_dir
        if origin == own:  # in the new cluster's own store already: read where it is
            return ResumePoint(own, storage.join(own, newest.name), epochs, step)
        dest = storage.join(handle.storage_uri, "resume", record.run_id)
        name = newest.name if newest.name.startswith(CHECKPOINT_PREFIXES) else "checkpoint_final"  # what a job's resume directory is searched for
        storage.copy_dir(str(newest), storage.join(dest, name))
    return ResumePoint(dest, f"{storage.join(dest, name)} (staged from {storage.join(origin, newest.name)})", epochs, step)


def _checkpoints_with_origin(record: RunRecord, scratch: Path, final: bool = False, strict: bool = False) -> list[tuple[Path, str]]:
    """Every checkpoint of the run burst can still reach, as (directory here, where it is): those kept
    on this machine, then its store's (what Ray Train wrote there, what the TPU driver wrote, what a
    move staged there) and, with ``final``, the run's final checkpoint. A store gone with its
    cluster is passed over (what was kept here stands for it), unless ``strict``: then a store that
    does not answer is an error, not "no checkpoint" (what is about to be deleted must be read first)."""
    from ..runtime import storage
    from ..runtime.job import RunFiles
    from ..runtime.training import checkpoints_here

    kept = str(kept_checkpoints(record.run_id))
    found = [(path, kept) for path in checkpoints_here([kept], scratch)]
    if record.storage_uri:
        files = RunFiles(record.storage_uri, record.run_id)
        for root in (files.ray_train_dir, files.tpu_checkpoints, storage.join(record.storage_uri, "resume", record.run_id)):
            try:
                found += [(path, root) for path in checkpoints_here([root], scratch)]
            except (OSError, BurstError):  # a store gone with its cluster (a claim whose head pod is gone)
                if strict:
                    raise
        if final:  # a copy of the furthest one when the run ended: first, so that on a tie the one it copied wins
            where = storage.join(files.run_dir, "checkpoint")
            try:
                if storage.is_remote(where):
                    local = scratch / "final" / "checkpoint"
                    if storage.list_dirs(where) or storage.exists(storage.join(where, "history.json")):
                        storage.copy_dir(where, str(local))
                else:
                    local = Path(where)
                if local.is_dir():
                    found.insert(0, (local, files.run_dir))
            except (OSError, BurstError):  # none there, or the store cannot be read any more
                pass
    return found


def last_checkpoint(storage_uri: str, run_id: str) -> str:
    """The newest complete checkpoint of a run on its cluster's storage, in words for a message."""
    import tempfile

    from ..runtime import storage
    from ..runtime.job import RunFiles
    from ..runtime.training import checkpoints_here, latest_checkpoint, progress_in

    where = RunFiles(storage_uri, run_id).ray_train_dir
    with tempfile.TemporaryDirectory() as tmp:
        newest = latest_checkpoint(checkpoints_here([where], Path(tmp)))
        if newest is None:
            return "not written yet (the run starts over)"
        epochs, step = progress_in(newest)
        name = storage.join(where, newest.name) if storage.is_remote(where) else str(newest)
    return f"{name} (epoch {epochs}" + (f", step {step} of epoch {epochs + 1})" if step else ")")


def job_client(run: RunRecord, handles: dict[str, ClusterHandle], reached: bool = False):
    """The Jobs API client of a recorded job that is not finished yet, with ``run.state`` set to
    the job's; None when there is nothing to ask (finished, its cluster gone or unreachable: the
    state says which; a cluster that needs a tunnel and is not ``reached`` through one: unchanged).
    Training runs and scans alike."""
    if run.state in FINISHED or run.job_id is None:
        return None
    handle = handles.get(run.cluster)
    if handle is None:
        run.state = "LOST"
        run.message = f"cluster {run.cluster!r} is gone"
        return None
    target = targets.get(handle.provider)
    if not reached and not target.answers_here(handle):
        return None
    if not target.is_alive(handle):
        run.state = "UNREACHABLE"
        run.message = target.not_ready(handle)
        return None
    from ..client import jobs

    c = jobs.client(handle)
    run.state = jobs.job_status(c, run.job_id)
    return c


def refresh(run: RunRecord, handles: dict[str, ClusterHandle], reached: bool = False) -> RunRecord:
    """Ask the cluster for the state of a training run that is not finished yet (only clusters
    that answer without a tunnel, unless the handles are ``reached`` through one; ``burst logs
    RUN`` opens one for the others)."""
    c = job_client(run, handles, reached)
    if c is None:
        return run
    tracker = replay_log(run, c.get_job_logs(run.job_id))
    if tracker.last_epoch is not None or tracker.usage is not None:
        run.progress = tracker.snapshot(running=run.state == "RUNNING")
    if run.state == "SUCCEEDED" and tracker.stopped is not None:  # ended early, its checkpoint saved: not a result
        run.state = "LOST" if tracker.stopped.on_notice else "STOPPED" if tracker.stopped.cancelled else "STOPPED_BUDGET"
        run.message = (f"{'cancelled' if tracker.stopped.cancelled else 'stopped'} at epoch {tracker.stopped.epoch} step {tracker.stopped.step} "
                       f"({tracker.stopped.reason}); --resume goes on from there")
    return run


def replay_log(run: RunRecord, log: str):
    """What a run's job log says, read back event by event (timings, restarts, last epoch)."""
    from ..client import jobs

    tracker = jobs.RunTracker(int(run.config.get("epochs", 1)))
    for event in parse_events(log):
        tracker.record(event)
    return tracker


def succeeded_on(record: RunRecord, handle: Optional[ClusterHandle], refresh_record) -> tuple[RunRecord, Optional[ClusterHandle]]:
    """``record`` refreshed from its cluster (``handle``: as reached from here; default: as recorded)
    with ``refresh_record`` (the run's or the scan's), and the handle when it SUCCEEDED there with
    its results not collected yet (else None)."""
    reached = handle is not None
    handle = handle or state.load(ClusterHandle, record.cluster)
    if handle is None:
        return record, None
    record = refresh_record(record, {handle.name: handle}, reached)
    return record, handle if record.state == "SUCCEEDED" else None


def collect_finished(record: RunRecord, handle: Optional[ClusterHandle] = None) -> RunRecord:
    """Fetch the results of a training run that succeeded while nothing followed it (detached, or
    the CLI killed); ``handle``: its cluster as reached from here (default: as recorded)."""
    record, handle = succeeded_on(record, handle, refresh)
    if handle is None:
        return record
    from ..client import jobs

    log = jobs.client(handle).get_job_logs(record.job_id)
    tracker = replay_log(record, log)
    record.finished = record.finished or time.time()
    run_dir = RunDirectory(record.run_id)
    run_dir.collect(handle, record)
    run_dir.save_log(log)
    record.run_dir = str(run_dir.path.resolve())
    run_dir.write_summary(record, handle, tracker, record.created)
    _judge(record, run_dir)
    with state.locked():
        state.save(record)
    return record
