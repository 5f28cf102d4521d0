"""The TPU driver: Ray Train cannot drive TPUs, so the same training loop runs under TPUStrategy as
one Ray task on host 0 of the slice. A checkpoint goes to the cluster storage every epoch, and a
restarted task resumes from the newest.

A slice of several hosts (a pod slice: v3-32 and up) is driven as TensorFlow does it on TPU VMs:
one client, on host 0, whose ``TPUClusterResolver`` is given the slice's name (it asks the Cloud
TPU API for every host's address) and ``TPU_LOAD_LIBRARY=0`` (the client leaves the local chips to
the host's TPU runtime, which serves them as every other host's does); TPUStrategy then spans the
chips of all hosts. Google's own TensorFlow pod tests run the program so, on one worker with
``TPU_NAME`` and ``TPU_LOAD_LIBRARY=0`` (GoogleCloudPlatform/ml-auto-solutions,
``dags/solutions_team/configs/tensorflow/solutionsteam_tf_nightly_supported_config.py``:
``all_workers=not is_pod``). Every host runs Ray (infra/tpu.py: ``TPU_HOST`` on each, and
``TPU_SLICE_HEAD`` on host 0 alone); the driver holds one sentinel actor on every host for the
run, so a host that leaves (its Ray node dies) is seen at once: the client's task is cancelled, the
driver waits for the slice to be whole again, and the slice starts again from its newest
checkpoint, at most ``MAX_SLICE_RESTARTS`` times.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Callable

from .job import JobConfig, RunFiles, StatusEvent, StoppedEvent, emit, failure_line
from .training import announce_stop, checkpoints_here, fit_with_events, latest_checkpoint, local_files

HOST = "TPU_HOST"              # one on every host of the slice (infra/tpu.py starts Ray so)
WORKER_ENV = "BURST_TPU_WORKER"  # a host's TPU worker number (the metadata's agent-worker-number), in its Ray's environment
SLICE_HEAD = "TPU_SLICE_HEAD"  # host 0's alone: where the TensorFlow client runs
MAX_SLICE_RESTARTS = 3
HOSTS_WAIT_S = 900.0           # how long a slice that lost a host is waited for before the run stops
# what TensorFlow's client raises when a host's TPU runtime goes away under it: the slice restarts;
# any other error of the training (bad data, a bug) ends the run as it would on one host
LOST_HOST_ERRORS = frozenset({"UnavailableError", "AbortedError", "DeadlineExceededError"})


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

    from workloads.common import precision

    from .. import workloads
    from . import scratch, storage

    cfg = JobConfig.from_arg(cfg_arg)
    # "local": this host's own chips; on a pod slice, the slice's name (host_environment)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=os.environ.get("TPU_NAME") or "local")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    ckpt_root = RunFiles(cfg.storage, cfg.run_id).tpu_checkpoints
    local_root = scratch.fresh(scratch.run_path("tpu-checkpoints", cfg.run_id))  # the storage holds the truth
    resume = resume_point(cfg, local_root)
    computes_in = precision.resolve(cfg.precision or precision.AUTO, strategy)  # auto: bfloat16, the MXU's format
    pod = cfg.tpu_hosts > 1
    # a pod slice: every shard by its path on each host's own disk (the sentinels copied them there); one host: its own copy
    train_files = pod_files(cfg) if pod else local_files(cfg.train_files, cfg.run_id)
    trainer, dataset_fn, steps = workloads.get(cfg.workload).prepare_training(
        train_files, cfg.preset, cfg.batch_per_replica, strategy=strategy, seed=cfg.seed, resume_from=resume,
        steps_per_epoch=cfg.steps_per_epoch, precision=computes_in[0], pod_hosts=cfg.tpu_hosts if pod else None)

    def save_epoch(metrics: dict) -> None:
        keep(checkpoint_name(metrics["epoch"]))

    def save_position(position: dict) -> None:
        keep(checkpoint_name(position["epoch"] - 1, position["step"]))

    def keep(name: str) -> None:
        local = local_root / name
        trainer.save(local)
        storage.copy_dir(str(local), storage.join(ckpt_root, local.name))

    notices = fit_with_events(trainer, dataset_fn, steps, cfg, save_epoch, rank=0, resumed=resume is not None, precision=computes_in,
                              replicas=strategy.num_replicas_in_sync, save_position=save_position)
    trainer.save(final_dir)
    if trainer.stopped:
        keep(checkpoint_name(trainer.stopped["epoch"] - 1, trainer.stopped["step"]))  # the next attempt starts here
        (Path(final_dir) / "stopped.json").write_text(json.dumps(trainer.stopped))
        announce_stop(trainer, notices)
    shutil.rmtree(local_root, ignore_errors=True)
    return final_dir


def pod_input(cfg: JobConfig) -> JobConfig:
    """A pod slice's training files as TFRecord shards in the run's store (``RunFiles.pod_input``),
    made once per run from the staged HDF5 files by the job's driver: ``cfg`` naming them.

    On a pod slice TensorFlow's client, on host 0, builds each host's input pipeline and every
    host runs its own in its own TPU runtime (``distribute_datasets_from_function`` in its
    ``tf.distribute.InputReplicationMode.PER_WORKER`` mode: the input function is called for each
    worker, one pipeline per host, ``InputContext.input_pipeline_id`` its host). No Python runs there, so HDF5 (read by a Python generator) cannot be its input, and
    no host reads another's disk: each host copies its own shards from the store first
    (``HostSentinel.stage``). A single host reads the HDF5 files as before."""
    import tempfile

    from .. import workloads
    from . import storage

    if cfg.tpu_hosts <= 1 or not cfg.train_files:  # one host; or nothing to shard (a test's client that reads no data)
        return cfg
    root = RunFiles(cfg.storage, cfg.run_id).pod_input
    meta = storage.join(root, "meta.json")
    if not storage.exists(meta):  # written last: a set cut short is made again
        with tempfile.TemporaryDirectory() as tmp:
            made = workloads.get(cfg.workload).write_pod_shards(local_files(cfg.train_files, cfg.run_id), Path(tmp) / "shards",
                                                                 cfg.preset, cfg.tpu_hosts)
            if made is None:
                raise ValueError(f"workload {cfg.workload} has no input a TPU pod slice's hosts can read; train it on one host")
            text = (Path(tmp) / "shards" / "meta.json").read_text()
            (Path(tmp) / "shards" / "meta.json").unlink()
            storage.copy_dir(str(Path(tmp) / "shards"), root)
            storage.write_text(meta, text)
    names = sorted(json.loads(storage.read_text(meta))["events"])
    emit(StatusEvent(message=f"pod slice input: {len(names)} TFRecord shards in {root}, {len(names) // cfg.tpu_hosts} per host"))
    return cfg.model_copy(update={"train_files": tuple(storage.join(root, n) for n in names)})


def pod_dir(run_id: str) -> Path:
    """Where every host of a pod slice keeps its own shards: the same path on each host's own disk."""
    from . import scratch

    return scratch.run_path("pod-data", run_id)


