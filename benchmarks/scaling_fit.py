"""Leave-one-out check of the 3DGAN time model, the held-out Azure table, and the wall time of `burst plan`.

    python benchmarks/scaling_fit.py

For every measured point of every fitted table (GPU, TPU, CPU): refit the model without it,
predict it, print the error (goal: within ±12 %, no systematic sign across node shapes). Then
predict the Azure ML table the model never sees, beside the earlier ``A / N + B`` model (fitted
to the GKE V100 table, batch and node shape ignored). Then time `burst plan` as a user runs it
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

from burst.catalog import offers as catalog  # noqa: E402
from burst.placement import policy, profile  # noqa: E402
from burst.placement import planner as placement  # noqa: E402

GOAL = 0.12


def amdahl(points: list[profile.Point]) -> tuple[float, float]:
    """The v1 model: relative-error least squares of ``t = A / N + B`` (batch and nodes ignored)."""
    import numpy as np

    x = np.array([[1 / p.replicas / p.seconds, 1 / p.seconds] for p in points])
    a, b = np.linalg.lstsq(x, np.ones(len(points)), rcond=None)[0]
    return float(a), float(max(b, 0.0))


def predict(fit: profile.Fit, prof: profile.Profile, p: profile.Point) -> float:
    per_event = fit.per_event[p.accelerator]
    return fit.epoch_s(per_event, p.network, p.replicas, p.nodes, p.batch, prof.events)


def main() -> int:
    prof = profile.load("gan3d")
    points = prof.points()
    fit = prof.fit()
    print(f"form: {prof.scaling.form}")
    print("fit on all {} points: t_step {:.3f} s; a_acc (s/event/replica) {}; hop_net (s/step/replica) {}".format(
        len(points), fit.per_step, ", ".join(f"{k} {v:.4f}" for k, v in fit.per_event.items()),
        ", ".join(f"{k} {v:.4f}" for k, v in fit.per_hop.items())))
    print(f"\n{'table':<22} {'N':>4} {'nodes':>5} {'b':>4} {'per node':>8} {'measured s':>10} {'in-sample':>9} {'LOO pred':>9} {'LOO error':>9}")
    worst, by_shape = 0.0, {}
    for i, p in enumerate(points):
        held = profile.fit_points(points[:i] + points[i + 1:], prof.events)
        pred = predict(held, prof, p)
        err = pred / p.seconds - 1
        worst = max(worst, abs(err))
        shape = p.replicas // p.nodes
        by_shape.setdefault(f"{p.accelerator} x{shape}/node", []).append(err)
        print(f"{p.table:<22} {p.replicas:>4} {p.nodes:>5} {p.batch:>4} {shape:>8} {p.seconds:>10.1f} "
              f"{predict(fit, prof, p) / p.seconds - 1:>+9.1%} {pred:>9.1f} {err:>+9.1%}")
    print(f"worst leave-one-out error: {worst:.1%} ({'within' if worst <= GOAL else 'OUTSIDE'} ±{GOAL:.0%})")
    print("mean leave-one-out error by node shape: " + "; ".join(f"{k} {statistics.mean(v):+.1%} (n={len(v)})" for k, v in by_shape.items()))

    held_out = prof.points(held_out=True)
    if held_out:
        a, b = amdahl([p for p in points if p.table == "gke-v100"])
        print(f"\nheld out (never fitted): {held_out[0].table}; v1 = A/N + B on gke-v100 (A {a:.0f} s, B {b:.2f} s)")
        print(f"{'N':>4} {'nodes':>5} {'b':>4} {'measured s':>10} {'v2 pred':>8} {'v2 err':>7} {'v1 pred':>8} {'v1 err':>7}")
        v1_errs, v2_errs = [], []
        for p in held_out:
            v2 = predict(fit, prof, p)
            v1 = a / p.replicas + b
            v1_errs.append(v1 / p.seconds - 1)
            v2_errs.append(v2 / p.seconds - 1)
            print(f"{p.replicas:>4} {p.nodes:>5} {p.batch:>4} {p.seconds:>10.1f} {v2:>8.1f} {v2_errs[-1]:>+7.1%} {v1:>8.1f} {v1_errs[-1]:>+7.1%}")
        for name, errs in (("v2", v2_errs), ("v1", v1_errs)):
            print(f"{name}: mean {statistics.mean(errs):+.1%}, mean |error| {statistics.mean(map(abs, errs)):.1%}, "
                  f"within ±12 % {sum(abs(e) <= GOAL for e in errs)}/{len(errs)}")

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
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
