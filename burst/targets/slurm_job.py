"""What runs inside a Slurm allocation: ``python -m burst.targets.slurm_job CLUSTER_DIR CLUSTER_ID [STORAGE GRACE_S [IDLE_MINUTES]]``.

Starts the Ray head on the allocation's first node (the node this batch script runs on) on ports
chosen free there, its dashboard on that node's loopback, token authentication on, its temp dir
private to the job; Ray workers on the other nodes with ``srun`` (each a ``python -m
burst.targets.slurm_job --worker CLUSTER_ID GCS_ADDRESS`` that cleans up after its own worker,
``worker_node``). Writes ``head.json`` in the
cluster directory (shared storage) so that ``burst up`` learns where the head is.

It first removes the node scratch of this user's runs that no process holds any more, and the Ray
directories of allocations whose batch script is gone (what a cancelled allocation left: Slurm
SIGKILLs its processes after KillWait, before their clean-up).

On SIGTERM it first posts a ``stop`` notice in the cluster's notice directory on its storage (``burst.runtime.notice``)
and waits up to GRACE_S for the training workers to checkpoint where they are and for the jobs to
end: the signal sbatch's ``--signal=B:TERM@N`` sends this script alone N seconds before the
walltime. (A ``scancel`` or the walltime itself signals every process of the job: Ray ends at once
and the wait with it.) Then it stops exactly this cluster's processes, removes the head's Ray
directory and ends.

With IDLE_MINUTES, the cluster's keeper (``infra.keeper``) runs in this process beside the head: after
that long with no job on the head's Jobs API it cancels its own Slurm job, so an idle allocation
ends although the machine that asked for it sleeps (the walltime is the lease: Slurm enforces it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from ..runtime import ray_head


def _gpus_here() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return len([d for d in visible.split(",") if d.strip()]) if visible else 0


FOLLOWER_GRACE_S = 3.0
WORKER_FLAG = "--worker"  # the other nodes' task: `worker_node`


def _activity(dashboard: str, token: Path) -> Optional[bool]:
    """Whether the head's Jobs API lists a job still going; None when it does not answer."""
    from infra import keeper

    try:
        return keeper.job_activity(dashboard, token.read_text().strip(), timeout=2)[0]
    except (OSError, ValueError, AttributeError):  # no answer, or not the Jobs API's list
        return None


def _jobs_running(dashboard: str, token: Path) -> bool:
    """True while the head's Jobs API lists a job that is still going (False when it does not answer)."""
    return bool(_activity(dashboard, token))


def _answers(dashboard: str, token: Path) -> bool:
    """True once the head's Jobs API answers (with or without jobs)."""
    return _activity(dashboard, token) is not None


def allocation_lock(cluster_id: str) -> Path:
    """Held by an allocation's batch script while it runs: its Ray directory is in use."""
    return lock_beside(ray_head.temp_dir_of(cluster_id))


def lock_beside(temp_dir: Path | str) -> Path:
    """The allocation lock beside the Ray directory ``temp_dir``."""
    return Path(f"{temp_dir}.allocation")


def remove_ray_dir(cluster_id: str) -> None:
    """This allocation's Ray directory on this node (session logs, sockets), and its lock."""
    shutil.rmtree(ray_head.temp_dir_of(cluster_id), ignore_errors=True)
    allocation_lock(cluster_id).unlink(missing_ok=True)


def take_node(cluster_id: str) -> Path:
    """What an allocation's process does first on each of its nodes (the head's batch script, the
    other nodes' task): Slurm SIGKILLs a cancelled allocation's processes after its KillWait, before
    their clean-up, so the scratch of runs and the Ray directories of allocations that no process
    on this node holds any more are removed now; then this allocation's Ray directory is made and
    its lock held until this process ends. Returns the directory."""
    from ..runtime import scratch

    scratch.sweep()
    sweep_allocations()
    temp_dir = ray_head.temp_dir_of(cluster_id)
    temp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    scratch.hold_lock(allocation_lock(cluster_id))
    return temp_dir


