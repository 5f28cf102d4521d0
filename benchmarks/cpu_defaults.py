"""Which threads and batch the default (small-preset) run should use on this CPU.

    python benchmarks/cpu_defaults.py [--preset small] [--batches 16 32 64] [--steps 6] [--repeats 3]

Trains the preset in fresh processes, one setting after another on the same synthetic events,
with oneDNN on: intra-op threads = all cores with inter-op 1 or 2, and each batch size. Prints
samples/s (best and median of the timed blocks) and the machine's load before each setting, so
that the defaults burst uses (intra = cores per worker, inter = 2, the preset's batch) are
checked against a measurement on the machine at hand.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workloads.gan3d.bench import _run_worker  # noqa: E402  (imports the workload: oneDNN on)
from workloads.common.cpu import cpu_info  # noqa: E402
from workloads.gan3d.presets import get_preset  # noqa: E402
from workloads.gan3d.synthetic import write_dataset  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--batches", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    info = cpu_info()
    cores = info["cores"]
    default_batch = get_preset(a.preset).default_batch
    print(f"machine: {info['model']}, {cores} cores, SIMD {' '.join(info['simd'])}; TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS')}")
    print(f"preset {a.preset} (default batch {default_batch}), {a.steps} steps per block, best (median) of {a.repeats}")
    with tempfile.TemporaryDirectory(prefix="cpu-defaults-") as tmp:
        events = max(a.batches) * a.steps + 64
        write_dataset(Path(tmp), events, seed=1, events_per_file=events)
        settings = [(default_batch, cores, 1), (default_batch, cores, 2)] + [(b, cores, 2) for b in a.batches if b != default_batch]
        for batch, intra, inter in settings:
            load = os.getloadavg()[0]
            r = _run_worker({"preset": a.preset, "batch": batch, "steps": a.steps, "data": tmp, "repeats": a.repeats,
                             "mode": "optimised", "replicas": 1, "intra": intra, "inter": inter})
            if "error" in r:
                print(f"  batch {batch:3d} intra {intra} inter {inter}: error {r['error']}")
                continue
            print(f"  batch {batch:3d} intra {intra} inter {inter}  load {load:4.2f}  {r['samples_per_s']:7.1f} ({r['samples_per_s_median']:7.1f}) samples/s"
                  f"  oneDNN {'on' if r['machine']['onednn_enabled'] else 'off'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
