"""Lifecycle timings of the local target (figures only; nothing is asserted).

* `burst up --provider local` until the cluster answers, and the overhead over a plain
  `ray start --head` measured side by side (target ≤ 1.5×);
* submission to the first training step, and `burst down`;
* `burst --help` and `burst status` wall time (target < 1 s: lazy imports).

Run: python benchmarks/lifecycle.py [--json]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def timed(cmd: list[str], env: dict, cwd: str | None = None, timeout: int = 600) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")
    return elapsed, proc


def plain_ray_start(env: dict) -> float:
    """`ray start --head` + wait for its dashboard, in a private temp dir; then stop exactly it."""
    import urllib.request

    from burst.runtime.ray_head import _free_ports

    temp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    dash = _free_ports(1)[0]
    marker = f"plain-{os.getpid()}"
    env = {**env, "BURST_CLUSTER_ID": marker, "RAY_USAGE_STATS_ENABLED": "0"}
    start = time.perf_counter()
    subprocess.run([str(BIN / "ray"), "start", "--head", "--port", "0", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
                    "--include-dashboard", "true", "--num-cpus", "2", "--temp-dir", temp, "--disable-usage-stats"],
                   env=env, capture_output=True, check=True, timeout=300)
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{dash}/api/version", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    elapsed = time.perf_counter() - start
    from burst.runtime.ray_head import stop_processes

    stop_processes(marker)
    return elapsed


def main() -> None:
    as_json = "--json" in sys.argv
    home = tempfile.mkdtemp(prefix="bl", dir="/tmp")
    cwd = tempfile.mkdtemp(prefix="bl-cwd-")
    env = {**os.environ, "BURST_HOME": home, "TF_CPP_MIN_LOG_LEVEL": "3"}
    burst = [sys.executable, "-m", "burst.cli"]
    figures: dict[str, float] = {}
    figures["help_s"] = min(timed([str(BIN / "burst"), "--help"], env)[0] for _ in range(3))
    figures["status_empty_s"] = min(timed([str(BIN / "burst"), "status"], env)[0] for _ in range(3))
    figures["plain_ray_start_s"] = plain_ray_start(env)
    figures["burst_up_s"], _ = timed([*burst, "up", "--provider", "local", "--name", "bench", "--cpus", "2"], env)
    figures["up_over_plain_ray"] = figures["burst_up_s"] / figures["plain_ray_start_s"]
    figures["status_running_s"] = min(timed([str(BIN / "burst"), "status"], env)[0] for _ in range(3))
    train_s, _ = timed([*burst, "train", "gan3d", "--cluster", "bench", "--synthetic", "200", "--epochs", "1", "--steps", "4",
                        "--val-events", "100", "--batch-per-replica", "8"], env, cwd=cwd)
    figures["train_tiny_s"] = train_s
    run_dir = next(Path(cwd, "burst-runs").iterdir())
    prov = json.loads((run_dir / "provenance.json").read_text())
    figures["submit_to_first_step_s"] = prov["timings"]["submit_to_first_step_s"]
    figures["burst_down_s"], _ = timed([*burst, "down", "bench"], env)
    if as_json:
        print(json.dumps({k: round(v, 3) for k, v in figures.items()}, indent=1))
    else:
        for k, v in figures.items():
            print(f"{k:24s} {v:8.3f}")


if __name__ == "__main__":
    main()