def pod_files(cfg: JobConfig) -> list[Path]:
    """Every shard of a pod slice's input by its path on each host (``pod_dir``): host ``i`` holds its own there."""
    return [pod_dir(cfg.run_id) / uri.rsplit("/", 1)[-1] for uri in cfg.train_files]


def stage_host_shards(cfg: JobConfig, worker: int) -> dict:
    """Copy this host's shards (``host_shards``: ``worker, worker + hosts, ...``) and the meta file
    from the store to this host's own disk; what was copied, where."""
    from workloads.common.pod import host_shards

    from . import scratch, storage

    names = [uri.rsplit("/", 1)[-1] for uri in cfg.train_files]
    mine = host_shards(names, cfg.tpu_hosts, worker)
    root = RunFiles(cfg.storage, cfg.run_id).pod_input
    local = scratch.fresh(pod_dir(cfg.run_id))
    for name in [*mine, "meta.json"]:
        storage.copy(storage.join(root, name), str(local / name))
    return {"worker": worker, "dir": str(local), "files": mine, "hostname": socket.gethostname()}


def host_environment(cfg: JobConfig) -> dict[str, str]:
    """The environment of the TensorFlow client on host 0: nothing on a single host (its chips are
    local); on a pod slice, the slice's name and ``TPU_LOAD_LIBRARY=0`` (see the module's docstring)."""
    if cfg.tpu_hosts <= 1:
        return {}
    if not cfg.tpu_name:
        raise ValueError("a TPU slice of several hosts needs its name (JobConfig.tpu_name) for TPUClusterResolver")
    return {"TPU_NAME": cfg.tpu_name, "TPU_LOAD_LIBRARY": "0"}