def sweep_allocations() -> list[str]:
    """Remove the Ray directories (session logs, sockets) of this user's allocations on this node
    whose batch script no longer runs; returns their cluster ids."""
    from ..runtime import scratch

    removed = []
    for lock in ray_head.runtime_root().glob("*.allocation"):
        with scratch.unheld(lock) as free:
            if free:
                shutil.rmtree(lock.with_suffix(""), ignore_errors=True)
                removed.append(lock.stem)
    return removed


def start_head(cluster_id: str, token: Path, temp_dir: Path, cpus: int, gpus: int, node_ip: str,
               multi: bool) -> tuple[subprocess.Popen, dict[str, int], dict[str, str]]:
    """``ray start --head --block`` on ports chosen free, until its Jobs API answers; tried once more
    on new ports when it ends first. Ray gives a new raylet a fixed 30 s to register
    (``ray/_private/node.py``), which a node still busy with the previous job's clean-up can miss;
    `ray start` then exits 1. Returns (the head's process, its ports, its environment); the process
    has ended when both tries did."""
    for attempt in (1, 2):
        ports = ray_head.choose_ports()
        env = ray_head.head_env(cluster_id, token, ports, loopback=not multi, node_ip=node_ip)
        head = subprocess.Popen(ray_head.head_command(ports, cpus, gpus, temp_dir, node_ip=node_ip, block=True), env=env)
        while head.poll() is None:
            if _answers(f"http://{node_ip}:{ports['dashboard']}", token):
                return head, ports, env
            time.sleep(0.5)
        ray_head.stop_processes(cluster_id, str(temp_dir))  # what the ended start left
        print(f"burst: `ray start` ended ({head.returncode}) before the head answered"
              + ("; trying once more on new ports" if attempt == 1 else ""), file=sys.stderr, flush=True)
    return head, ports, env


def start_idle_keeper(job_id: str, dashboard: str, token: Path, idle_minutes: float, head_alive) -> threading.Thread:
    """The keeper, in a thread of this process: after ``idle_minutes`` with no job it cancels this
    Slurm job (whose SIGTERM handler then stops Ray as on any cancel). Idle only on an answer."""
    from infra import keeper

    thread = threading.Thread(target=keeper.keep, name="burst-keeper", daemon=True,
                              kwargs={"end": lambda: keeper.end_slurm(job_id), "expires": None, "idle_minutes": idle_minutes,
                                      "activity": lambda: keeper.job_activity(dashboard, token.read_text().strip()), "alive": head_alive})
    keeper.say(f"keeping Slurm job {job_id}: cancelled after {idle_minutes:g} minute(s) with no job; its walltime is its lease")
    thread.start()
    return thread


