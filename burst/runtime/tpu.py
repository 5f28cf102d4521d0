"""The TPU driver: TensorflowTrainer cannot drive TPUs, so on a TPU host the same training loop
runs under TPUStrategy as one Ray task. A checkpoint goes to the cluster storage every epoch, and
a restarted task (a preempted slice comes back) resumes from the newest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .job import JobConfig, RunFiles
from .training import announce_stop, checkpoints_here, fit_with_events, latest_checkpoint, local_files


def resume_point(cfg: JobConfig, local_root: Path) -> Path | None:
    """The newest complete checkpoint a TPU run goes on from: its own on the cluster's storage
    (copied to ``local_root``), or one staged from an earlier attempt elsewhere (``resume_from``:
    a move, or `--resume`, from a GPU or CPU cluster too)."""
    from . import storage

    ckpt_root = RunFiles(cfg.storage, cfg.run_id).tpu_checkpoints
    if storage.exists(ckpt_root):
        storage.copy_dir(ckpt_root, str(local_root))
    own = sorted(local_root.glob("epoch_*")) if local_root.exists() else []
    staged = checkpoints_here([cfg.resume_from], local_root / ".staged") if cfg.resume_from else []
    return latest_checkpoint(staged + own)


def train_on_host(cfg_arg: str, final_dir: str) -> str:
    """The Ray task on the TPU host; returns the directory of the final checkpoint."""
    import tensorflow as tf

    from .. import workloads
    from . import scratch, storage

    cfg = JobConfig.from_arg(cfg_arg)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    ckpt_root = RunFiles(cfg.storage, cfg.run_id).tpu_checkpoints
    local_root = scratch.fresh(scratch.run_path("tpu-checkpoints", cfg.run_id))  # the storage holds the truth
    resume = resume_point(cfg, local_root)
    trainer, dataset_fn, steps = workloads.get(cfg.workload).prepare_training(
        local_files(cfg.train_files, cfg.run_id), cfg.preset, cfg.batch_per_replica, strategy=strategy,
        seed=cfg.seed, resume_from=resume, steps_per_epoch=cfg.steps_per_epoch)

    def save_epoch(metrics: dict) -> None:
        keep(f"epoch_{metrics['epoch']:04d}")

    def save_position(position: dict) -> None:
        keep(f"epoch_{position['epoch'] - 1:04d}_step_{position['step']:06d}")

    def keep(name: str) -> None:
        local = local_root / name
        trainer.save(local)
        storage.copy_dir(str(local), storage.join(ckpt_root, local.name))

    notices = fit_with_events(trainer, dataset_fn, steps, cfg, save_epoch, speaks=True, resumed=resume is not None,
                              replicas=strategy.num_replicas_in_sync, save_position=save_position)
    trainer.save(final_dir)
    if trainer.stopped:
        keep(f"epoch_{trainer.stopped['epoch'] - 1:04d}_step_{trainer.stopped['step']:06d}")  # the next attempt starts here
        (Path(final_dir) / "stopped.json").write_text(json.dumps(trainer.stopped))
        announce_stop(trainer, notices)
    shutil.rmtree(local_root, ignore_errors=True)
    return final_dir


def train(cfg: JobConfig, dest: Path) -> tuple[Path | None, str | None]:
    import ray

    task = ray.remote(resources={"TPU_HOST": 1}, max_retries=3)(train_on_host)
    return Path(ray.get(task.remote(cfg.to_arg(), str(dest)))), None
