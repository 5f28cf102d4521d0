"""Where one local run's CPU goes, by process (figures only; nothing is asserted).

Runs `burst run gan3d --provider local` in the shape of the suite's end-to-end runs (3 epochs of 6
steps, 200 synthetic events, batch 8, 2 CPUs) inside a control group of its own, samples every
process in it from /proc, and prints the CPU-seconds of each role (the Ray Train worker, the job's
driver, Ray Train's and Ray Jobs' helper actors, Ray's daemons, the CLI) beside the group's own
total (the kernel's count, exited processes included). ``--tree DIR`` runs the same command from
another checkout too (its packages first on the path), the two taking turns, so that a change is
measured side by side on one machine in one sitting:

    python benchmarks/run_cpu.py [--repeats 2] [--tree /path/to/other/checkout] [--json]

Needs root and cgroup v2 (as the suite's census does). The synthetic events are made once per
node and reused, so the first run of a tree may show their making under the driver.

``--command "CMD"`` measures any shell command instead (the README's test command, say), on a
machine with nothing else running: every process started after it, wherever its control group
(the suite's workers make groups of their own), sampled each second, summed by the same roles and
the suite's own (pytest's workers, the breaks' pytests, the browser, the site's servers, pip):

    python benchmarks/run_cpu.py --command ".venv/bin/python -m pytest -q -n auto"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import census  # noqa: E402  (the suite's cgroup finder)

RUN = ["run", "gan3d", "--provider", "local", "--cpus", "2", "--epochs", "3", "--steps", "6", "--synthetic", "200",
       "--val-events", "100", "--batch-per-replica", "8"]
# (pattern in the command line, role), first match wins
ROLES = ((r"RayTrainWorker", "Ray Train worker"), (r"burst\.runtime\.entry", "job driver"),
         (r"ray::(TrainController|SynchronizationActor|PlacementGroupCleaner|DatasetManager|_AutoscalingCoordinatorActor|PreemptionWatcher)",
          "Ray Train helpers"),
         (r"ray::JobSupervisor", "Ray Jobs supervisor"), (r"ray::IDLE", "idle Ray workers"),
         (r"dashboard/agent\.py|ray::DashboardAgent|ray::RuntimeEnvAgent|runtime_env/agent", "Ray agents"),
         (r"dashboard/dashboard\.py|ray-dashboard-|multiprocessing\.(forkserver|resource_tracker)", "Ray dashboard"),
         (r"gcs_server|raylet|log_monitor|monitor\.py|ray\.util\.client\.server|ray\.scripts\.scripts start", "Ray daemons"),
         (r"burst\.cli|bin/burst", "burst CLI"),
         # what a suite runs beside burst's own processes (--command)
         (r"tests\.breaks|burst-break-", "breaks' pytests"), (r"execnet|exec\(eval\(sys\.stdin", "pytest workers"),
         (r"pytest", "pytest"), (r"chrom", "browser"), (r"postgres|slurm|munge|azurite|gcp-storage-emulator|prometheus|ch-run", "site servers"),
         (r"pip (install|download)|sha256sum", "pip"), (r"python.*-m workloads\.", "workload scripts"))


def role(cmdlines: set[str]) -> str:
    """The first role any of a process's titles matches (a Ray worker is renamed as it takes an actor)."""
    for pattern, name in ROLES:
        if any(re.search(pattern, cmdline) for cmdline in cmdlines):
            return name
    return "other"


def _note(seen: dict, proc) -> None:
    """Keep ``proc``'s CPU-seconds so far and every title it has had (a pid reused later is another key)."""
    import psutil

    try:
        times = proc.cpu_times()
        key = (proc.pid, proc.create_time())
        seen[key] = (times.user + times.system, seen.get(key, (0.0, set()))[1] | {" ".join(proc.cmdline())})
    except (psutil.Error, OSError):
        pass


def by_role(seen: dict) -> Counter:
    roles: Counter[str] = Counter()
    for cpu, titles in seen.values():
        roles[role(titles)] += cpu
    return roles


