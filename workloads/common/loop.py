"""The epoch loop every workload's trainer inherits: epochs of compiled distributed steps, a stop
that every replica agrees on, checkpoints inside an epoch, and a resume from the very step.

A trainer calls ``_init_run`` (strategy, batch sizes, seed) before it builds its networks,
``_make_counters`` inside the strategy's scope (the step, run seed and epoch its checkpoint holds),
``_init_loop`` with the names of the metrics its step returns once the weights exist, and defines
``train_step(batch, step)``, one replica's step returning those metrics scaled by the global batch;
``_seed`` gives its stateless random draws. ``fit`` does the rest;
``position`` and ``_restore_position`` are what its ``save`` and ``restore`` keep in the
checkpoint's history file, so that a resume goes on from the step where the checkpoint was taken.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import keras
import tensorflow as tf

MetricsCallback = Callable[[dict], None]
DATA_GLOBAL_SEED = 0
HISTORY_FILE = "history.json"


def skipped(ds, ctx, steps: int):
    """An epoch's input without its first ``steps`` global steps (each pipeline feeds its local replicas)."""
    if not steps:
        return ds
    local_replicas = ctx.num_replicas_in_sync // ctx.num_input_pipelines if ctx else 1
    return ds.skip(steps * local_replicas)


@dataclass
class EpochMetrics:
    epoch: int
    steps: int
    samples: int
    seconds: float
    losses: dict[str, float]
    input_seconds: float = 0.0  # of ``seconds``, those spent waiting for the next batch (the rest: the step itself)

    def as_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "steps": self.steps,
            "samples": self.samples,
            "seconds": round(self.seconds, 3),
            "samples_per_s": round(self.samples / self.seconds, 2) if self.seconds > 0 else None,
            "input_wait_s": round(self.input_seconds, 3),
            **{k: round(v, 5) for k, v in self.losses.items()},
        }


