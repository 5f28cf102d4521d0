"""The Ray Train worker of a workload written to the public interface (``burst.workload``): the
context its ``train(ctx)`` is handed, and the loop burst keeps around it.

burst keeps the same promises for it as for its own workloads: every worker goes on from the
same checkpoint (Ray Train's, or a newer one on storage), each epoch ends with a checkpoint that
is whole or absent (a marker written last), a stop (the budget guard, a cancel, a lease's end, a
notice) is decided by rank 0 and broadcast, so every worker ends at the same epoch, and the final
checkpoint of a stopped run says where it stopped. What differs: the workload's own loop runs
each epoch, so the position inside an epoch is not kept (a resume trains that epoch again)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

from .job import EpochEvent, JobConfig, RunFiles, StartEvent, emit
from .scratch import hold, private_dir, sweep
from .training import announce_stop, checkpoints_on_storage, latest_checkpoint, local_files, node_scratch_dir, requested_by

MARKER = "burst-checkpoint.json"  # written last: the checkpoint directory is whole


def history_of(checkpoint: Optional[Path]) -> list[dict]:
    if checkpoint is None:
        return []
    try:
        return list(json.loads((checkpoint / "history.json").read_text())["history"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


class WorkerContext:
    """``burst.workload.TrainContext`` on one Ray Train worker."""

    def __init__(self, cfg: JobConfig, rank: int, world_size: int, checkpoint: Optional[Path], train_files: list[Path],
                 workload, scratch: Path):
        from .notice import NoticeWatch

        self.cfg = cfg
        self.rank, self.world_size = rank, world_size
        self.preset = cfg.preset
        self.total_epochs = cfg.epochs
        self.batch_per_replica = cfg.batch_per_replica or workload.default_batch(cfg.preset)
        self.seed = cfg.seed
        self.steps_per_epoch = cfg.steps_per_epoch
        self.precision = cfg.precision
        self.knobs = dict(cfg.overrides or {})
        self.train_files = train_files
        self.checkpoint = checkpoint
        self.history = history_of(checkpoint)
        self.start_epoch = len(self.history)
        self.stopped: Optional[dict] = None
        self.notices = NoticeWatch(cfg.notices)
        self._workload = workload
        self._scratch = scratch
        self._stop_files = cfg.stop_files or (RunFiles(cfg.storage, cfg.run_id).stop_request,)
        self._epoch_started: Optional[float] = None
        self._saved: Optional[Path] = None  # this worker's newest checkpoint directory, kept for a stop's final one
        self._strategy = None

    def epochs(self) -> Iterator[int]:
        for epoch in range(self.start_epoch, self.total_epochs):
            if epoch > self.start_epoch and self._agreed_stop():
                self.stopped = {"epoch": epoch + 1, "step": 0, "steps": self.steps_per_epoch or 0}
                return
            self._epoch_started = time.perf_counter()
            yield epoch

    def should_stop(self) -> bool:
        return self._agreed_stop()

    def strategy(self):
        if self._strategy is None:
            import tensorflow as tf

            if self.world_size > 1:
                self._strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG, set by Ray Train
            else:
                self._strategy = tf.distribute.get_strategy()
        return self._strategy

    def end_epoch(self, metrics: dict[str, float], save: Callable[[Path], None]) -> None:
        import ray.train
        from ray.train import Checkpoint

        seconds = time.perf_counter() - (self._epoch_started or time.perf_counter())
        epoch = len(self.history) + 1
        numbers = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        samples = numbers.get("samples")
        row = {"epoch": epoch, "seconds": round(seconds, 3), **numbers,
               "samples_per_s": round(samples * self.world_size / seconds, 2) if samples and seconds > 0 else None}  # samples: each worker's own
        self.history.append(row)
        directory = Path(tempfile.mkdtemp(dir=self._scratch, prefix=f"epoch-{epoch:04d}-"))
        save(directory)  # every worker (a framework's save may be a collective); rank 0's is kept
        (directory / "history.json").write_text(json.dumps({"workload": self._workload.name, "history": self.history}, indent=1))
        (directory / MARKER).write_text(json.dumps({"epoch": epoch, "rank": self.rank}))
        ray.train.report(row, checkpoint=Checkpoint.from_directory(str(directory)) if self.rank == 0 else None)  # a barrier
        if self._saved is not None:
            shutil.rmtree(self._saved, ignore_errors=True)
        self._saved = directory
        if self.rank == 0:
            emit(EpochEvent(epochs=self.total_epochs, said=self._workload.epoch_line(row), **row))

    def _agreed_stop(self) -> bool:
        """Rank 0 looks (the run's stop request, a stop notice); every worker gets its answer."""
        from ray.train.collective import broadcast_from_rank_zero

        from . import storage

        mine = self.rank == 0 and (any(storage.exists(f) for f in self._stop_files) or self.notices.stop_now())
        return bool(broadcast_from_rank_zero(mine) if self.world_size > 1 else mine)

    def final_stop_checkpoint(self) -> None:
        """A stopped run's final checkpoint: the newest one with where it stopped and why."""
        import ray.train
        from ray.train import Checkpoint

        self.stopped["reason"] = f"notice: {self.notices.acting.source}" if self.notices.acting is not None else requested_by(self._stop_files)
        if self._saved is None:  # stopped before its first epoch ended here: nothing of this attempt to keep
            return
        (self._saved / "stopped.json").write_text(json.dumps(self.stopped))
        ray.train.report({"stopped": True, **self.stopped}, checkpoint=Checkpoint.from_directory(str(self._saved)) if self.rank == 0 else None)


def train_loop_per_worker(loop_config: dict) -> None:
    """Ray Train worker of a public workload: its ``train(ctx)`` from the run's newest checkpoint."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import ray.train

    from .. import workloads

    cfg = JobConfig.from_arg(loop_config["job"])
    workload = workloads.get(cfg.workload, cfg.workload_source)
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    workload.prepare_process(world)
    hold(cfg.run_id)
    sweep()
    scratch = private_dir(node_scratch_dir(cfg.run_id))
    restored = ray.train.get_checkpoint()
    with contextlib.ExitStack() as held:
        restored_dirs = [Path(held.enter_context(restored.as_directory()))] if restored is not None else []
        copies = Path(held.enter_context(tempfile.TemporaryDirectory(dir=scratch)))
        resume_dir = latest_checkpoint(restored_dirs + checkpoints_on_storage(cfg, copies))
        ctx = WorkerContext(cfg, rank, world, resume_dir, local_files(cfg.train_files, cfg.run_id), workload, scratch)
        if rank == 0:
            from workloads.common.cpu import machine_facts

            emit(StartEvent(epoch=ctx.start_epoch, epochs=cfg.epochs, steps=cfg.steps_per_epoch or 0, replicas=world,
                            global_batch=ctx.batch_per_replica * world, resumed=resume_dir is not None, pid=os.getpid(),
                            machine={**machine_facts(), "precision": cfg.precision or "the workload's", "precision_why": "asked for"},
                            run_id=cfg.run_id))
            for row in ctx.history:
                emit(EpochEvent(epochs=cfg.epochs, replayed=True, **row))
        workload.user.train(ctx)
        if ctx.stopped is None and len(ctx.history) < cfg.epochs and ctx._agreed_stop():  # stopped inside its last epoch
            ctx.stopped = {"epoch": len(ctx.history) + 1, "step": 0, "steps": cfg.steps_per_epoch or 0}
        if ctx.stopped is not None:
            ctx.final_stop_checkpoint()
            if rank == 0:
                announce_stop(ctx, ctx.notices)
        elif len(ctx.history) < cfg.epochs:
            raise RuntimeError(f"workload {workload.name}'s train(ctx) returned after {len(ctx.history)} of {cfg.epochs} epochs "
                               "without being asked to stop: loop over ctx.epochs() and call ctx.end_epoch() once each")
