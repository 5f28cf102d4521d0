"""A workload on its own, with no Ray and no burst cluster (`python -m workloads.NAME train`): the
same data, trainer and validation burst's job uses, through the workload's ``Workload`` object."""

from __future__ import annotations

import json
from pathlib import Path


def train_here(workload, a) -> int:
    """Train ``a.epochs`` (resuming from ``a.workdir``/checkpoint when one is there), print each
    epoch's metrics, validate, and print where the checkpoint and the report are."""
    if a.synthetic:
        train_dir, test_dir = workload.prepare_synthetic(Path(a.workdir) / "data", a.synthetic, seed=a.seed)
        train_files, test_files = workload.list_files(train_dir), workload.list_files(test_dir)
    else:
        train_files, test_files = workload.split_files(Path(a.data))
    ckpt = Path(a.workdir) / "checkpoint"
    resume = ckpt if (ckpt / "history.json").exists() else None
    trainer, dataset_fn, steps = workload.prepare_training(train_files, a.preset, a.batch_per_replica, seed=a.seed, resume_from=resume,
                                                           steps_per_epoch=a.steps)

    def log_and_save(metrics: dict) -> None:
        trainer.save(ckpt)
        print(json.dumps(metrics), flush=True)

    trainer.fit(dataset_fn, a.epochs, steps, on_epoch_end=[log_and_save])
    report = Path(a.workdir) / "report"
    metrics = workload.validate(ckpt, test_files, report, events=a.val_events, seed=a.seed)
    print(json.dumps({"checkpoint": str(ckpt), "report": str(report / "report.html"), "summary": metrics["summary"],
                      "noise_floor": metrics["noise_floor"], "verdict": metrics["verdict"]["line"]}, indent=1))
    return 0
