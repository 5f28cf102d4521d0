"""``python -m workloads.gan3d {generate,convert,train,validate,bench}``: the workload on its own."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _cmd_generate(a) -> int:
    from .synthetic import write_dataset

    paths = write_dataset(Path(a.out), a.events, seed=a.seed, events_per_file=a.per_file, energy_range=(a.emin, a.emax), overwrite=a.overwrite)
    print(json.dumps({"files": [str(p) for p in paths]}))
    return 0


def _cmd_convert(a) -> int:
    from .data import convert_to_tfrecords
    from .presets import get_preset

    paths = convert_to_tfrecords(Path(a.src), Path(a.out), get_preset(a.preset), overwrite=a.overwrite)
    print(json.dumps({"files": [str(p) for p in paths]}))
    return 0


def _cmd_train(a) -> int:
    from ..common.standalone import train_here
    from .workload import WORKLOAD

    return train_here(WORKLOAD, a)


def _cmd_validate(a) -> int:
    from . import pipeline
    from .workload import WORKLOAD

    _, test_files = WORKLOAD.split_files(Path(a.data))
    metrics = pipeline.validate(Path(a.checkpoint), test_files, Path(a.out), events=a.events)
    print(json.dumps({"summary": metrics["summary"], "noise_floor": metrics["noise_floor"], "verdict": metrics["verdict"]["line"]}, indent=1))
    return 0


def _cmd_bench(a) -> int:
    from .bench import main as bench_main

    return bench_main(a)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.gan3d", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)

    g = sub.add_parser("generate", help="write synthetic Monte Carlo files in the CERN format")
    g.add_argument("--out", required=True)
    g.add_argument("--events", type=int, default=1000)
    g.add_argument("--per-file", type=int, default=5000)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--emin", type=float, default=100.0)
    g.add_argument("--emax", type=float, default=200.0)
    g.add_argument("--overwrite", action="store_true")
    g.set_defaults(fn=_cmd_generate)

    c = sub.add_parser("convert", help="HDF5 → preprocessed TFRecords for a preset")
    c.add_argument("--src", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--preset", default="small")
    c.add_argument("--overwrite", action="store_true")
    c.set_defaults(fn=_cmd_convert)

    t = sub.add_parser("train", help="train on this machine (default strategy), then validate")
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="directory of CERN HDF5 files or converted TFRecords")
    src.add_argument("--synthetic", type=int, help="generate this many synthetic training events")
    t.add_argument("--workdir", default="gan3d-run")
    t.add_argument("--preset", default="small")
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--batch-per-replica", type=int)
    t.add_argument("--steps", type=int, help="steps per epoch (default: events // global batch)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--val-events", type=int, default=500)
    t.set_defaults(fn=_cmd_train)

    v = sub.add_parser("validate", help="validate a checkpoint against held-out Monte Carlo")
    v.add_argument("--checkpoint", required=True)
    v.add_argument("--data", required=True)
    v.add_argument("--out", required=True)
    v.add_argument("--events", type=int, default=500)
    v.set_defaults(fn=_cmd_validate)

    b = sub.add_parser("bench", help="optimised loop vs baseline, FLOP/s, input pipeline, generation")
    b.add_argument("--preset", default="small")
    b.add_argument("--batch-per-replica", type=int)
    b.add_argument("--steps", type=int, default=12, help="steps per timed block")
    b.add_argument("--small-batch", type=int, default=4, help="second, small per-replica batch (short steps)")
    b.add_argument("--repeats", type=int, default=3, help="timed blocks per configuration (best and median are kept)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--cpu-settings", action="store_true", help="also scan CPU thread/oneDNN settings")
    b.add_argument("--cpu-preset", default="paper", help="preset for the CPU settings scan")
    b.add_argument("--cpu-batch", type=int, default=2, help="batch for the CPU settings scan")
    b.set_defaults(fn=_cmd_bench)

    a = parser.parse_args(argv)
    from .data import DataError

    try:
        return a.fn(a)
    except (DataError, FileExistsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