class HostSentinel:
    """Held on one host of the slice for an attempt: says where it is, its ``hold`` call fails
    the moment its host (its Ray node) is gone, and while it is held it publishes its host's chips'
    duty cycle and HBM from libtpu (``usage.TpuGauges``; none where libtpu is absent)."""

    def __init__(self) -> None:
        from .usage import TpuGauges

        self._released = threading.Event()
        self._gauges = TpuGauges.start_here()

    def describe(self) -> dict:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname()}

    def hold(self) -> None:
        self._released.wait()

    def stage(self, cfg_arg: str) -> dict:
        """This host's shards of a pod slice's input, copied to its own disk (``stage_host_shards``),
        by its TPU worker number (``WORKER_ENV``, from the metadata server's agent-worker-number)."""
        worker = os.environ.get(WORKER_ENV)
        if worker is None or not worker.isdigit():
            raise RuntimeError(f"this TPU host's Ray was started without {WORKER_ENV} (its worker number); restart the slice")
        return stage_host_shards(JobConfig.from_arg(cfg_arg), int(worker))

    def release(self) -> None:
        self._released.set()
        if self._gauges is not None:
            self._gauges.stop()


def _wait_for_hosts(hosts: int, timeout: float) -> None:
    import ray

    deadline = time.monotonic() + timeout
    while True:
        have = ray.cluster_resources()
        if have.get(HOST, 0) >= hosts and have.get(SLICE_HEAD, 0) >= 1:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the TPU slice has {int(have.get(HOST, 0))} of its {hosts} host(s) in the Ray cluster "
                               f"after {timeout / 60:.0f} min")
        time.sleep(2)


