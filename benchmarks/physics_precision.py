"""The physics of mixed precision against float32's run-to-run spread: the default run, both ways.

    python benchmarks/physics_precision.py [--seeds 0 1 2] [--precision mixed_bfloat16] [--epochs 6] [--synthetic 3000] [--steps N]

For each seed, one `burst run gan3d --provider local --seed S --precision float32` and one with
``--precision P`` (the same synthetic Monte Carlo, the same held-out showers: only the arithmetic
differs), one after the other. Printed per summary metric: float32's mean, standard deviation and
range over the seeds (the run-to-run spread), P's mean and range, the difference of the means in
float32 standard deviations, and the MC-vs-MC noise floor. A metric is held when P's mean lies
within float32's mean +- 2 standard deviations or inside float32's range (with three seeds the
standard deviation itself is uncertain); the last line counts them. Wall seconds per run too.

On a CPU without AVX512-BF16 or AMX, TensorFlow emulates bfloat16 (measured on the 2-core AVX2
EPYC: about 9 s per step of 32 against 0.8 s in float32), so a default-length run in bfloat16
takes over an hour there: ``--epochs 2 --steps 40`` compares both precisions at equal, shorter
training.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from physics_spread import run_seed

SHOWN = ("sf_rel_error", "hits_rel_error", "longitudinal_chi2", "transverse_chi2", "optimisation_metric", "classifier_auc", "fpd")


def held(reference: list[float], other: list[float]) -> tuple[bool, float]:
    """(whether ``other``'s mean is within ``reference``'s spread, the distance in its standard deviations)."""
    mean, std = statistics.fmean(reference), statistics.stdev(reference) if len(reference) > 1 else 0.0
    got = statistics.fmean(other)
    sigmas = abs(got - mean) / std if std > 0 else float("inf") if got != mean else 0.0
    return sigmas <= 2 or min(reference) <= got <= max(reference), sigmas


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--synthetic", type=int, default=3000)
    parser.add_argument("--steps", type=int, help="steps per epoch (default: all the training events)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="burst-precision-"))
    runs: dict[str, list[dict]] = {"float32": [], args.precision: []}
    machine: dict = {}
    try:
        for seed in args.seeds:
            for precision in runs:
                metrics, machine, seconds = run_seed(seed, args.epochs, args.synthetic, work, precision, args.steps)
                runs[precision].append(metrics)
                print(f"seed {seed} {precision:15s} {seconds:6.0f} s wall; " + ", ".join(
                    f"{k} {metrics['summary'][k]:.4g}" for k in SHOWN if k in metrics["summary"]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {machine.get('cpu_model')}; SIMD {' '.join(machine.get('simd', []))}; oneDNN "
          f"{'on' if machine.get('onednn_enabled') else 'off'}; {args.epochs} epochs of {args.steps or 'all'} steps, {args.synthetic} synthetic events, seeds {args.seeds}")
    print_table(runs["float32"], runs[args.precision], args.precision)


def print_table(ref: list[dict], other: list[dict], precision: str) -> None:
    """Per summary metric: float32's spread over the seeds (``ref``: each run's metrics.json),
    ``precision``'s mean and range, the distance, the MC-vs-MC floor, whether it held; then the count."""
    keys = [k for k, v in ref[0]["summary"].items() if isinstance(v, (int, float)) and k != "events"]
    print(f"{'metric (GAN vs MC)':22s} {'fp32 mean':>10s} {'fp32 std':>9s} {'fp32 range':>21s} {precision + ' mean':>20s} "
          f"{'its range':>21s} {'sigmas':>7s} {'MC-vs-MC':>9s}  held")
    count = 0
    for key in keys:
        a, b = [r["summary"][key] for r in ref], [r["summary"][key] for r in other]
        ok, sigmas = held(a, b)
        count += ok
        floor = statistics.fmean(r["noise_floor"][key] for r in ref) if key in ref[0]["noise_floor"] else float("nan")
        print(f"{key:22s} {statistics.fmean(a):10.4g} {statistics.stdev(a) if len(a) > 1 else 0:9.3g} [{min(a):9.4g}, {max(a):9.4g}] "
              f"{statistics.fmean(b):20.4g} [{min(b):9.4g}, {max(b):9.4g}] {sigmas:7.2f} {floor:9.4g}  {'yes' if ok else 'NO'}")
    print(f"{precision} held {count} of {len(keys)} metrics within float32's run-to-run spread")

if __name__ == "__main__":
    main()
