"""Leave-one-out check of the 3DGAN scaling fit, and the wall time of `burst plan`.

    python benchmarks/scaling_fit.py

For every measured V100 point: refit ``epoch_s = A / N + B`` without it, predict it, print the
error (aim: within ±15 %). Then time `burst plan` over the whole catalog as a user runs it
(a fresh process, so imports count).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from burst.placement import catalog, policy, profile  # noqa: E402
from burst.placement import planner as placement  # noqa: E402


def main() -> int:
    prof = profile.load("gan3d")
    measured = prof.scaling.measured
    a, b = prof.fit()
    print(f"fit on all {len(measured)} points: A = {a:.1f} s, B = {b:.2f} s (one V100: {prof.events / a:.1f} events/s)")
    print(f"{'N':>5} {'measured s':>11} {'in-sample':>10} {'held-out fit A, B':>20} {'LOO pred s':>11} {'LOO error':>10}")
    worst = 0.0
    for n, t in measured.items():
        la, lb = profile.fit_amdahl({k: v for k, v in measured.items() if k != n})
        pred = la / n + lb
        err = pred / t - 1
        worst = max(worst, abs(err))
        print(f"{n:>5} {t:>11.1f} {(a / n + b) / t - 1:>+10.1%} {f'{la:.0f}, {lb:.2f}':>20} {pred:>11.1f} {err:>+10.1%}")
    print(f"worst leave-one-out error: {worst:.1%} ({'within' if worst <= 0.15 else 'OUTSIDE'} ±15 %)")

    offers = catalog.load()
    pol = policy.load(ROOT / "policies" / "default.yaml")
    start = time.perf_counter()
    plan = placement.plan(pol, prof, offers)
    in_process = time.perf_counter() - start
    print(f"\nplan in-process: {len(plan.candidates)} candidates from {len(offers)} catalog rows in {in_process * 1000:.1f} ms")
    walls = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "burst.cli", "plan", "--json", "--policy", str(ROOT / "policies" / "default.yaml")],
                       capture_output=True, check=True, cwd=ROOT, env={**os.environ, "BURST_HOME": "/tmp/burst-bench-plan"})
        walls.append(time.perf_counter() - start)
    print(f"`burst plan --json` wall (fresh process, 5 runs): median {statistics.median(walls):.3f} s, max {max(walls):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
