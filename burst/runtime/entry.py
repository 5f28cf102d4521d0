"""The Ray job that trains a workload on a cluster: ``python -m burst.runtime.entry CONFIG_JSON``.

Runs on the cluster's head: prepares the data (synthetic Monte Carlo when asked), hands training
to the Ray Train driver (GPUs, CPUs) or the TPU driver, validates the final checkpoint against
held-out Monte Carlo and publishes the run directory. What happens goes to stdout as events
(``job.py``), which any later command can read back from the job's log, so the job survives the
CLI disconnecting.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from ..home.records import write_json_atomic
from .job import DoneEvent, FailedEvent, JobConfig, RunFiles, StatusEvent, emit, failure_line
from .usage import USAGE_LOG, UsageSampler, add_to_report, pays_for, read_log

def _work_dir(run_id: str) -> Path:
    """The job driver's local copy of a bucket-backed run (data, results) before publishing (private to the user)."""
    from . import scratch

    return scratch.run_path("work", run_id)


def _prepare_data(cfg: JobConfig, storage_dir: Path) -> tuple[list[Path], list[Path]]:
    """Training and held-out test files on this node, each checked once before any worker starts."""
    from .. import workloads
    from . import storage

    workload = workloads.get(cfg.workload)
    if cfg.synthetic:
        from . import synthetic_cache

        emit(StatusEvent(message=f"preparing {cfg.synthetic} synthetic Monte Carlo events"))
        name = f"synthetic-{cfg.workload}-{cfg.synthetic}-s{cfg.seed}"
        (train_dir, test_dir), generated = synthetic_cache.prepared(
            storage_dir / "data" / name, name, workload.package_dir, lambda root: workload.prepare_synthetic(root, cfg.synthetic, seed=cfg.seed))
        if not generated:
            emit(StatusEvent(message="synthetic events: this node's copy from an earlier run (the same generator and seed)"))
        train_files, test_files = workload.list_files(train_dir), workload.list_files(test_dir)
    elif storage.is_remote(cfg.data):  # a bucket: copy to this node's disk first
        source = storage_dir / "data-source"
        storage.copy_dir(cfg.data, str(source))
        train_files, test_files = workload.split_files(source)
    else:
        train_files, test_files = workload.split_files(Path(cfg.data))
    for f in list(train_files) + list(test_files):  # a bad file fails here once, not in every worker retry
        workload.check_file(Path(f))
    return train_files, test_files


def stage_inputs(cfg: JobConfig, with_test_files: bool = False) -> tuple[JobConfig, Path, list[Path], list[Path]]:
    """Data ready for the workers: (config naming the files every worker reads, this job's working
    directory, training files, held-out files here). A bucket cannot be written like a directory:
    the job then works on local disk, and workers on other nodes read the files from the bucket
    (``with_test_files``: the held-out files too, for a scan's trials and for the worker that validates)."""
    from . import scratch, storage

    scratch.sweep()  # what killed runs left on this node (a cancelled allocation, a keeper's end)
    files = RunFiles(cfg.storage, cfg.run_id)
    remote = storage.is_remote(cfg.storage)
    # a bucket-backed run works in a private directory, emptied of what a killed attempt left
    storage_dir = scratch.fresh(_work_dir(cfg.run_id)) if remote else Path(cfg.storage)
    train_files, test_files = _prepare_data(cfg, storage_dir)
    shared = {"train_files": train_files, "val_files": test_files if with_test_files else []}
    update = {k: tuple(str(f) for f in v) for k, v in shared.items()}
    if cfg.data is not None and storage.is_remote(cfg.data):
        # a dataset in a store (staged once under its content hash): the workers read its files
        # where they are; nothing is uploaded again for this run
        source = storage_dir / "data-source"
        for key, local in shared.items():
            update[key] = tuple(storage.join(cfg.data, Path(f).relative_to(source).as_posix()) for f in local)
    elif remote:  # workers on other nodes read the training files from the bucket
        for key, local in shared.items():
            if local:
                part = "train" if key == "train_files" else "test"
                storage.copy_dir(str(local[0].parent), files.data_dir(part))
                update[key] = tuple(storage.join(files.data_dir(part), f.name) for f in local)
    if not with_test_files:
        update.pop("val_files")
    return cfg.model_copy(update=update), storage_dir, train_files, test_files


def worker_validates(cfg: JobConfig) -> bool:
    """Whether the training worker is handed the held-out files to validate the final weights
    (``training.validate_into_checkpoint``): where it reads them in place, as it reads the training
    files (this machine, a site's shared file system). Not on a TPU host, and not where the store is
    a bucket or a claim: there they would be uploaded and copied to a node for a few hundred events,
    so the job validates from the checkpoint, as it always could."""
    from . import storage

    return not cfg.tpu and not storage.is_remote(cfg.storage) and not (cfg.data is not None and storage.is_remote(cfg.data))


