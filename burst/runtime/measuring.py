"""`burst profile`'s measuring process: a workload of the public interface trained on this machine
by one worker, at several batches, each epoch timed, with what its framework counts on the way.

Run as ``python -m burst.runtime.measuring SPEC EVENTS SEED DATA BATCH...`` (DATA empty: the data
the workload makes) in a process of its own, so that the framework, its threads and its memory go
when it ends; prints one JSON line. Each epoch is the workload's own (no steps are asked). Each
batch trains ``EPOCHS`` epochs from scratch through the workload's own ``train(ctx)``: the first
warms up (tracing, first allocations) and is where the framework counts FLOPs and parameters; the
best of the others is the batch's time. An epoch's samples are the ``samples`` metric the workload
reports, else the training events its data holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

EPOCHS = 3  # one to warm up and count, two timed (the best kept)
MATMUL_N = 1024  # this machine's dense float32 rate: NumPy's matmul of two N x N matrices


class ProfileContext:
    """``burst.workload.TrainContext`` for one worker on this machine, timing each epoch."""

    def __init__(self, workload, batch: int, seed: int, train_files: list[Path], scratch: Path, counter=None):
        self.rank, self.world_size = 0, 1
        self.preset = workload.presets[0]
        self.total_epochs = EPOCHS
        self.batch_per_replica = batch
        self.seed = seed
        self.steps_per_epoch = None  # none asked: the workload's own epoch
        self.precision = None
        self.knobs: dict = {}
        self.train_files = train_files
        self.checkpoint = None
        self.start_epoch = 0
        self.epoch_s: list[float] = []
        self.samples: list[Optional[float]] = []
        self.checkpoint_bytes = 0
        self._scratch = scratch
        self._counter = counter  # what counts FLOPs and parameters during the first epoch (or None)
        self._started = 0.0
        self._strategy = None

    def epochs(self) -> Iterator[int]:
        for epoch in range(EPOCHS):
            if epoch == 0 and self._counter is not None:
                self._counter.start()
            self._started = time.perf_counter()
            yield epoch

    def end_epoch(self, metrics: dict, save: Callable[[Path], None]) -> None:
        self.epoch_s.append(time.perf_counter() - self._started)
        if len(self.epoch_s) == 1 and self._counter is not None:
            self._counter.stop()
        samples = metrics.get("samples")
        self.samples.append(float(samples) if isinstance(samples, (int, float)) and samples > 0 else None)
        directory = Path(tempfile.mkdtemp(dir=self._scratch, prefix="checkpoint-"))
        save(directory)
        self.checkpoint_bytes = size_of(directory)
        shutil.rmtree(directory, ignore_errors=True)

    def should_stop(self) -> bool:
        return False

    def strategy(self):
        if self._strategy is None:
            import tensorflow as tf

            self._strategy = tf.distribute.get_strategy()
        return self._strategy


def size_of(path: Path) -> int:
    """Bytes of the files under ``path`` (or of the file)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class TorchCounter:
    """PyTorch's own counts over one epoch: FLOPs (``torch.utils.flop_counter.FlopCounterMode``, the
    forward, backward and optimizer ops it knows, by shape) and the trainable parameters of every
    module whose forward ran (a global forward hook)."""

    def __init__(self):
        self.flops: Optional[float] = None
        self.parameters: dict[int, int] = {}
        self._mode = self._hook = None

    def start(self) -> None:
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        def seen(module, args, output) -> None:
            for p in module.parameters(recurse=False):
                if p.requires_grad:
                    self.parameters[id(p)] = p.numel()

        self._hook = torch.nn.modules.module.register_module_forward_hook(seen)
        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()

    def stop(self) -> None:
        self._mode.__exit__(None, None, None)
        self._hook.remove()
        self.flops = float(self._mode.get_total_flops())

    def around(self):
        return contextlib.nullcontext()  # counted from the first epoch's start (``start``), not while the model is built

    def said(self) -> dict:
        return {"flops": self.flops, "flops_by": "PyTorch's FlopCounterMode over the first epoch (forward, backward and optimizer)",
                "parameters": sum(self.parameters.values()) if self.parameters else None}


