"""A run's TensorBoard log, as the paper's authors kept theirs: every epoch's training figures
(losses, samples/s, a scan trial's physics) and the validation's summary at the last epoch, as
scalars by epoch, and the cluster's utilisation as it was sampled (``usage/<node>/...`` by
sample, at the time it was taken). Written by the job after validation into the run's report directory
(``report/tensorboard``), so that it travels with the report to ``burst-runs/RUN``:
``tensorboard --logdir burst-runs/RUN/report/tensorboard``. Written with tensorboardX (Ray
Train's own dependency): TensorFlow 2.21 no longer brings TensorBoard, and ``tf.summary`` needs it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional


def _numbers(record: dict, skip: tuple[str, ...] = ()) -> dict[str, float]:
    return {k: float(v) for k, v in record.items()
            if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def write(log_dir: Path, history: list[dict], summary: Optional[dict] = None, usage_rows: tuple[dict, ...] = ()) -> Optional[Path]:
    """Write ``history`` (one record per epoch) under ``train/``, ``summary`` under ``validation/``
    at the last epoch, and ``usage_rows`` (``burst.runtime.usage``'s samples) under ``usage/``;
    returns ``log_dir`` (None, said, where tensorboardX is missing)."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        print("no TensorBoard log: tensorboardX (a dependency of ray[train]) is not installed on this cluster", flush=True)
        return None
    log_dir.mkdir(parents=True, exist_ok=True)
    with SummaryWriter(logdir=str(log_dir)) as writer:
        for record in history:
            for name, value in _numbers(record, skip=("epoch",)).items():
                writer.add_scalar(f"train/{name}", value, global_step=int(record["epoch"]))
        last = int(history[-1]["epoch"]) if history else 0
        for name, value in _numbers(summary or {}).items():
            writer.add_scalar(f"validation/{name}", value, global_step=last)
        for step, row in enumerate(usage_rows):
            for node in row["nodes"]:
                for name, value in _numbers(node, skip=("head",)).items():
                    writer.add_scalar(f"usage/{node['node']}/{name}", value, global_step=step, walltime=row["time"])
            for worker in row["workers"]:
                for name, value in _numbers(worker).items():
                    writer.add_scalar(f"usage/worker-{worker['rank']}/{name}", value, global_step=step, walltime=row["time"])
    return log_dir
