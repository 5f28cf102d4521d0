"""Slurm against this machine's local target, side by side, on a real controller started here.

    python benchmarks/slurm_timings.py [--repeats 5]

Starts a Slurm site of its own (``tests/support/slurm_site.py``: munged, slurmctld, slurmd; root and
Debian's slurm-wlm + munge needed) and prints:
- the wall time of `burst plan --json` under a Slurm policy (the on-prem wait asked from Slurm with
  ``sbatch --test-only``) and under the same policy with the wait typed in (``scheduler: ray``),
  best and median of ``--repeats``, and the number of ``sbatch --test-only`` calls one plan makes;
- for `burst up` + `burst train gan3d --epochs 1` on each target: the seconds `up` took and the
  seconds from submitting the run to its first training step (from the run's provenance).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import slurm_site  # noqa: E402

TRAIN = ["--epochs", "1", "--synthetic", "200", "--val-events", "100", "--batch-per-replica", "8"]


def burst(env: dict, cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"burst {' '.join(args)} failed: {proc.stderr[-2000:]}")
    return proc, time.perf_counter() - started


def plan_times(env: dict, cwd: Path, policy: Path, repeats: int) -> list[float]:
    return [burst(env, cwd, "plan", "--policy", str(policy), "--json")[1] for _ in range(repeats)]


def up_to_first_step(env: dict, cwd: Path, up_args: list[str], name: str) -> tuple[float, float]:
    _, up_s = burst(env, cwd, "up", *up_args, "--name", name)
    proc, _ = burst(env, cwd, "train", "gan3d", "--cluster", name, "--json", *TRAIN)
    run = json.loads(proc.stdout)
    timings = json.loads((Path(run["run_dir"]) / "provenance.json").read_text())["timings"]
    burst(env, cwd, "down", name)
    return up_s, timings["submit_to_first_step_s"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if slurm_site.missing():
        raise SystemExit(slurm_site.missing())
    site = slurm_site.start()
    work = Path(tempfile.mkdtemp(prefix="burst-slurm-bench-"))
    try:
        env = {**site.env, "BURST_HOME": str(work / "home")}
        asked = site.policy(work / "slurm.yaml")
        typed = work / "typed.yaml"
        typed.write_text(asked.read_text().replace("scheduler: slurm", "scheduler: ray").replace("providers: [local, slurm]", "providers: [local, ray]"))
        # Count the scheduler calls of one plan with a recording wrapper around sbatch.
        shim = work / "bin"
        shim.mkdir()
        (shim / "sbatch").write_text(f"#!/bin/bash\necho \"$@\" >> {work}/sbatch.calls\nexec {subprocess.check_output(['which', 'sbatch'], text=True).strip()} \"$@\"\n")
        (shim / "sbatch").chmod(0o755)
        burst({**env, "PATH": f"{shim}:{os.environ['PATH']}"}, work, "plan", "--policy", str(asked), "--json")
        calls = (work / "sbatch.calls").read_text().splitlines()
        for label, policy in (("slurm asked", asked), ("wait typed in", typed)):
            times = plan_times(env, work, policy, args.repeats)
            print(f"burst plan --json, {label:13s}: best {min(times):.3f} s, median {statistics.median(times):.3f} s ({args.repeats} runs)")
        print(f"sbatch --test-only calls in one plan: {sum('--test-only' in c for c in calls)}")
        for label, up_args in (("local", ["--provider", "local"]),
                               ("slurm", ["--provider", "slurm", "--policy", str(asked), "--hours", "1", "--wait"])):
            up_s, first_step_s = up_to_first_step(env, work, up_args, f"bench-{label}")
            print(f"{label:5s}: burst up {up_s:.1f} s; run submitted to first step {first_step_s:.1f} s; together {up_s + first_step_s:.1f} s")
    finally:
        slurm_site.stop(site)


if __name__ == "__main__":
    main()
