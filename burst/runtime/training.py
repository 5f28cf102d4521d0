"""What the GPU/CPU (Ray Train) and TPU drivers share: the epoch loop with its events, checkpoint
choice, and where a node keeps its copy of the training files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from . import scratch
from .job import CheckpointEvent, EpochEvent, JobConfig, RunFiles, StartEvent, StepEvent, StoppedEvent, emit
from .notice import NoticeWatch
from .usage import WorkerGauges

STEP_EVENTS_PER_EPOCH = 10
VALIDATION_DIR = "validation"  # in a final checkpoint: its validation report, made by the worker that trained it
VALIDATION_DONE = "made.json"  # in VALIDATION_DIR, written last: how long it took


def progress_in(checkpoint: Path) -> tuple[int, int]:
    """(whole epochs, steps into the next one) a checkpoint directory holds, or (-1, 0) when it is
    incomplete (a copy cut short)."""
    try:
        meta = json.loads((checkpoint / "history.json").read_text())
        history, step = meta["history"], int((meta.get("position") or {}).get("step", 0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return -1, 0
    # the TensorFlow checkpoint beside it, whatever the workload's prefix: an index and its data; or,
    # of a workload of the public interface, the marker its loop writes last (public_loop.MARKER)
    if not (checkpoint / "burst-checkpoint.json").is_file() and \
            not any(list(checkpoint.glob(f"{index.stem}.data-*")) for index in checkpoint.glob("*.index")):
        return -1, 0
    return len(history), step


def epochs_in(checkpoint: Path) -> int:
    """Whole epochs a checkpoint directory holds, or -1 when it is incomplete."""
    return progress_in(checkpoint)[0]


def latest_checkpoint(candidates: list[Path]) -> Path | None:
    """The complete checkpoint furthest on (most epochs, then most steps into the next) among the
    candidates (a tie goes to the later one).

    Ray Train registers a reported checkpoint only when its controller next polls the worker
    (every 2 s); a worker preempted inside that window has its checkpoint on storage but Ray's
    bookkeeping still points at the previous one. Callers pass both, so no epoch is redone.
    """
    scored = [(progress_in(c), i, c) for i, c in enumerate(candidates)]
    scored = [item for item in scored if item[0][0] >= 0]
    return max(scored, key=lambda item: item[:2])[2] if scored else None


CHECKPOINT_PREFIXES = ("checkpoint_", "epoch_")  # Ray Train's names; the TPU driver's (epoch_0002, epoch_0001_step_000040)


def checkpoint_dirs(root: str) -> list[str]:
    """The checkpoint directories under a storage path (a directory, a bucket or a claim), oldest first."""
    from . import storage

    return [storage.join(root, name) for name in storage.list_dirs(root) if name.startswith(CHECKPOINT_PREFIXES)]


def checkpoints_here(roots: list[str], scratch_dir: Path) -> list[Path]:
    """Every checkpoint under ``roots`` as a directory on this machine, in the order of ``roots``:
    a local one where it is, one in a bucket or claim copied into ``scratch_dir`` first (so that
    ``latest_checkpoint`` reads the bytes it would resume from, whatever the storage)."""
    import tempfile

    from . import storage

    out = []
    for root in roots:
        for uri in checkpoint_dirs(root):
            if storage.is_remote(uri):
                scratch_dir.mkdir(parents=True, exist_ok=True)
                local = Path(tempfile.mkdtemp(dir=scratch_dir)) / uri.rstrip("/").rsplit("/", 1)[-1]
                storage.copy_dir(uri, str(local))
                out.append(local)
            else:
                out.append(Path(uri))
    return out


def checkpoints_on_storage(cfg: JobConfig, scratch_dir: Path) -> list[Path]:
    """The run's checkpoint directories that Ray Train wrote, an earlier attempt's first (where a
    resume was staged, or the store it ran on), oldest first, wherever they are: a directory, a
    bucket or a claim (those copied into ``scratch_dir``)."""
    roots = ([cfg.resume_from] if cfg.resume_from else []) + [RunFiles(cfg.storage, cfg.run_id).ray_train_dir]
    return checkpoints_here(roots, scratch_dir)


def node_data_dir(run_id: str) -> Path:
    """Where a worker node keeps the training files it copied from the bucket (private to the user)."""
    return scratch.run_path("data", run_id)


def node_scratch_dir(run_id: str) -> Path:
    """Where a worker writes a checkpoint before Ray Train takes it (private; removed when the run ends)."""
    return scratch.run_path("checkpoints", run_id)


def local_files(files: tuple[str, ...], run_id: str) -> list[Path]:
    """Training files as local paths; files in a bucket are copied to this node's disk first."""
    from . import storage

    if not files or not storage.is_remote(files[0]):
        return [Path(f) for f in files]
    parent = files[0].rsplit("/", 1)[0]
    local = scratch.filled(node_data_dir(run_id), lambda tmp: storage.copy_dir(parent, str(tmp)))
    return [local / f.rsplit("/", 1)[1] for f in files]