def run(cfg: JobConfig) -> int:
    import ray

    timings: dict[str, float] = {"job_start": time.time()}
    files = RunFiles(cfg.storage, cfg.run_id)
    cfg, storage_dir, train_files, test_files = stage_inputs(cfg, with_test_files=worker_validates(cfg))
    timings["data_ready"] = time.time()
    ray.init(address="auto", log_to_driver=True)
    out_dir = storage_dir / "runs" / cfg.run_id
    with UsageSampler(cfg.run_id, out_dir / "report" / USAGE_LOG, cfg.hourly_usd, paid_for=pays_for(cfg.tpu, cfg.gpus_per_worker)):  # every node's utilisation while it trains
        if cfg.tpu:
            from . import tpu

            ckpt_dir, failure = tpu.train(cfg, out_dir / "checkpoint")
        else:
            from . import ray_train

            emit(StatusEvent(message=f"training {cfg.workload} ({cfg.preset} preset) on {cfg.workers} worker(s)"))
            ckpt_dir, failure = ray_train.train(cfg, files.ray_train_root, out_dir / "checkpoint")
    timings["trained"] = time.time()
    if failure is not None:
        emit(FailedEvent(message=failure))
        return 1
    return _finish(ckpt_dir, out_dir, cfg, timings, train_files, test_files)


def _finish(ckpt_dir: Path, out_dir: Path, cfg: JobConfig, timings: dict, train_files: list, test_files: list) -> int:
    """Validate the final checkpoint (unless the run was stopped) and publish the run directory."""
    history = json.loads((ckpt_dir / "history.json").read_text())["history"]
    write_json_atomic(out_dir / "history.json", history, indent=1)
    if (ckpt_dir / "stopped.json").exists():
        # Stopped on request: keep the checkpoint and its history, skip validation (it costs
        # cluster time the budget no longer has).
        stopped = json.loads((ckpt_dir / "stopped.json").read_text())
        write_json_atomic(out_dir / "job_provenance.json", {"timings": timings, "stopped": stopped}, indent=1)
        publish(out_dir, cfg)
        emit(DoneEvent(run_dir=str(out_dir), stopped=True))
        return 0
    from .. import workloads
    from .training import VALIDATION_DONE, validation_made_with

    workload = workloads.get(cfg.workload)
    made = validation_made_with(ckpt_dir)
    if made is not None:  # validated by the worker that trained these weights: publish its report
        timings["validated_in_worker_s"] = json.loads((made / VALIDATION_DONE).read_text())["seconds"]
        shutil.copytree(made, out_dir / "report", dirs_exist_ok=True, ignore=shutil.ignore_patterns(VALIDATION_DONE))
        shutil.rmtree(made)
        metrics = json.loads((out_dir / "report" / "metrics.json").read_text())
    else:  # several workers, a TPU host, a bucket store, or the worker's validation failed: validate from the checkpoint here
        emit(StatusEvent(message="validating against held-out Monte Carlo"))
        metrics = workload.validate(ckpt_dir, test_files, out_dir / "report", events=cfg.val_events, seed=cfg.seed, gate=cfg.gate)
    timings["validated"] = time.time()
    from . import tensorboard_log

    usage_rows = read_log(out_dir / "report" / USAGE_LOG)
    add_to_report(out_dir / "report", usage_rows, history, cfg.hourly_usd, pays_for(cfg.tpu, cfg.gpus_per_worker))
    tensorboard_log.write(out_dir / "report" / "tensorboard", history, metrics["summary"], tuple(usage_rows))
    provenance = {
        "timings": timings,
        "data_hashes": workload.data_hashes(list(train_files) + list(test_files)),
        "train_files": [str(f) for f in train_files],
        "test_files": [str(f) for f in test_files],
    }
    write_json_atomic(out_dir / "job_provenance.json", provenance, indent=1)
    publish(out_dir, cfg)
    emit(DoneEvent(run_dir=str(out_dir), summary=metrics["summary"], said=workload.validation_line(metrics["summary"])))
    return 0


def publish(out_dir: Path, cfg: JobConfig) -> None:
    """On a bucket-backed cluster, copy the run directory to ``<storage>/runs/<run-id>``."""
    from . import storage

    if storage.is_remote(cfg.storage):
        storage.copy_dir(str(out_dir), RunFiles(cfg.storage, cfg.run_id).run_dir)
        shutil.rmtree(_work_dir(cfg.run_id), ignore_errors=True)


def reported(run_job, cfg) -> int:
    """Run a job; an exception ends it as one ``failed`` event (the follower shows that line; the
    traceback stays in the job log)."""
    from . import scratch

    try:
        return run_job(cfg)
    except Exception as exc:
        import traceback

        traceback.print_exc()
        emit(FailedEvent(message=failure_line(exc)))
        return 1
    finally:
        scratch.release_all()  # its workers have ended: no lock of its runs is left on this node


def main() -> int:
    return reported(run, JobConfig.from_arg(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