class EpochLoop:
    """``fit`` and the position inside an epoch, for a trainer with a compiled distributed step."""

    strategy: tf.distribute.Strategy
    global_batch: int
    step: tf.Variable
    run_seed: tf.Variable
    epoch: tf.Variable
    history: list[dict]

    def _init_run(self, preset, per_replica_batch: int, strategy: tf.distribute.Strategy | None, seed: int) -> None:
        """The run's preset, strategy, batch sizes and seed; before any weight exists (the seed draws them)."""
        self.preset = preset
        self.strategy = strategy or tf.distribute.get_strategy()
        self.per_replica_batch = int(per_replica_batch)
        self.global_batch = self.per_replica_batch * self.strategy.num_replicas_in_sync
        self.seed = seed
        keras.utils.set_random_seed(seed)

    def _make_counters(self) -> None:
        """The global step, the run's seed and the epoch: state every checkpoint holds (in the strategy's scope)."""
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.run_seed = tf.Variable(self.seed, dtype=tf.int64, trainable=False, name="run_seed")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")

    def _seed(self, step: tf.Tensor, draw: int) -> tf.Tensor:
        """Stateless seed for draw ``draw`` (0..7) of this replica at global step ``step``: different on
        every step and replica, and what an uninterrupted run would draw after a resume (only the step is state)."""
        replica = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.int64)
        return tf.stack([tf.identity(self.run_seed), (step * 4096 + replica) * 8 + draw])

    def train_step(self, batch: dict, step: tf.Tensor) -> dict[str, tf.Tensor]:
        raise NotImplementedError

    def _init_loop(self, metric_names: tuple[str, ...]) -> None:
        # Per-epoch sums of the step's metrics, added up inside the step: reading each scalar back
        # into Python every step costs a host round trip, which under Ray Train (whose threads
        # share the worker's GIL) measurably slowed the steps. Local to this process; a checkpoint
        # taken inside an epoch keeps them in its history file (``position``).
        self._sums = {name: tf.Variable(0.0, dtype=tf.float64, trainable=False) for name in metric_names}
        # tf.data combines its explicit shuffle seeds with TF's global seed. Pin the global seed to a
        # constant once the weights exist, so that the data order depends only on the data seed and
        # a resumed run (whatever its own seed) sees what an uninterrupted one would.
        tf.random.set_seed(DATA_GLOBAL_SEED)
        # Where inside the current epoch training is: steps done and seconds spent on them. Zero
        # between epochs; a mid-epoch checkpoint saves them and a resume goes on from there.
        self.epoch_step = 0
        self._epoch_seconds = 0.0
        self._epoch_input_seconds = 0.0  # of those, waiting for input (the host's view: a GPU's queued work shows in the step)
        self._epoch_clock: float | None = None
        self.stopped: dict | None = None
        # autograph=False: the step's loops and branches are over Python values, so AutoGraph's rewrite
        # of its source buys nothing and costs every worker process 0.7 s of its first step (measured).
        self._accumulating_step = tf.function(self._accumulate, autograph=False)

    def _distributed_step(self, batch) -> dict[str, tf.Tensor]:
        """One step on every replica, its metrics summed over replicas."""
        step = self.step.assign_add(1)  # cross-replica context: one update, no synchronisation
        per_replica = self.strategy.run(self.train_step, args=(batch, step))
        return {k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for k, v in per_replica.items()}

    def _accumulate(self, batch):
        """One distributed step whose metrics are added to the epoch sums, nothing returned."""
        for name, value in self._distributed_step(batch).items():
            self._sums[name].assign_add(tf.cast(value, tf.float64))

    def fit(
        self,
        dataset_fn: Callable,
        epochs: int,
        steps_per_epoch: int,
        on_epoch_end: list[MetricsCallback] | None = None,
        on_step: MetricsCallback | None = None,
        should_stop: Callable[[], bool] | None = None,
        stop_check_every: int = 5,
        on_checkpoint: MetricsCallback | None = None,
        checkpoint_every: int | None = None,
        should_checkpoint: Callable[[], bool] | None = None,
    ) -> list[dict]:
        """Train from the current position (epoch counter, steps into it) up to ``epochs``; return
        this run's epoch metrics. ``dataset_fn(input_context, epoch)`` is one epoch's input.

        ``should_stop`` is asked every ``stop_check_every`` steps and before every epoch but the first; every replica must agree to
        stop at the same step (a collective would hang otherwise), so the answers are summed
        across replicas and any one "yes" stops all of them. ``self.stopped`` then holds where.
        ``on_checkpoint`` (given the position) is called inside an epoch every ``checkpoint_every``
        steps, and at the next check when every replica agrees on ``should_checkpoint`` (a notice
        that the node or the allocation is about to go); it is a collective too.
        """
        done: list[dict] = []
        self.stopped = None
        first = int(self.epoch.numpy())
        for epoch in range(first, epochs):
            if epoch > first and should_stop is not None and self._all_agree(should_stop()):  # asked between epochs
                self.stopped = {"epoch": epoch + 1, "step": 0, "steps": steps_per_epoch}
                return done
            skip = self.epoch_step if epoch == first else 0  # a resume from inside this epoch
            if not skip:
                for total in self._sums.values():
                    total.assign(0.0)
                self._epoch_seconds = 0.0
                self._epoch_input_seconds = 0.0
            dist = self.strategy.distribute_datasets_from_function(lambda ctx, e=epoch, k=skip: skipped(dataset_fn(ctx, e), ctx, k))
            steps = skip
            self.epoch_step = skip
            start = self._epoch_clock = time.perf_counter()
            batches = iter(dist)
            while True:
                asked = time.perf_counter()
                batch = next(batches, None)
                self._epoch_input_seconds += time.perf_counter() - asked
                if batch is None:
                    break
                self._accumulating_step(batch)
                steps += 1
                self.epoch_step = steps
                position = {"epoch": epoch + 1, "step": steps, "steps": steps_per_epoch}
                if on_step is not None:
                    on_step({**position, "elapsed": self._epoch_seconds + time.perf_counter() - start,
                             "input_wait": round(self._epoch_input_seconds, 4)})
                checked = steps % stop_check_every == 0
                if on_checkpoint is not None and steps < steps_per_epoch and (
                        (checkpoint_every and steps % checkpoint_every == 0)
                        or (checked and should_checkpoint is not None and self._all_agree(should_checkpoint()))):
                    on_checkpoint(position)
                if should_stop is not None and checked and self._all_agree(should_stop()):
                    self.stopped = position
                    return done
            seconds = self._epoch_seconds + time.perf_counter() - start
            self._epoch_clock = None
            self.epoch_step = 0
            self._epoch_seconds = 0.0
            self.epoch.assign(epoch + 1)
            means = {k: float(v.numpy()) / max(steps, 1) for k, v in self._sums.items()}
            metrics = EpochMetrics(epoch + 1, steps, steps * self.global_batch, seconds, means, self._epoch_input_seconds).as_dict()
            self.history.append(metrics)
            done.append(metrics)
            for callback in on_epoch_end or []:
                callback(metrics)
        return done

    def _all_agree(self, flag: bool) -> bool:
        """True on every replica when any replica's ``flag`` is true."""
        votes = self.strategy.run(lambda: tf.constant(1.0 if flag else 0.0))
        return float(self.strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None)) > 0

    def position(self) -> dict | None:
        """Where inside an epoch training is (steps done, their seconds, the epoch's metric sums);
        None between epochs."""
        if not self.epoch_step:
            return None
        running = time.perf_counter() - self._epoch_clock if self._epoch_clock is not None else 0.0
        return {"step": self.epoch_step, "seconds": round(self._epoch_seconds + running, 3), "input_seconds": round(self._epoch_input_seconds, 3),
                "sums": {k: float(v.numpy()) for k, v in self._sums.items()}}

    def _write_checkpoint(self, directory: str | os.PathLike, prefix: str, meta: dict) -> Path:
        """``self.checkpoint`` as ``prefix`` in ``directory``, and beside it the history file: ``meta``,
        the epochs' metrics and, when saved inside an epoch, the position there."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.checkpoint.write(str(directory / prefix))
        meta = {**meta, "history": self.history}
        position = self.position()
        if position is not None:
            meta["position"] = position
        (directory / HISTORY_FILE).write_text(json.dumps(meta, indent=1))
        return directory

    def _read_checkpoint(self, directory: str | os.PathLike, prefix: str, overrides: dict, check: Callable[[dict], None]) -> int:
        """Restore what ``_write_checkpoint`` wrote, after ``check`` (ValueError: the checkpoint is of
        another model) and a check that it was trained with the same knobs (``overrides``); return the
        epoch to continue from."""
        directory = Path(directory)
        meta = json.loads((directory / HISTORY_FILE).read_text())
        check(meta)
        if meta.get("overrides", {}) != overrides:
            raise ValueError(f"checkpoint {directory} was trained with {meta.get('overrides') or 'the preset as it is'}, not with "
                             f"{overrides or 'the preset as it is'}")
        self.checkpoint.read(str(directory / prefix)).assert_existing_objects_matched()
        self._restore_position(meta)
        return int(self.epoch.numpy())

    def _restore_position(self, meta: dict) -> None:
        """Put back the position a checkpoint's history file holds (none: the start of an epoch)."""
        self.history = list(meta["history"])
        position = meta.get("position") or {}
        self.epoch_step = int(position.get("step", 0))
        self._epoch_seconds = float(position.get("seconds", 0.0))
        self._epoch_input_seconds = float(position.get("input_seconds", 0.0))
        for name, total in self._sums.items():
            total.assign(float(position.get("sums", {}).get(name, 0.0)))
