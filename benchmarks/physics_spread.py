"""Run-to-run spread of the physics metrics: the default run (README line 1) with several seeds.

    python benchmarks/physics_spread.py [--seeds 0 1 2] [--epochs 6] [--synthetic 3000]

Each seed is one `burst run gan3d --provider local --seed S` (a local cluster of its own, the
small preset, synthetic Monte Carlo made with that seed, validation on its held-out part), one after
the other. Prints every summary metric per seed and its mean, sample standard deviation and range,
with the machine the runs saw (CPU, SIMD, oneDNN state from the run's provenance). A single run's
figure means little until it is read against this spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_seed(seed: int, epochs: int, synthetic: int, work: Path) -> tuple[dict, dict, float]:
    cwd = work / f"seed{seed}"
    cwd.mkdir()
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "run", "gan3d", "--provider", "local", "--name", f"spread{seed}",
                           "--seed", str(seed), "--epochs", str(epochs), "--synthetic", str(synthetic)],
                          capture_output=True, text=True, cwd=cwd, env={**os.environ, "BURST_HOME": str(work / "home")})
    if proc.returncode != 0:
        raise SystemExit(f"seed {seed} failed: {proc.stderr[-2000:]}")
    (run_dir,) = list((cwd / "burst-runs").iterdir())
    metrics = json.loads((run_dir / "metrics.json").read_text())["summary"]
    machine = json.loads((run_dir / "provenance.json").read_text()).get("machine", {})
    return metrics, machine, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--synthetic", type=int, default=3000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="burst-spread-"))
    results = {}
    machine = {}
    for seed in args.seeds:
        metrics, machine, seconds = run_seed(seed, args.epochs, args.synthetic, work)
        results[seed] = metrics
        print(f"seed {seed}: {seconds:.0f} s; " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, float)), flush=True)
    print(f"machine: {machine.get('cpu_model')}; SIMD {' '.join(machine.get('simd', []))}; oneDNN "
          f"{'on' if machine.get('onednn_enabled') else 'off'}; {args.epochs} epochs, {args.synthetic} synthetic events, seeds {args.seeds}")
    print(f"{'metric':22s} {'mean':>10s} {'std':>10s} {'min':>10s} {'max':>10s}  std/mean")
    for key in results[args.seeds[0]]:
        values = [results[s][key] for s in args.seeds]
        if not all(isinstance(v, (int, float)) for v in values):
            continue
        mean = statistics.fmean(values)
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"{key:22s} {mean:10.4g} {std:10.4g} {min(values):10.4g} {max(values):10.4g}  {std / abs(mean) if mean else float('nan'):.2f}")


if __name__ == "__main__":
    main()