class TensorFlowCounter:
    """TensorFlow's count of the named trainable variables the workload made (``tf.variable_creator_scope``
    around its ``train``; Keras' ``count_params`` for a Keras model). FLOPs are not counted: TensorFlow counts them only for a graph it is
    handed, and the workload's loop and its functions are its own."""

    def __init__(self):
        self.parameters: dict[int, int] = {}

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def around(self):
        import tensorflow as tf

        def creator(next_creator, **kwargs):
            variable = next_creator(**kwargs)
            # trainable by its own word (not the call's: a default), and named, as every layer's weight is (tf-keras' fit makes
            # four unnamed scalar counters that say they are trainable)
            if getattr(variable, "trainable", False) and kwargs.get("name") and variable.shape.is_fully_defined():
                self.parameters[id(variable)] = int(variable.shape.num_elements())
            return variable

        return tf.variable_creator_scope(creator)

    def said(self) -> dict:
        return {"flops": None, "flops_by": "not counted: TensorFlow counts the FLOPs of a graph it is handed, and the workload's loop is its own",
                "parameters": sum(self.parameters.values()) if self.parameters else None}


def matmul_gflops() -> float:
    """This machine's dense float32 rate, GFLOP/s: the best of five NumPy matmuls of ``MATMUL_N``."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32)
    a @ a  # warm-up: the BLAS's threads start
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
    return 2 * MATMUL_N ** 3 / best / 1e9


def measure(spec: str, events: int, seed: int, batches: list[int], data: Optional[Path] = None) -> dict:
    """Every figure `burst profile` writes a profile from (see the module's docstring); ``data``:
    the workload's own training data, else the data it makes (``events`` of them)."""
    from .. import workloads

    workload = workloads.get(spec)
    workload.prepare_process(1)
    user = workload.user
    with tempfile.TemporaryDirectory(prefix="burst-profile-") as tmp:
        root = Path(tmp)
        train_dir = Path(data) if data is not None else workload.prepare_synthetic(root / "data", events, seed)[0]
        files = workload.list_files(train_dir)
        if data is not None:
            events = sum(workload.check_file(f) for f in files) or events  # what the files hold, where the workload can count it
        data_bytes = size_of(train_dir)
        rows, counted, counted_samples, checkpoint_bytes = [], None, float(events), 0
        for batch in batches:
            counter = None
            if counted is None:
                counter = TorchCounter() if workload.framework == "torch" else TensorFlowCounter()
            ctx = ProfileContext(user, batch, seed, files, root, counter)
            with (counter.around() if counter is not None else contextlib.nullcontext()):
                user.train(ctx)
            if len(ctx.epoch_s) != EPOCHS:
                raise RuntimeError(f"workload {workload.name}'s train(ctx) ended {len(ctx.epoch_s)} epochs of {EPOCHS}: "
                                   "loop over ctx.epochs() and call ctx.end_epoch() once each")
            if counter is not None:
                counted, counted_samples = counter.said(), ctx.samples[0] or float(events)
            timed = range(1, EPOCHS)
            best = min(timed, key=lambda i: ctx.epoch_s[i])
            samples = ctx.samples[best] or float(events)
            rows.append({"batch": batch, "epoch_s": [round(s, 4) for s in ctx.epoch_s], "samples": samples,
                         "samples_reported": ctx.samples[best] is not None, "samples_per_s": samples / ctx.epoch_s[best]})
            checkpoint_bytes = ctx.checkpoint_bytes
    from workloads.common.cpu import machine_facts

    machine = machine_facts()
    return {"workload": workload.name, "framework": workload.framework, "preset": workload.presets[0], "events": events,
            "batches": rows, **counted, "flops_per_event": counted["flops"] / counted_samples if counted["flops"] else None,
            "checkpoint_bytes": checkpoint_bytes, "data_bytes": data_bytes, "matmul_gflops": matmul_gflops(),
            "machine": {"cpu_model": machine["cpu_model"], "cores": machine["cores"], "simd": machine["simd"],
                        "onednn_enabled": machine["onednn_enabled"], "threads": os.cpu_count()}}


def main(argv: list[str]) -> int:
    spec, events, seed, data, *batches = argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    measured = measure(spec, int(events), int(seed), [int(b) for b in batches], Path(data) if data else None)
    print(json.dumps(measured), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
