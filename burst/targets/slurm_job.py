"""What runs inside a Slurm allocation: ``python -m burst.targets.slurm_job CLUSTER_DIR CLUSTER_ID``.

Starts the Ray head on the allocation's first node (the node this batch script runs on) on ports
chosen free there, its dashboard on that node's loopback, token authentication on, its temp dir
private to the job; Ray workers on the other nodes with ``srun``. Writes ``head.json`` in the
cluster directory (shared storage) so that ``burst up`` learns where the head is. On SIGTERM
(``scancel``, the walltime, a preemption) it stops exactly this cluster's processes, removes the
head's Ray directory and ends.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import local


def _gpus_here() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return len([d for d in visible.split(",") if d.strip()]) if visible else 0


def main(cluster_dir: Path, cluster_id: str) -> int:
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    host = socket.gethostname()
    multi = nodes > 1
    node_ip = socket.gethostbyname(host) if multi else "127.0.0.1"
    cpus = int(os.environ.get("SLURM_CPUS_ON_NODE") or os.cpu_count() or 1)
    gpus = _gpus_here()
    token = cluster_dir / "auth_token"
    temp_dir = local._temp_dir(cluster_id)
    temp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    ports = local.choose_ports()
    env = local.head_env(cluster_id, token, ports, loopback=not multi)
    procs = [subprocess.Popen(local.head_command(ports, cpus, gpus, temp_dir, node_ip=node_ip, block=True), env=env)]
    if multi:
        # One Ray worker per other node; srun runs them as a step of this job, so Slurm tracks them.
        procs.append(subprocess.Popen(["srun", f"--nodes={nodes - 1}", "--ntasks-per-node=1", f"--exclude={host}", "--kill-on-bad-exit=1",
                                       *local.ray_command(), "start", f"--address={node_ip}:{ports['GCS server']}", "--block",
                                       f"--temp-dir={temp_dir}", "--disable-usage-stats"], env=env))

    def cleanup() -> None:
        local.stop_processes(cluster_id, str(temp_dir))
        for p in procs:
            if p.poll() is None:
                p.kill()
        # The head's session logs and sockets: the node's /tmp is not burst's to fill (the other
        # nodes' Ray dirs end with their srun step). Removed before waiting on anything: Slurm
        # follows its SIGTERM with a SIGKILL after KillWait (30 s by default, 5 s in the tests).
        shutil.rmtree(temp_dir, ignore_errors=True)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def on_signal(signum, frame) -> None:
        cleanup()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    head = {"host": host, "node_ip": node_ip, "dashboard_port": ports["dashboard"], "gcs_port": ports["GCS server"],
            "temp_dir": str(temp_dir), "pid": os.getpid(), "job_id": os.environ.get("SLURM_JOB_ID"), "nodes": nodes,
            "cpus": cpus * nodes, "gpus": gpus * nodes, "started": time.time()}
    tmp = cluster_dir / "head.json.tmp"
    tmp.write_text(json.dumps(head))
    os.replace(tmp, cluster_dir / "head.json")
    code = procs[0].wait()  # `ray start --block` ends when the head does
    cleanup()
    return code


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2]))