def train(cfg: JobConfig, dest: Path, train_fn: Callable[[str, str], str] = train_on_host,
          hosts_wait_s: float = HOSTS_WAIT_S) -> tuple[Path | None, str | None]:
    """Train on every host of the slice: the client on host 0, a sentinel on each host; a lost host
    starts the slice again from its newest checkpoint. (final checkpoint, None) or (None, why)."""
    import ray

    sentinel = ray.remote(num_cpus=0, resources={HOST: 1}, max_restarts=0, max_concurrency=2)(HostSentinel)
    client = ray.remote(num_cpus=0, resources={SLICE_HEAD: 1}, max_retries=0,
                        runtime_env={"env_vars": host_environment(cfg)})(train_fn)
    why = "no attempt ran"
    try:
        cfg = pod_input(cfg)
    except ValueError as exc:
        return None, str(exc)
    for attempt in range(1, MAX_SLICE_RESTARTS + 2):
        try:
            _wait_for_hosts(cfg.tpu_hosts, hosts_wait_s)
        except TimeoutError as exc:
            # A host lost for good: the slice cannot train again. Said as a notice that the run
            # checkpointed where its newest checkpoint is, so that whoever follows the run (the
            # controller of a managed run) takes this slice down and goes on from that checkpoint
            # on a new one, as after any lost capacity; a plain run stops with its checkpoints.
            epoch, step = newest_position(cfg)
            emit(StoppedEvent(epoch=epoch, step=step, steps=0, reason=f"notice: a TPU host lost for good ({exc})"))
            return None, f"{exc}: the run stops here with its checkpoints ({why})"
        held = [sentinel.remote() for _ in range(cfg.tpu_hosts)]  # one per host: each host has one TPU_HOST
        try:
            where = ray.get([h.describe.remote() for h in held])
            if cfg.tpu_hosts > 1 and cfg.train_files:  # every host copies its own shards before the client builds their pipelines
                staged = ray.get([h.stage.remote(cfg.to_arg()) for h in held])
                workers = sorted(s["worker"] for s in staged)
                if workers != list(range(cfg.tpu_hosts)):
                    return None, (f"the slice's hosts say worker numbers {workers}, not 0..{cfg.tpu_hosts - 1}: "
                                  f"its Ray was not started by burst's startup script; recreate the slice")
            emit(StatusEvent(message=f"training on {cfg.tpu_hosts} TPU host(s): "
                                     f"{', '.join(sorted(w['hostname'] + ' (Ray node ' + w['node_id'][:12] + ')' for w in where))}"
                             + (f" (attempt {attempt})" if attempt > 1 else "")))
            task = client.remote(cfg.to_arg(), str(dest))
            done, _ = ray.wait([task, *[h.hold.remote() for h in held]], num_returns=1)
            if task in done:
                try:
                    return Path(ray.get(task)), None
                except Exception as exc:
                    if not _lost_host(exc):
                        raise
                    why = failure_line(exc)
            else:
                why = "a TPU host left the Ray cluster"
                ray.cancel(task, force=True)
        finally:
            _release(held)
        if attempt <= MAX_SLICE_RESTARTS:
            emit(StatusEvent(message=f"{why}: the slice starts again from its newest checkpoint once all "
                                     f"{cfg.tpu_hosts} host(s) are back (restart {attempt} of {MAX_SLICE_RESTARTS})"))
    return None, f"the TPU slice failed {MAX_SLICE_RESTARTS + 1} times; last: {why}"


def checkpoint_name(done: int, step: int | None = None) -> str:
    """A TPU checkpoint's directory name: ``epoch_0002`` after two whole epochs, and
    ``epoch_0001_step_000040`` for one taken 40 steps into the second. ``newest_position`` reads them back."""
    return f"epoch_{done:04d}" if step is None else f"epoch_{done:04d}_step_{step:06d}"


def newest_position(cfg: JobConfig) -> tuple[int, int]:
    """(epoch, step) where the run's newest checkpoint on storage goes on from (1-based epoch, steps
    done in it), as a ``StoppedEvent`` says it; (1, 0) with none. Read from the checkpoints' names
    (``checkpoint_name``)."""
    from . import storage

    best = (1, 0)
    root = RunFiles(cfg.storage, cfg.run_id).tpu_checkpoints
    for name in storage.list_dirs(root) if storage.exists(root) else []:
        parts = name.split("_")
        try:
            done = int(parts[1])
            position = (done + 1, int(parts[3])) if len(parts) == 4 and parts[2] == "step" else (done + 1, 0)
        except (IndexError, ValueError):
            continue
        best = max(best, position)
    return best


def _lost_host(exc: BaseException) -> bool:
    """Did the client fail because a host went away: its worker or node died (Ray's own errors), or
    TensorFlow lost a host's TPU runtime? An error of the training itself is not."""
    import ray.exceptions as rex

    if isinstance(exc, (rex.WorkerCrashedError, rex.NodeDiedError, rex.ObjectLostError)):
        return True
    cause = getattr(exc, "cause", None) or exc
    return type(cause).__name__ in LOST_HOST_ERRORS


def _release(held: list) -> None:
    import ray

    for h in held:
        try:
            h.release.remote()
            ray.kill(h)
        except Exception:  # already gone with its host
            pass
