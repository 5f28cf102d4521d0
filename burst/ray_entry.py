"""The Ray job that trains a workload on a cluster: ``python -m burst.ray_entry CONFIG_JSON``.

Runs on the cluster's head. It prepares the data (synthetic Monte Carlo when asked), runs Ray
Train's ``TensorflowTrainer`` (one worker per node owning all that node's GPUs, or W CPU workers
locally) with checkpoints under the cluster's storage URI and a ``FailureConfig`` so that failed
workers restart from the latest checkpoint, then validates the final checkpoint against held-out
Monte Carlo. Progress goes to stdout as ``BURST_EVENT {json}`` lines, which the CLI parses from
the job's logs, so the job survives the CLI disconnecting.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

EVENT = "BURST_EVENT"
STEP_EVENTS_PER_EPOCH = 10


# A DataError raised in a worker's input pipeline reaches the driver wrapped twice (TensorFlow's
# InvalidArgumentError inside Ray Train's worker-group error); its own message is the useful part.
_DATA_ERROR = re.compile(r"DataError: (.+?)(?:\s*\[\[|\s*$)", re.MULTILINE)


def failure_line(exc: BaseException) -> str:
    """One line in burst's words for why the job failed (the traceback stays in the job log)."""
    text = str(exc)
    if exc.__class__.__name__ == "DataError":
        return f"bad input data: {text}"
    found = _DATA_ERROR.findall(text)
    if found:
        return f"bad input data: {found[-1].strip()}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{exc.__class__.__name__}: {first}" if first else exc.__class__.__name__


def emit(kind: str, **fields) -> None:
    print(f"{EVENT} {json.dumps({'type': kind, 'time': time.time(), **fields})}", flush=True)


def _strategy(world_size: int):
    import tensorflow as tf

    if world_size > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG set by Ray Train
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()


def _epochs_in(checkpoint: Path) -> int:
    """Epochs a checkpoint directory holds, or -1 when it is incomplete (a copy cut short)."""
    try:
        history = json.loads((checkpoint / "history.json").read_text())["history"]
    except (OSError, ValueError, KeyError):
        return -1
    if not (checkpoint / "gan3d.index").exists() or not list(checkpoint.glob("gan3d.data-*")):
        return -1
    return len(history)


def _checkpoints_on_storage(cfg: dict) -> list[Path]:
    """The run's checkpoint directories that Ray Train wrote to a local or shared storage directory,
    oldest first (none are listed for a bucket: there, Ray's own records are all there is)."""
    from . import storage as cluster_storage

    if cluster_storage.is_remote(cfg["storage"]):
        return []
    return sorted((Path(cfg["storage"]) / "ray-train" / cfg["run_id"]).glob("checkpoint_*"))


def latest_checkpoint(candidates: list[Path]) -> Path | None:
    """The complete checkpoint with the most epochs among Ray's and those on storage.

    Ray Train V2 registers a reported checkpoint only when its controller next polls the worker
    (every 2 s); a worker preempted inside that window has its checkpoint on storage but Ray's
    bookkeeping still points at the previous one. Looking at storage too avoids redoing an epoch.
    """
    scored = [(_epochs_in(c), i, c) for i, c in enumerate(candidates)]
    scored = [item for item in scored if item[0] >= 0]
    return max(scored, key=lambda item: item[:2])[2] if scored else None  # a tie goes to the later candidate