def main(cluster_dir: Path, cluster_id: str, storage: str | None = None, grace_s: float = 0.0, idle_minutes: Optional[float] = None) -> int:
    from ..runtime import notice, scratch

    temp_dir = take_node(cluster_id)
    notices = notice.root(storage, cluster_id) if storage else None  # this allocation's, never another's on the same storage
    if notices:
        notice.clear(notices)  # a notice to a cluster of this id before (a restarted allocation) is not for this one
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    host = socket.gethostname()
    multi = nodes > 1
    node_ip = socket.gethostbyname(host) if multi else "127.0.0.1"
    cpus = int(os.environ.get("SLURM_CPUS_ON_NODE") or os.cpu_count() or 1)
    gpus = _gpus_here()
    token = cluster_dir / "auth_token"
    head_proc, ports, env = start_head(cluster_id, token, temp_dir, cpus, gpus, node_ip, multi)
    if head_proc.poll() is not None:
        remove_ray_dir(cluster_id)
        return head_proc.returncode or 1  # no head: `burst up` reports the job's end with its log's last line
    dashboard = f"http://{node_ip}:{ports['dashboard']}"  # the head's Jobs API (node_ip is loopback on one node)
    procs = [head_proc]
    if multi:
        # One Ray worker per other node; srun runs them as a step of this job, so Slurm tracks them.
        procs.append(subprocess.Popen(["srun", f"--nodes={nodes - 1}", "--ntasks-per-node=1", f"--exclude={host}", "--kill-on-bad-exit=1",
                                       sys.executable, "-m", "burst.targets.slurm_job", WORKER_FLAG, cluster_id,
                                       f"{node_ip}:{ports['GCS server']}"], env=env))

    def cleanup() -> None:
        ray_head.stop_processes(cluster_id, str(temp_dir))
        for p in procs:
            if p.poll() is None:
                p.kill()
        # The head's session logs and sockets: the node's /tmp is not burst's to fill (the other
        # nodes' remove theirs, `worker_node`). Removed before waiting on anything: Slurm
        # follows its SIGTERM with a SIGKILL after KillWait (30 s by default, 5 s in the tests).
        remove_ray_dir(cluster_id)
        scratch.sweep()  # its runs' processes are stopped: what they left
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    noticed = []

    def on_signal(signum, frame) -> None:
        if signum == signal.SIGTERM and notices and grace_s > 0 and not noticed:
            noticed.append(signum)  # a second signal (the walltime, scancel) cuts the wait short
            deadline = time.time() + grace_s
            posted = notice.write(notices, "stop", f"Slurm job {os.environ.get('SLURM_JOB_ID')} signalled (walltime near, or cancelled)")
            notice.wait_taken(notices, posted, grace_s, alive=lambda: procs[0].poll() is None)
            while time.time() < deadline and procs[0].poll() is None and _jobs_running(dashboard, token):
                time.sleep(0.5)  # the job publishes what it has and ends
            time.sleep(max(0.0, min(FOLLOWER_GRACE_S, deadline - time.time())))  # a follower's next look sees how it ended
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
    if idle_minutes and os.environ.get("SLURM_JOB_ID"):
        start_idle_keeper(os.environ["SLURM_JOB_ID"], dashboard, token, idle_minutes, head_alive=lambda: procs[0].poll() is None)
    code = procs[0].wait()  # `ray start --block` ends when the head does
    cleanup()
    return code


def worker_node(cluster_id: str, gcs_address: str) -> int:
    """One other node of a multi-node allocation (a task of its ``srun`` step): a Ray worker that
    joins the head, in a Ray directory this process holds the allocation lock beside. Cancelled, the
    step's tasks get SIGTERM and, after KillWait, SIGKILL: on SIGTERM the worker is stopped and its
    directory and the runs' scratch it served are removed here; after a SIGKILL the next
    allocation on this node removes them (``sweep_allocations``, ``scratch.sweep``), as on the head's."""
    from ..runtime import scratch

    temp_dir = take_node(cluster_id)
    started: list[subprocess.Popen] = []

    def cleanup() -> None:
        # this node's Ray only (its directory's): the head's processes carry the same marker
        ray_head.stop_processes(cluster_id, str(temp_dir), by_marker=False)
        for ray in started:
            if ray.poll() is None:
                ray.kill()
        remove_ray_dir(cluster_id)
        scratch.sweep()

    def on_signal(signum, frame) -> None:
        cleanup()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)  # before Ray starts: a cancel that comes first still cleans up
    signal.signal(signal.SIGINT, on_signal)
    started.append(subprocess.Popen([*ray_head.ray_command(), "start", f"--address={gcs_address}", "--block", f"--temp-dir={temp_dir}",
                                     "--disable-usage-stats"]))
    code = started[0].wait()  # `ray start --block` ends when this node's raylet does (the head gone, say)
    cleanup()
    return code


if __name__ == "__main__":
    if sys.argv[1] == WORKER_FLAG:
        sys.exit(worker_node(sys.argv[2], sys.argv[3]))
    sys.exit(main(Path(sys.argv[1]), sys.argv[2], *(sys.argv[3:4]), *(float(a) for a in sys.argv[4:6])))
