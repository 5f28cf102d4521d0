"""The default run's physics in float32 and a 16-bit precision, in-process and all at once: no Ray.

    python benchmarks/physics_precision_here.py [--seeds 0 1 2] [--precision mixed_bfloat16] [--threads 2] [--work DIR]

``physics_precision.py`` runs each seed as `burst run --provider local`, one after the other. This
one trains the same things with the workload's own code (``prepare_synthetic``, ``prepare_training``,
``validate``: what the Ray Train worker and the job's driver call), every (seed, precision) in its
own process at the same time with ``--threads`` intra-op threads each, so that a many-core machine
with bfloat16 hardware does the six default-length runs in minutes, and a machine with no Ray can
do them at all. Each run: the small preset, 6 epochs of the 3,000 synthetic events made with its
seed, validation on 400 held-out events, as README's first command. The table is ``physics_precision.py``'s:
per summary metric, float32's mean, standard deviation and range over the seeds, the other
precision's mean and range, the distance in float32 standard deviations, the MC-vs-MC floor, and
whether it held.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from physics_precision import print_table

ONE_RUN = r"""
import json, sys, time
from pathlib import Path
seed, precision, work, threads, epochs, events = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(2)
from workloads.gan3d.workload import WORKLOAD as w
started = time.time()
train_dir, test_dir = w.prepare_synthetic(work / f"data-{seed}-{precision}", events, seed=seed)
trainer, dataset_fn, steps = w.prepare_training(w.list_files(train_dir), "small", None, seed=seed, precision=precision)
ckpt = work / f"ckpt-{seed}-{precision}"
built = time.time()
trainer.fit(dataset_fn, epochs, steps, on_epoch_end=[lambda m: (trainer.save(ckpt), print(json.dumps(m), flush=True))])
trained = time.time()
metrics = w.validate(ckpt, w.list_files(test_dir), work / f"report-{seed}-{precision}", events=400, seed=seed)
metrics["wall"] = {"data_and_build": built - started, "train": trained - built, "validate": time.time() - trained}
(work / f"metrics-{seed}-{precision}.json").write_text(json.dumps(metrics))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads per run (all runs go at once)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--synthetic", type=int, default=3000)
    parser.add_argument("--work", type=Path, help="keep every run's checkpoint, report and metrics here")
    args = parser.parse_args()
    if args.precision == "float32":
        parser.error("--precision: the precision to compare with float32 (mixed_bfloat16 or mixed_float16)")
    work = args.work or Path(tempfile.mkdtemp(prefix="burst-precision-here-"))
    work.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])), "TF_CPP_MIN_LOG_LEVEL": "2"}
    precisions = ("float32", args.precision)
    started = time.perf_counter()
    procs = {(seed, p): subprocess.Popen([sys.executable, "-c", ONE_RUN, str(seed), p, str(work), str(args.threads), str(args.epochs),
                                          str(args.synthetic)], env=env, stdout=subprocess.DEVNULL, stderr=open(work / f"log-{seed}-{p}.txt", "w"))
             for seed in args.seeds for p in precisions}
    failed = [key for key, proc in procs.items() if proc.wait() != 0]
    if failed:
        raise SystemExit(f"runs failed: {failed}; their logs: {work}/log-SEED-PRECISION.txt")
    runs = {p: [json.loads((work / f"metrics-{s}-{p}.json").read_text()) for s in args.seeds] for p in precisions}
    from workloads.common.cpu import cpu_info

    info = cpu_info()
    print(f"machine: {info.get('model')}; {info.get('cores')} CPUs; SIMD {' '.join(info.get('simd', []))}; {len(procs)} runs at once, "
          f"{args.threads} threads each, {time.perf_counter() - started:.0f} s in all")
    for p in precisions:
        walls = [r["wall"]["train"] for r in runs[p]]
        print(f"{p}: training {min(walls):.0f} to {max(walls):.0f} s per run; precision recorded {[r['run']['precision'] for r in runs[p]]}")
    print_table(runs["float32"], runs[args.precision], args.precision)

if __name__ == "__main__":
    main()
