"""How long a managed run takes to judge its cluster lost when the head's gcs_server is killed.

A managed run of gan3d on this machine (`burst run --provider local --managed --detach`, a small
synthetic dataset); after its first epoch the head's gcs_server is SIGKILLed, the rest of the
cluster left as it is. Printed: seconds from the kill to the controller's "lost" line in the
run's move log, and that line. Only this loss kind and this direction so far (issue 86's full
table, Slurm and Kubernetes included, is still to come).

    python benchmarks/lost_head.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAIN = ["--synthetic", "200", "--val-events", "100", "--batch-per-replica", "8", "--epochs", "20", "--steps", "8"]


def burst(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "BURST_HOME": str(home)}, cwd=home.parent)


def main() -> int:
    import psutil

    from burst.runtime.ray_head import cluster_processes

    root = Path(tempfile.mkdtemp(prefix="lost-head-"))
    home = root / "home"
    policy = root / "policy.yaml"
    policy.write_text("providers: [local]\n")
    try:
        started = burst(home, "run", "gan3d", "--provider", "local", "--cpus", "2", "--managed", "--detach", "--policy", str(policy), *TRAIN)
        if started.returncode != 0:
            print(started.stderr[-2000:])
            return 1
        run_id = re.search(r"(gan3d-[0-9a-z-]+)", started.stdout + started.stderr).group(1)
        record = home / "runs" / f"{run_id}.json"
        deadline = time.time() + 600
        while time.time() < deadline and ((json.loads(record.read_text()).get("progress") or {}).get("epoch") or 0) < 1:
            time.sleep(1)
        handle = next(json.loads(p.read_text()) for p in (home / "clusters").glob("*.json"))
        (gcs,) = [p for p in cluster_processes(handle["cluster_id"], handle["temp_dir"]) if p.name() == "gcs_server"]
        gcs.kill()
        killed = time.time()
        log = home / "managed" / f"{run_id}.log"
        line = None
        while time.time() < killed + 900 and line is None:
            line = next((l for l in log.read_text().splitlines() if " lost " in l or "lost after" in l), None) if log.exists() else None
            time.sleep(0.5)
        judged = time.time() - killed
        cpu = psutil.cpu_count()
        print(f"this machine: {cpu} CPUs; local head's gcs_server SIGKILLed after epoch 1")
        print(f"loss -> judged: {judged:.1f} s" if line else f"not judged lost in {judged:.0f} s")
        print(f"move log: {line}")
        return 0 if line else 1
    finally:
        burst(home, "down", "--all", timeout=300)


if __name__ == "__main__":
    sys.exit(main())