def measured_run(tree: Path, home: Path) -> dict:
    """One run of ``RUN`` from ``tree`` in a control group of its own: CPU-seconds by role and in all."""
    import psutil

    parent = census._hierarchy()
    if parent is None:
        raise SystemExit("run_cpu.py needs root and a cgroup v2 hierarchy (as the suite's census does)")
    group = parent / f"burst-bench-{os.getpid()}-{time.monotonic_ns()}"
    group.mkdir()
    env = {**os.environ, "BURST_HOME": str(home), "PYTHONPATH": str(tree)}
    seen: dict[tuple[int, float], tuple[float, set[str]]] = {}

    def usage() -> float:
        return next(int(line.split()[1]) / 1e6 for line in (group / "cpu.stat").read_text().splitlines() if line.startswith("usage_usec "))

    def sample() -> None:
        for pid in census.group_pids(group):
            try:
                _note(seen, psutil.Process(pid))
            except psutil.Error:
                pass

    start = time.perf_counter()
    # the child joins the group before it execs, so everything it starts is counted
    proc = subprocess.Popen([sys.executable, "-m", "burst.cli", *RUN], cwd=home, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())))
    while proc.poll() is None:
        sample()
        time.sleep(0.3)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read()
    deadline = time.monotonic() + 20
    while census.group_pids(group) and time.monotonic() < deadline:
        sample()
        time.sleep(0.3)
    total = usage()
    for sub in sorted((d for d in group.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        sub.rmdir()
    group.rmdir()
    if proc.returncode != 0:
        raise SystemExit(f"the run from {tree} failed: {stderr.strip()[-800:]}")
    roles = by_role(seen)
    line = next((l for l in stderr.splitlines() if l.startswith("validation:")), "")
    return {"tree": str(tree), "wall_s": round(wall, 1), "cpu_s": round(total, 1), "by_role": {k: round(v, 1) for k, v in roles.most_common()},
            "validation": line}


def measured_command(command: str) -> dict:
    """``command`` (a shell line) run to its end: CPU-seconds of every process started meanwhile, by role."""
    import psutil

    seen: dict[tuple[int, float], tuple[float, set[str]]] = {}
    start_time = time.time()
    start = time.perf_counter()
    proc = subprocess.Popen(["bash", "-c", command], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        for p in psutil.process_iter(["create_time"]):
            if (p.info["create_time"] or 0) >= start_time - 1:
                _note(seen, p)
        time.sleep(1.0)
    roles = by_role(seen)
    return {"command": command, "exit": proc.returncode, "wall_s": round(time.perf_counter() - start, 1),
            "cpu_s": round(sum(roles.values()), 1), "by_role": {k: round(v, 1) for k, v in roles.most_common()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tree", type=Path, help="another checkout, run in turn with this one")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--command", help="measure this shell command instead of one run (an idle machine: every new process counts)")
    args = ap.parse_args()
    if args.command:
        r = measured_command(args.command)
        print(json.dumps(r, indent=1) if args.json else
              f"{r['command']}: exit {r['exit']}, {r['cpu_s']} CPU-s in {r['wall_s']} s\n" +
              "\n".join(f"{v:10.1f}  {k}" for k, v in r["by_role"].items()))
        return 0
    trees = [ROOT] + ([args.tree.resolve()] if args.tree else [])
    results = []
    with tempfile.TemporaryDirectory(prefix="burst-run-cpu-") as tmp:
        for i in range(args.repeats):
            for n, tree in enumerate(trees):
                home = Path(tmp) / f"home-{n}-{i}"
                home.mkdir()
                results.append(measured_run(tree, home))
                if not args.json:
                    r = results[-1]
                    print(f"{r['tree']}: {r['cpu_s']} CPU-s in {r['wall_s']} s  " + ", ".join(f"{k} {v}" for k, v in r["by_role"].items()))
    if args.json:
        print(json.dumps(results, indent=1))
    elif args.tree:
        for tree in trees:
            mine = [r for r in results if r["tree"] == str(tree)]
            print(f"{tree}: mean {sum(r['cpu_s'] for r in mine) / len(mine):.1f} CPU-s, {sum(r['wall_s'] for r in mine) / len(mine):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