def train_loop_per_worker(cfg: dict) -> None:
    """Ray Train worker: build or restore the trainer, report a checkpoint every epoch."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import ray.train
    from ray.train import Checkpoint

    from workloads.gan3d import pipeline
    from workloads.gan3d.train import configure_cpu_threads

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    if cfg.get("threads"):
        configure_cpu_threads(cfg["threads"], 2)  # measured best: intra all cores, inter 2 (bench --cpu-settings)
    strategy = _strategy(world)
    from . import storage as cluster_storage

    restored = ray.train.get_checkpoint()
    resume_dir = latest_checkpoint(([Path(restored.to_directory())] if restored is not None else []) + _checkpoints_on_storage(cfg))
    train_files = _local_files(cfg["train_files"], cfg["run_id"])
    trainer, dataset_fn, steps = pipeline.prepare_training(
        train_files, cfg["preset"], cfg.get("batch_per_replica"), strategy=strategy, seed=cfg.get("seed", 0),
        resume_from=resume_dir, steps_per_epoch=cfg.get("steps_per_epoch"),
    )
    start_epoch = int(trainer.epoch.numpy())
    if rank == 0:
        from workloads.gan3d.cpu import machine_facts

        emit("start", epoch=start_epoch, epochs=cfg["epochs"], steps=steps, replicas=strategy.num_replicas_in_sync,
             global_batch=trainer.global_batch, resumed=resume_dir is not None, pid=os.getpid(), machine=machine_facts())
        # A worker killed between its checkpoint and its epoch event leaves an epoch unannounced;
        # re-announce the restored history, marked as a replay (the CLI counts each epoch number
        # once; a replayed epoch was not trained again).
        for metrics in trainer.history:
            emit("epoch", epochs=cfg["epochs"], replayed=True, **metrics)
    every = max(1, steps // STEP_EVENTS_PER_EPOCH)

    def on_step(info: dict) -> None:
        if rank == 0 and (info["step"] % every == 0 or info["step"] == 1):
            emit("step", **info)

    def on_epoch_end(metrics: dict) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            trainer.save(tmp)  # every worker saves (collective under MultiWorkerMirroredStrategy)
            checkpoint = Checkpoint.from_directory(tmp) if rank == 0 else None
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            emit("epoch", epochs=cfg["epochs"], **metrics)

    stop_file = stop_request_path(cfg["storage"], cfg["run_id"])
    try:
        trainer.fit(dataset_fn, cfg["epochs"], steps, on_epoch_end=[on_epoch_end], on_step=on_step,
                    should_stop=lambda: cluster_storage.exists(stop_file))
    except Exception as exc:
        line = failure_line(exc)
        if world > 1 or not line.startswith("bad input data: "):
            raise  # Ray Train restarts the workers (a lost peer, a transient fault)
        # A bad file stays bad: leave the verdict for the driver and end this worker without an
        # error, so that Ray Train does not restart it max_failures times to read the file again.
        # (With several workers an early return would leave the others in a collective; they fail.)
        cluster_storage.write_text(data_error_path(cfg["storage"], cfg["run_id"]), line)
        return
    if cluster_storage.is_remote(cfg["train_files"][0]):
        shutil.rmtree(_node_data_dir(cfg["run_id"]), ignore_errors=True)
    if trainer.stopped:
        # Asked to stop (the CLI's budget guard): a final checkpoint of the weights as they are now.
        # It records only the whole epochs done, so a resume would redo the interrupted epoch.
        with tempfile.TemporaryDirectory() as tmp:
            trainer.save(tmp)
            (Path(tmp) / "stopped.json").write_text(json.dumps(trainer.stopped))
            checkpoint = Checkpoint.from_directory(tmp) if rank == 0 else None
            ray.train.report({"stopped": True, **trainer.stopped}, checkpoint=checkpoint)
        if rank == 0:
            emit("stopped", **trainer.stopped)


def data_error_path(storage: str, run_id: str) -> str:
    """Where a worker leaves the one-line verdict on a bad training file for the driver."""
    return f"{storage.rstrip('/')}/runs/{run_id}/DATA_ERROR"


def stop_request_path(storage: str, run_id: str) -> str:
    """Where the CLI asks a run to stop: a file in the run's directory on the cluster storage."""
    return f"{storage.rstrip('/')}/runs/{run_id}/STOP"


def _work_dir(run_id: str) -> Path:
    """The job driver's local copy of a bucket-backed run (data, results) before publishing."""
    return Path(tempfile.gettempdir()) / "burst" / run_id


def _node_data_dir(run_id: str) -> Path:
    """Where a worker node keeps the training files it copied from the bucket."""
    return Path(tempfile.gettempdir()) / "burst-data" / run_id


def _local_files(files: list[str], run_id: str) -> list[Path]:
    """Training files as local paths; files in a bucket are copied to this node's disk first."""
    from . import storage as cluster_storage

    if not files or not cluster_storage.is_remote(files[0]):
        return [Path(f) for f in files]

    local = _node_data_dir(run_id)
    parent = files[0].rsplit("/", 1)[0]
    if not local.exists():
        cluster_storage.copy_dir(parent, str(local))
    return [local / f.rsplit("/", 1)[1] for f in files]


