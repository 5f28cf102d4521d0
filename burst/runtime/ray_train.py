"""The GPU/CPU driver: Ray Train's data-parallel trainer with TensorFlow's TF_CONFIG (what its
TensorflowTrainer does, without importing TensorFlow where nothing trains: ``tf_backend``), one
worker per node owning all its GPUs (or W CPU workers on one machine), checkpoints under the
cluster's storage, and a FailureConfig so that a lost worker restarts from the newest checkpoint."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from .job import FIXED_NODES, JobConfig, RunFiles, failure_line
from .scratch import hold, private_dir, sweep
from .training import (announce_stop, checkpoints_on_storage, fit_with_events, latest_checkpoint, local_files, node_data_dir,
                       node_scratch_dir, validate_into_checkpoint)


def _strategy(world_size: int):
    import tensorflow as tf

    if world_size > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG set by Ray Train
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()


def ray_train_storage(root: str) -> dict:
    """RunConfig's storage arguments for a store: a directory as it is, a bucket with its filesystem
    (the emulator's, where the environment names one)."""
    from . import storage

    if not storage.is_remote(root):
        return {"storage_path": root}
    filesystem, inner = storage.filesystem(root)
    return {"storage_path": inner, "storage_filesystem": filesystem}


def train_loop_per_worker(loop_config: dict) -> None:
    """Ray Train worker: build or restore the trainer, report a checkpoint every epoch."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import ray.train
    from ray.train import Checkpoint

    from workloads.common import precision
    from workloads.common.cpu import configure_threads

    from .. import workloads
    from . import storage

    cfg = JobConfig.from_arg(loop_config["job"])
    workload = workloads.get(cfg.workload)
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    if cfg.threads:
        configure_threads(cfg.threads, 2)  # measured best: intra all cores, inter 2 (bench --cpu-settings)
    strategy = _strategy(world)
    computes_in = precision.resolve(cfg.precision or precision.AUTO, strategy)
    restored = ray.train.get_checkpoint()
    hold(cfg.run_id)  # this run's scratch on this node (a killed attempt's copies included) is kept while this worker lives
    hold(f"{cfg.run_id}-val")
    sweep()  # what killed runs left on this node
    # as_directory: Ray's own directory when the checkpoint is local, else a download removed on
    # exit (to_directory left a /tmp/checkpoint_tmp_* copy behind per resumed worker)
    with contextlib.ExitStack() as held:
        restored_dirs = [Path(held.enter_context(restored.as_directory()))] if restored is not None else []
        copies = Path(held.enter_context(tempfile.TemporaryDirectory(dir=private_dir(node_scratch_dir(cfg.run_id)))))
        resume_dir = latest_checkpoint(restored_dirs + checkpoints_on_storage(cfg, copies))
        trainer, dataset_fn, steps = workload.prepare_training(
            local_files(cfg.train_files, cfg.run_id), cfg.preset, cfg.batch_per_replica, strategy=strategy, seed=cfg.seed,
            resume_from=resume_dir, steps_per_epoch=cfg.steps_per_epoch, overrides=cfg.overrides, precision=computes_in[0],
        )  # restores the weights now: the directory is not needed after this
    held_out = (workload.held_out(local_files(cfg.val_files, f"{cfg.run_id}-val"), trainer, cfg.val_events, cfg.seed)
                if cfg.validate_each_epoch and rank == 0 else None)

    scratch = private_dir(node_scratch_dir(cfg.run_id))
    # a run's final checkpoint carries its validation, made here where the model is (a scan's
    # trials are judged every epoch instead, and their scan validates its best). One worker only:
    # under MultiWorkerMirroredStrategy, reading a batch-norm statistic outside a step is a
    # collective every worker must join, and the others have finished; the job validates those.
    validates_here = world == 1 and bool(cfg.val_files) and not cfg.validate_each_epoch

    def save_epoch(metrics: dict) -> None:
        if held_out is not None:  # a scan's trial: the epoch's physics goes into its history and its report
            metrics.update(held_out.summary(trainer))
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            trainer.save(tmp)  # every worker saves (collective under MultiWorkerMirroredStrategy)
            if validates_here and len(trainer.history) >= cfg.epochs:
                validate_into_checkpoint(trainer, cfg, Path(tmp))
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp) if rank == 0 else None)

    def save_position(position: dict) -> None:
        """A checkpoint inside an epoch (its history file holds the position); reported like an epoch's."""
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            trainer.save(tmp)
            ray.train.report({"within_epoch": True, **position}, checkpoint=Checkpoint.from_directory(tmp) if rank == 0 else None)

    try:
        # A scan's trials keep their best checkpoint by a metric only whole epochs report: no mid-epoch ones there.
        notices = fit_with_events(trainer, dataset_fn, steps, cfg, save_epoch, rank=rank, resumed=resume_dir is not None, precision=computes_in,
                                  replicas=strategy.num_replicas_in_sync, save_position=None if held_out is not None or cfg.validate_each_epoch else save_position)
    except Exception as exc:
        line = failure_line(exc)
        if world > 1 or not line.startswith("bad input data: "):
            raise  # Ray Train restarts the workers (a lost peer, a transient fault)
        # A bad file stays bad: leave the verdict for the driver and end this worker without an
        # error, so that Ray Train does not restart it max_failures times to read the file again.
        # (With several workers an early return would leave the others in a collective; they fail.)
        storage.write_text(RunFiles(cfg.storage, cfg.run_id).data_error, line)
        return
    if storage.is_remote(cfg.train_files[0]):
        shutil.rmtree(node_data_dir(cfg.run_id), ignore_errors=True)
        shutil.rmtree(node_data_dir(f"{cfg.run_id}-val"), ignore_errors=True)
    if trainer.stopped:
        # Asked to stop (the budget guard, a notice): a final checkpoint of the weights as they are
        # now, with the position inside the epoch, so that a resume goes on from this very step.
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            trainer.save(tmp)
            (Path(tmp) / "stopped.json").write_text(json.dumps(trainer.stopped))
            ray.train.report({"stopped": True, **trainer.stopped}, checkpoint=Checkpoint.from_directory(tmp) if rank == 0 else None)
        if rank == 0:
            announce_stop(trainer, notices)


def helpers_not_needed(one_run_per_job: bool) -> tuple[str, ...]:
    """Ray Train's default callbacks that start a helper actor a burst run has no use for; each is
    a Ray worker process that imports Ray Train (about 2.5 CPU-seconds, and a core's share while
    the run's own worker starts beside it).

    - ``DatasetsCallback`` starts a ``DatasetManager`` actor for Ray Data's datasets, even when the
      trainer is given none: burst's workloads read their HDF5 files themselves.
    - ``PlacementGroupCleanerCallback`` starts a detached actor that removes the run's placement
      group if the controller dies while its driver lives on. Where the job runs one trainer (a
      run, not a scan) the driver fails with its controller and the job ends, and Ray removes a
      job's placement groups with it. A scan's driver goes on with other trials, so it keeps its
      cleaner."""
    return ("DatasetsCallback", "PlacementGroupCleanerCallback") if one_run_per_job else ("DatasetsCallback",)


def fixed_nodes() -> bool:
    """Whether this job's cluster neither loses nor gains nodes (this machine, a Slurm allocation:
    ``JobRuntime.nodes_drain``), as its submitter said."""
    return os.environ.get(FIXED_NODES) == "1"


def fixed_cluster_scaling_policy(scaling_config):
    """Ray Train's fixed scaling policy, less its resource requests: on a cluster whose nodes are
    fixed, nobody acts on them, and the first one starts Ray Data's autoscaling coordinator (a
    detached actor: one more Ray worker process per cluster). The class is made here, where Ray is
    imported (this module is not: the CLI reads it), and travels to the controller by value.
    None where this Ray's policy has no such requests (older Ray Train): its own is kept."""
    try:
        from ray.train.v2._internal.execution.scaling_policy import FixedScalingPolicy
    except ImportError:
        return None
    if not hasattr(FixedScalingPolicy, "_maybe_send_resource_request"):
        return None

    class FixedClusterScalingPolicy(FixedScalingPolicy):
        def after_controller_start(self, train_run_context) -> None:
            pass

        async def before_controller_shutdown(self) -> None:
            pass

        def before_controller_abort(self) -> None:
            pass

        def _maybe_send_resource_request(self) -> None:
            pass

    return FixedClusterScalingPolicy(scaling_config)


def trainer_parts(workload) -> tuple[Callable, Any]:
    """(the worker function, Ray Train's backend config) for a workload: burst's own through its
    TensorFlow loop; a public one through ``train_loop_per_worker``, its framework's process group."""
    from .tf_backend import TfConfig

    if not getattr(workload, "is_public", False):
        return train_loop_per_worker, TfConfig()
    from . import public_loop

    if workload.framework == "torch":
        from ray.train.torch import TorchConfig

        return public_loop.train_loop_per_worker, TorchConfig()  # gloo on CPU workers, NCCL where GPUs are asked for (Ray's default)
    return public_loop.train_loop_per_worker, TfConfig()


def tensorflow_trainer(cfg: JobConfig, root: str, callbacks: tuple = (), keep_best: str | None = None):
    """The Ray Train run of ``cfg``: its workers, checkpoints and restarts. ``keep_best``: a metric
    (lower is better) whose best checkpoint is kept besides the newest (a scan's trial)."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer as RayTrainer

    from .. import workloads
    loop, backend = trainer_parts(workloads.get(cfg.workload, cfg.workload_source))
    dropped = helpers_not_needed(one_run_per_job=keep_best is None)

    class DataParallelTrainer(RayTrainer):
        def _create_default_callbacks(self):  # Ray's own list, less the helpers burst has no use for
            return [c for c in super()._create_default_callbacks() if type(c).__name__ not in dropped]

        def _initialize_and_run_controller(self, **controller_init_kwargs):
            policy = fixed_cluster_scaling_policy(self.scaling_config) if fixed_nodes() else None
            if policy is not None:
                controller_init_kwargs["scaling_policy"] = policy
            return super()._initialize_and_run_controller(**controller_init_kwargs)

    resources = {"CPU": float(cfg.cpus_per_worker)}
    if cfg.gpus_per_worker:
        resources["GPU"] = float(cfg.gpus_per_worker)
    keep = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute=keep_best, checkpoint_score_order="min") if keep_best else CheckpointConfig(num_to_keep=2)
    return DataParallelTrainer(  # Ray's TensorflowTrainer (or TorchTrainer), less its framework's import here
        loop,
        train_loop_config={"job": cfg.to_arg()},
        backend_config=backend,
        scaling_config=ScalingConfig(num_workers=cfg.workers, use_gpu=cfg.gpus_per_worker > 0, resources_per_worker=resources),
        run_config=RunConfig(name=cfg.run_id, **ray_train_storage(root), failure_config=FailureConfig(max_failures=cfg.max_failures),
                             checkpoint_config=keep, callbacks=list(callbacks)),
    )


FITS_AFTER_AN_ACTOR_DIED = 1  # how many times a run's workers are started again when Ray Train lost one of its actors


def an_actor_died(exc: BaseException) -> bool:
    """Whether Ray Train's controller failed because one of the run's actors died (a worker, or a
    helper such as its synchronisation actor): a process lost, not the training function raising.

    Ray Train restarts the workers after such a loss while they train (``max_failures``), but not
    when it comes while the worker group starts, from a setup step (our ``TF_CONFIG``, its own
    helpers): it raises a ``ControllerError`` at once. Seen in test runs with a second Ray on the
    machine: a run failed before its first step with "The actor died unexpectedly before finishing
    this task." (that cause, Ray Train's placement-group cleaner asking the other cluster about the
    run, is gone: ``ray_head.head_env``; a node's hiccup while workers start remains)."""
    from ray.exceptions import RayActorError
    from ray.train.v2.api.exceptions import ControllerError

    return isinstance(exc, ControllerError) and isinstance(getattr(exc, "controller_failure", None), RayActorError)


def train(cfg: JobConfig, root: str, dest: Path) -> tuple[Path | None, str | None]:
    """Run the Ray Train job; (final checkpoint copied to ``dest``, None) or (None, why it failed).

    A run whose actor died while its workers started is started once more (``an_actor_died``): the
    workers resume from the newest checkpoint on storage, as after any restart, and the whole error
    (with Ray's account of the death) stays in the job's log."""
    import traceback

    from . import storage
    from .job import StatusEvent, emit

    fits = 0
    while True:
        trainer = tensorflow_trainer(cfg, root)
        try:
            result = trainer.fit()
            break
        except Exception as exc:
            if not an_actor_died(exc) or fits >= FITS_AFTER_AN_ACTOR_DIED:
                raise
            fits += 1
            traceback.print_exc()
            emit(StatusEvent(message=f"Ray Train lost an actor of the run ({failure_line(exc)}); starting its workers again "
                                     "from the newest checkpoint"))
        finally:  # a worker killed while saving leaves its half-written checkpoint here, on this node
            shutil.rmtree(node_scratch_dir(cfg.run_id), ignore_errors=True)
    bad_data = RunFiles(cfg.storage, cfg.run_id).data_error
    if storage.exists(bad_data):
        return None, storage.read_text(bad_data)
    ckpt_dir = final_checkpoint(result, cfg, dest)
    if ckpt_dir is None:
        return None, f"training produced no checkpoint: {failure_line(result.error) if result.error else 'no error reported'}"
    return ckpt_dir, None


def final_checkpoint(result, cfg: JobConfig, dest: Path) -> Path | None:
    """Copy the checkpoint with the most epochs to ``dest``.

    ``result.checkpoint`` is Ray's bookkeeping, which can lag behind storage after a worker
    restart (an attempt whose reports end before the controller polls it): seen in CI as a run
    that trained 3 epochs and validated the 1-epoch weights. The kept checkpoints and those on
    storage are read as well, and the one holding the most epochs wins.
    """
    kept = [c for c, _ in (getattr(result, "best_checkpoints", None) or [])]
    if result.checkpoint is not None:
        kept.append(result.checkpoint)  # last: on a tie in epochs, Ray's choice wins
    with tempfile.TemporaryDirectory() as tmp:
        candidates = checkpoints_on_storage(cfg, Path(tmp) / "stored") + [Path(c.to_directory(str(Path(tmp) / str(i)))) for i, c in enumerate(kept)]
        best = latest_checkpoint(candidates)
        if best is None:
            return None
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(best, dest)
    return dest