def fit_with_events(trainer, dataset_fn, steps: int, cfg: JobConfig, save_epoch: Callable[[dict], None], *, rank: int,
                    resumed: bool, replicas: int, save_position: Callable[[dict], None] | None = None,
                    precision: tuple[str, str] = ("float32", "asked for")) -> NoticeWatch:
    """Train the remaining epochs, saying what happens; ``save_epoch`` keeps each epoch's checkpoint
    and ``save_position`` one taken inside an epoch (every ``cfg.checkpoint_every_steps`` steps, and
    when a ``checkpoint`` notice comes).

    ``rank`` is this worker's (Ray Train's; the TPU client is 0): rank 0 talks for the job, and every
    worker publishes its own throughput (``WorkerGauges``). Training ends early when
    the run's stop request or a ``stop`` notice appears on storage (``trainer.stopped`` says where
    and why); the caller then writes a final checkpoint and calls ``announce_stop`` with the
    returned watch. ``precision``: what the trainer computes in and why (the start event's machine
    facts carry both into the run's provenance).
    """
    from workloads.common.cpu import machine_facts

    from .. import workloads
    from . import storage

    workload = workloads.get(cfg.workload)
    speaks = rank == 0
    if speaks:
        emit(StartEvent(epoch=int(trainer.epoch.numpy()), epochs=cfg.epochs, steps=steps, replicas=replicas,
                        global_batch=trainer.global_batch, resumed=resumed, pid=os.getpid(),
                        machine={**machine_facts(), "precision": precision[0], "precision_why": precision[1]},
                        run_id=cfg.run_id))
        # A worker killed between its checkpoint and its epoch event leaves an epoch unannounced;
        # re-announce the restored history, marked as a replay (followers count each epoch once).
        for metrics in trainer.history:
            emit(EpochEvent(epochs=cfg.epochs, replayed=True, **metrics))
    every = max(1, steps // STEP_EVENTS_PER_EPOCH)
    gauges = WorkerGauges.for_this_worker(cfg.run_id, rank)
    per_worker_batch = trainer.global_batch / max(1, cfg.workers)
    last = {"step": 0, "elapsed": 0.0, "input_wait": 0.0}  # where the gauges were last set: they show the rate since

    def on_step(info: dict) -> None:
        if not (info["step"] % every == 0 or info["step"] == 1):
            return
        if gauges is not None:
            if info["step"] <= last["step"]:  # a new epoch: its clock starts again
                last.update(step=0, elapsed=0.0, input_wait=0.0)
            seconds = info.get("elapsed", 0.0) - last["elapsed"]
            if seconds > 0:
                waited = info.get("input_wait", 0.0) - last["input_wait"]
                gauges.set((info["step"] - last["step"]) * per_worker_batch / seconds, min(1.0, max(0.0, waited / seconds)))
            last.update(step=info["step"], elapsed=info.get("elapsed", 0.0), input_wait=info.get("input_wait", 0.0))
        if speaks:
            emit(StepEvent(**info))

    def on_epoch_end(metrics: dict) -> None:
        save_epoch(metrics)
        if speaks:
            emit(EpochEvent(epochs=cfg.epochs, said=workload.epoch_line(metrics), **metrics))

    notices = NoticeWatch(cfg.notices)

    def on_checkpoint(position: dict) -> None:
        if save_position is None:
            return
        save_position(position)
        if speaks:
            notices.done()
            emit(CheckpointEvent(**position))

    stop_files = cfg.stop_files or (RunFiles(cfg.storage, cfg.run_id).stop_request,)
    trainer.fit(dataset_fn, cfg.epochs, steps, on_epoch_end=[on_epoch_end], on_step=on_step,
                should_stop=lambda: any(storage.exists(f) for f in stop_files) or notices.stop_now(),
                on_checkpoint=on_checkpoint, checkpoint_every=cfg.checkpoint_every_steps if save_position else None,
                should_checkpoint=notices.checkpoint_now if save_position else None)
    if trainer.stopped:
        trainer.stopped["reason"] = f"notice: {notices.acting.source}" if notices.acting is not None else requested_by(stop_files)
    return notices


def requested_by(stop_files) -> str:
    """``cancel`` when the run's owner asked it to stop; ``request`` for the budget guard, a lease's end or an early stop."""
    from . import storage
    from .job import CANCEL_REQUEST

    for uri in stop_files:
        try:
            if storage.read_text(uri).strip() == CANCEL_REQUEST:
                return CANCEL_REQUEST
        except Exception:  # noqa: BLE001 - a request that is gone or unreadable is the guard's, as before
            continue
    return "request"


def validate_into_checkpoint(trainer, cfg: JobConfig, checkpoint_dir: Path) -> None:
    """Validate the final weights where they are (the training worker, TensorFlow loaded, the model
    in memory) into ``checkpoint_dir/validation``, before the checkpoint is reported: the job then
    only publishes that report, where it would otherwise import TensorFlow and rebuild the model to
    make the very same showers (9 of the driver's 12 CPU-seconds in a short run on a 2-core Xeon;
    on a GPU cluster the showers are made on the GPU). A failure is said and left to the job, which
    validates from the checkpoint as it always could."""
    import shutil
    import traceback

    from .. import workloads
    from .job import StatusEvent

    emit(StatusEvent(message=f"epoch {len(trainer.history)} trained; validating it against held-out Monte Carlo"))
    out = checkpoint_dir / VALIDATION_DIR
    start = time.perf_counter()
    try:
        workloads.get(cfg.workload).validate(trainer, local_files(cfg.val_files, f"{cfg.run_id}-val"), out, events=cfg.val_events,
                                             seed=cfg.seed, gate=cfg.gate)
    except Exception:  # noqa: BLE001 - the job validates from the checkpoint instead, and says why if it fails there too
        traceback.print_exc()
        shutil.rmtree(out, ignore_errors=True)
        emit(StatusEvent(message="validation in the training worker failed (above); the job validates from the checkpoint"))
        return
    # written last: a report without it was cut short
    (out / VALIDATION_DONE).write_text(json.dumps({"seconds": round(time.perf_counter() - start, 3), "epochs": len(trainer.history)}))


def validation_made_with(checkpoint: Path) -> Path | None:
    """The validation report a checkpoint carries (``validate_into_checkpoint``), if it is whole."""
    made = checkpoint / VALIDATION_DIR
    return made if (made / VALIDATION_DONE).is_file() and (made / "metrics.json").is_file() else None


def announce_stop(trainer, notices: NoticeWatch | None = None) -> None:
    """After the final checkpoint of a run stopped on request or on notice: where it stopped."""
    if notices is not None:
        notices.done()
    emit(StoppedEvent(**trainer.stopped))
