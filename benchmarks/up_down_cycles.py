"""Many local `burst up`/`burst down` cycles, counted by a census that is not burst's own finder.

    python benchmarks/up_down_cycles.py [--cycles 50] [--failed 10] [--down-during-up 5]

Runs, in one state directory of its own:
- plain cycles: `burst up --provider local` then `burst down`, through the CLI;
- failed ups, two kinds taking turns: a port Ray was given is taken by someone else before Ray
  binds it (the race a free-port choice cannot close; driven in-process by handing ``up`` a port
  this script holds), and a crash during start (Ray's GCS server SIGKILLed from outside as soon as
  it appears, as an OOM killer would);
- `burst down --all` run while a `burst up` is still starting Ray.
Before the first and after the last cycle it takes a census of every process on the machine
(PID + start time, ``tests/support/census.py``) and prints the processes started by the cycles that are
still alive: the figure must be 0. Each cycle's outcome and duration is printed as it goes.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import census  # noqa: E402


def _burst(*args: str, env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, env=env, timeout=timeout)


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    return lines[-1] if lines else ""


def _cluster_pids(name: str) -> list:
    """Processes of a starting cluster, found through its recorded id (the record exists before Ray starts)."""
    from burst.home import state
    from burst.home.state import ClusterHandle
    from burst.runtime.ray_head import cluster_processes

    handle = state.load(ClusterHandle, name)
    return cluster_processes(handle.cluster_id, handle.temp_dir) if handle is not None else []


def plain(i: int, env: dict) -> str:
    up = _burst("up", "--provider", "local", "--name", f"c{i}", "--cpus", "1", env=env)
    if up.returncode != 0:
        return f"up failed: {_last_line(up)}"
    down = _burst("down", f"c{i}", env=env)
    return "ok" if down.returncode == 0 else f"down failed: {_last_line(down)}"


def failed_port(i: int, env: dict) -> str:
    """`up` is handed a dashboard port that this process holds: Ray cannot bind it."""
    from burst.errors import BurstError
    from burst.runtime import ray_head
    from burst.targets import local

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    real = ray_head._free_ports

    def with_taken_port(n: int) -> list[int]:
        ports = real(n)
        ports[1] = taken.getsockname()[1]  # the dashboard's
        return ports

    ray_head._free_ports = with_taken_port
    try:
        local.up(f"p{i}", cpus=1)
    except BurstError as exc:
        return f"failed as meant: {exc}"
    finally:
        ray_head._free_ports = real
        taken.close()
    _burst("down", f"p{i}", env=env)
    return "UNEXPECTED: up succeeded with a taken port"


def failed_crash(i: int, env: dict) -> str:
    """SIGKILL the GCS server as soon as Ray starts it."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-m", "burst.cli", "up", "--provider", "local", "--name", f"k{i}", "--cpus", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    killed = False
    while proc.poll() is None and time.monotonic() < deadline and not killed:
        for p in _cluster_pids(f"k{i}"):
            try:
                if p.name() == "gcs_server":
                    p.send_signal(signal.SIGKILL)
                    killed = True
            except psutil.Error:
                pass
        time.sleep(0.05)
    out, err = proc.communicate(timeout=240)
    if proc.returncode == 0:
        _burst("down", f"k{i}", env=env)
        return "up survived the crash" + (" (GCS never seen)" if not killed else "")
    return f"failed as meant: {(err.strip() or out.strip()).splitlines()[-1]}"


def down_during_up(i: int, env: dict) -> str:
    proc = subprocess.Popen([sys.executable, "-m", "burst.cli", "up", "--provider", "local", "--name", f"d{i}", "--cpus", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while proc.poll() is None and not _cluster_pids(f"d{i}") and time.monotonic() < deadline:
        time.sleep(0.05)
    down = _burst("down", "--all", env=env)
    out, err = proc.communicate(timeout=240)
    up_said = (err.strip() or out.strip()).splitlines()[-1] if (err.strip() or out.strip()) else ""
    leftover = _burst("status", "--json", env=env).stdout
    return f"down exit {down.returncode}; up exit {proc.returncode}: {up_said}" + ("" if f'"d{i}"' not in leftover else " | STILL RECORDED")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=50)
    p.add_argument("--failed", type=int, default=10)
    p.add_argument("--down-during-up", type=int, default=5)
    a = p.parse_args()
    home = Path(tempfile.mkdtemp(prefix="burst-cycles-"))
    os.environ["BURST_HOME"] = str(home)
    env = {**os.environ, "BURST_HOME": str(home)}
    kinds = (["failed_port", "failed_crash"] * a.failed)[: a.failed] + ["down_during_up"] * a.down_during_up
    kinds += ["plain"] * (a.cycles - len(kinds))
    # spread the special cycles through the run
    order = sorted(range(len(kinds)), key=lambda k: (k * 7919) % len(kinds))
    before = census.snapshot()
    print(f"census before: {len(before)} processes on the machine; state dir {home}")
    counts: dict[str, int] = {}
    for n, k in enumerate(order, 1):
        kind = kinds[k]
        start = time.monotonic()
        outcome = globals()[kind](n, env)
        counts[kind] = counts.get(kind, 0) + 1
        print(f"{n:3d} {kind:15} {time.monotonic() - start:5.1f} s  {outcome[:160]}", flush=True)
    _burst("down", "--all", env=env)  # nothing should be recorded; this must find nothing to do
    time.sleep(2)
    left = census.survivors(before)
    print(f"cycles: {counts}")
    print(f"census after: {len(census.snapshot())} processes on the machine; started by the cycles and still alive: {len(left)}")
    for line in left:
        print("  LEFT:", line)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
