"""``python -m workloads.calo.bench --throughput JSON``: the training step's throughput on this machine.

JSON: {"preset", "batch", "steps", "repeats"}. Trains on synthetic showers in a temporary
directory, one warm-up block (tracing) and then ``repeats`` timed blocks of ``steps`` steps; prints
one JSON line with the best and the median samples/s, the estimated GFLOP/s (6 x parameters per
sample: a forward and a backward pass of the dense layers) and the machine's facts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def throughput(preset: str, batch: int, steps: int, repeats: int, precision: str = "float32") -> dict:
    from ..common.cpu import machine_facts
    from . import pipeline

    with tempfile.TemporaryDirectory() as tmp:
        train_dir, _ = pipeline.prepare_synthetic(Path(tmp), max(1000, batch * steps), seed=0)
        trainer, dataset_fn, _ = pipeline.prepare_training(sorted(train_dir.glob("*.h5")), preset, batch, steps_per_epoch=steps,
                                                           precision=precision)
        trainer.fit(dataset_fn, 1, steps)  # warm-up: tracing
        rates = []
        for block in range(repeats):
            start = time.perf_counter()
            trainer.fit(dataset_fn, 2 + block, steps)
            rates.append(steps * batch / (time.perf_counter() - start))
    params = trainer.net.count_params()
    best = max(rates)
    return {"preset": preset, "batch": batch, "samples_per_s": round(best, 2), "samples_per_s_median": round(statistics.median(rates), 2),
            "gflops": round(6 * params * best / 1e9, 2), "parameters": params, "machine": machine_facts()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.calo.bench")
    p.add_argument("--throughput", required=True, help='JSON: {"preset": "small", "batch": 32, "steps": 40, "repeats": 2}')
    a = p.parse_args(argv)
    spec = {"preset": "small", "batch": 32, "steps": 40, "repeats": 2, "precision": "float32", **json.loads(a.throughput)}
    print(json.dumps(throughput(spec["preset"], int(spec["batch"]), int(spec["steps"]), int(spec["repeats"]), spec["precision"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