def _train_on_tpu(cfg: dict, final_dir: str) -> str:
    """Design decision 4: on a TPU host the loop runs under TPUStrategy as a Ray task.

    The same strategy-agnostic trainer as on GPUs; a checkpoint goes to the cluster storage at
    every epoch, and a restarted task (a preempted slice comes back) resumes from the newest.
    """
    import tensorflow as tf

    from workloads.gan3d import pipeline

    from . import storage as cluster_storage

    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    ckpt_root = cluster_storage.join(cfg["storage"], "tpu-checkpoints", cfg["run_id"])
    local_root = Path(tempfile.gettempdir()) / "burst-tpu-ckpt" / cfg["run_id"]
    if cluster_storage.exists(ckpt_root):
        cluster_storage.copy_dir(ckpt_root, str(local_root))
    resume = latest_checkpoint(sorted(local_root.glob("epoch_*"))) if local_root.exists() else None
    trainer, dataset_fn, steps = pipeline.prepare_training(
        _local_files(cfg["train_files"], cfg["run_id"]), cfg["preset"], cfg.get("batch_per_replica"), strategy=strategy,
        seed=cfg.get("seed", 0), resume_from=resume, steps_per_epoch=cfg.get("steps_per_epoch"))
    emit("start", epoch=int(trainer.epoch.numpy()), epochs=cfg["epochs"], steps=steps, replicas=strategy.num_replicas_in_sync,
         global_batch=trainer.global_batch, resumed=resume is not None, pid=os.getpid())

    def on_epoch_end(metrics: dict) -> None:
        local = local_root / f"epoch_{metrics['epoch']:04d}"
        trainer.save(local)
        cluster_storage.copy_dir(str(local), cluster_storage.join(ckpt_root, local.name))
        emit("epoch", epochs=cfg["epochs"], **metrics)

    stop_file = stop_request_path(cfg["storage"], cfg["run_id"])
    every = max(1, steps // STEP_EVENTS_PER_EPOCH)
    trainer.fit(dataset_fn, cfg["epochs"], steps, on_epoch_end=[on_epoch_end],
                on_step=lambda info: emit("step", **info) if info["step"] % every == 0 else None,
                should_stop=lambda: cluster_storage.exists(stop_file))
    trainer.save(final_dir)
    if trainer.stopped:
        (Path(final_dir) / "stopped.json").write_text(json.dumps(trainer.stopped))
        emit("stopped", **trainer.stopped)
    shutil.rmtree(local_root, ignore_errors=True)
    return final_dir


def run(cfg: dict) -> int:
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    from workloads.gan3d import pipeline

    from . import storage as cluster_storage

    timings: dict[str, float] = {"job_start": time.time()}
    remote = cluster_storage.is_remote(cfg["storage"])
    # A bucket cannot be written like a directory: work on local disk and copy to the bucket.
    storage = _work_dir(cfg["run_id"]) if remote else Path(cfg["storage"])
    if cfg.get("synthetic"):
        emit("status", message=f"generating {cfg['synthetic']} synthetic Monte Carlo events")
        name = f"synthetic-{cfg['synthetic']}-s{cfg.get('seed', 0)}"
        train_dir, test_dir = pipeline.prepare_synthetic(storage / "data" / name, cfg["synthetic"], seed=cfg.get("seed", 0))
        train_files, test_files = sorted(train_dir.glob("*.h5")), sorted(test_dir.glob("*.h5"))
    elif cluster_storage.is_remote(cfg["data"]):  # a bucket: copy to this node's disk first
        source = storage / "data-source"
        cluster_storage.copy_dir(cfg["data"], str(source))
        train_files, test_files = pipeline.split_files(source)
    else:
        train_files, test_files = pipeline.split_files(Path(cfg["data"]))
    shared_train = [str(f) for f in train_files]
    if remote:  # workers on other nodes read the training files from the bucket
        bucket_dir = cluster_storage.join(cfg["storage"], "data", cfg["run_id"], "train")
        cluster_storage.copy_dir(str(train_files[0].parent), bucket_dir)
        shared_train = [cluster_storage.join(bucket_dir, f.name) for f in train_files]
    from workloads.gan3d.data import check_conditions

    for f in list(train_files) + list(test_files):  # a bad file fails here once, not in every worker retry
        check_conditions(Path(f))
    timings["data_ready"] = time.time()
    cfg = {**cfg, "train_files": shared_train}
    ray.init(address="auto", log_to_driver=True)
    out_dir = storage / "runs" / cfg["run_id"]
    if cfg.get("tpu"):
        train_on_tpu = ray.remote(resources={"TPU_HOST": 1}, max_retries=3)(_train_on_tpu)
        ckpt_dir = ray.get(train_on_tpu.remote(cfg, str(out_dir / "checkpoint")))
        timings["trained"] = time.time()
        return _finish(Path(ckpt_dir), out_dir, cfg, timings, train_files, test_files)
    workers, gpus = int(cfg.get("workers", 1)), int(cfg.get("gpus_per_worker", 0))
    resources = {"CPU": float(cfg.get("cpus_per_worker", 1))}
    if gpus:
        resources["GPU"] = float(gpus)
    trainer = TensorflowTrainer(
        train_loop_per_worker,
        train_loop_config=cfg,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpus > 0, resources_per_worker=resources),
        run_config=RunConfig(
            name=cfg["run_id"], storage_path=cluster_storage.join(cfg["storage"], "ray-train") if remote else str(storage / "ray-train"),
            failure_config=FailureConfig(max_failures=cfg.get("max_failures", 3)),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
    )
    emit("status", message=f"training {cfg['preset']} preset on {workers} worker(s)")
    result = trainer.fit()
    timings["trained"] = time.time()
    bad_data = data_error_path(cfg["storage"], cfg["run_id"])
    if cluster_storage.exists(bad_data):
        emit("failed", message=cluster_storage.read_text(bad_data))
        return 1
    ckpt_dir = _final_checkpoint(result, cfg, out_dir / "checkpoint")
    if ckpt_dir is None:
        emit("failed", message=f"training produced no checkpoint: {failure_line(result.error) if result.error else 'no error reported'}")
        return 1
    return _finish(ckpt_dir, out_dir, cfg, timings, train_files, test_files)


def _final_checkpoint(result, cfg: dict, dest: Path) -> Path | None:
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
        candidates = _checkpoints_on_storage(cfg) + [Path(c.to_directory(str(Path(tmp) / str(i)))) for i, c in enumerate(kept)]
        best = latest_checkpoint(candidates)
        if best is None:
            return None
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(best, dest)
    return dest


def _finish(ckpt_dir: Path, out_dir: Path, cfg: dict, timings: dict, train_files: list, test_files: list) -> int:
    """Validate the final checkpoint (unless the run was stopped) and publish the run directory."""
    from workloads.gan3d import pipeline

    if (ckpt_dir / "stopped.json").exists():
        # Stopped on request: keep the checkpoint and its history, skip validation (it costs
        # cluster time the budget no longer has).
        history = json.loads((ckpt_dir / "history.json").read_text())["history"]
        (out_dir / "history.json").write_text(json.dumps(history, indent=1))
        (out_dir / "job_provenance.json").write_text(json.dumps({"timings": timings, "stopped": json.loads((ckpt_dir / "stopped.json").read_text())}, indent=1))
        _publish(out_dir, cfg)
        emit("done", run_dir=str(out_dir), stopped=True)
        return 0
    emit("status", message="validating against held-out Monte Carlo")
    from workloads.gan3d.pipeline import validate

    metrics = validate(ckpt_dir, test_files, out_dir / "report", events=cfg.get("val_events", 500), seed=cfg.get("seed", 0))
    timings["validated"] = time.time()
    history = json.loads((ckpt_dir / "history.json").read_text())["history"]
    (out_dir / "history.json").write_text(json.dumps(history, indent=1))
    provenance = {
        "timings": timings,
        "data_hashes": pipeline.data_hashes(list(train_files) + list(test_files)),
        "train_files": [str(f) for f in train_files],
        "test_files": [str(f) for f in test_files],
    }
    (out_dir / "job_provenance.json").write_text(json.dumps(provenance, indent=1))
    _publish(out_dir, cfg)
    emit("done", run_dir=str(out_dir), summary=metrics["summary"])
    return 0


def _publish(out_dir: Path, cfg: dict) -> None:
    """On a bucket-backed cluster, copy the run directory to ``<storage>/runs/<run-id>``."""
    from . import storage as cluster_storage

    if cluster_storage.is_remote(cfg["storage"]):
        cluster_storage.copy_dir(str(out_dir), cluster_storage.join(cfg["storage"], "runs", cfg["run_id"]))
        shutil.rmtree(_work_dir(cfg["run_id"]), ignore_errors=True)


def main() -> int:
    cfg = json.loads(sys.argv[1])
    try:
        return run(cfg)
    except Exception as exc:  # the CLI shows this line; the traceback stays in the job log
        import traceback

        traceback.print_exc()
        emit("failed", message=failure_line(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
