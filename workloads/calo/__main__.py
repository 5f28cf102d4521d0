"""``python -m workloads.calo {generate,train}``: the workload on its own (no Ray, no burst cluster)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _cmd_generate(a) -> int:
    from .synthetic import write_dataset

    paths = write_dataset(Path(a.out), a.events, seed=a.seed, events_per_file=a.per_file, overwrite=a.overwrite)
    print(json.dumps({"files": [str(p) for p in paths]}))
    return 0


def _cmd_train(a) -> int:
    from ..common.standalone import train_here
    from .workload import WORKLOAD

    return train_here(WORKLOAD, a)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.calo")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write synthetic showers in the CaloChallenge dataset-2 layout")
    g.add_argument("--out", required=True)
    g.add_argument("--events", type=int, default=1000)
    g.add_argument("--per-file", type=int, default=1000)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--overwrite", action="store_true")
    g.set_defaults(fn=_cmd_generate)
    t = sub.add_parser("train", help="train and validate on this machine")
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="directory of CaloChallenge HDF5 files")
    src.add_argument("--synthetic", type=int, help="generate this many synthetic training events")
    t.add_argument("--workdir", default="calo-run")
    t.add_argument("--preset", default="small")
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--batch-per-replica", type=int)
    t.add_argument("--steps", type=int)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--val-events", type=int, default=400)
    t.set_defaults(fn=_cmd_train)
    a = p.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
