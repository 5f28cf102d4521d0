"""The local target: a Ray head on this machine, the embedded default "on-prem".

The head itself (ports, session directory, token, the marker that finds exactly this cluster's
processes) is ``burst.runtime.ray_head``'s, shared with the Slurm job; this module starts one,
waits for it, records its handle, and stops it and verifies that nothing is left.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import subprocess
import time
import uuid
from pathlib import Path

from typing import TYPE_CHECKING

from ..home import state
from ..errors import BurstError
from ..home.state import ClusterHandle
from ..runtime import ray_head, scratch
from ..client.jobs import JobRuntime
from ..runtime.ray_head import check_socket_room, choose_ports, cluster_processes, head_command, head_env, is_alive, new_token, stop_processes
from .base import QUIET, Lease, Reporter, Target

if TYPE_CHECKING:
    from ..values.placement import Placement

READY_TIMEOUT_S = 90.0


def detect_gpus() -> int:
    """NVIDIA GPUs on this machine (0 when there is no driver)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")) if out.returncode == 0 else 0


# Ray waits a fixed 30 s for a new raylet to register (ray/_private/node.py, no setting); on a
# machine whose cores are busy (a shared login node, two trainings beside it) it can miss that.
RAY_STARTUP_TIMED_OUT = "timed out during startup"


def up(name: str, cpus: int | None = None, gpus: int | None = None, hourly_usd: float = 0.0,
       storage_uri: str | None = None, hours: float | None = None,
       idle_minutes: float | None = None) -> tuple[ClusterHandle, bool]:
    """Start (or find) the local cluster ``name``; returns (handle, created). A start that Ray
    timed out on a busy machine (it left nothing running) is tried once more, on new ports."""
    try:
        return _up_once(name, cpus, gpus, hourly_usd, storage_uri, hours, idle_minutes)
    except BurstError as exc:
        if RAY_STARTUP_TIMED_OUT not in str(exc):
            raise
    return _up_once(name, cpus, gpus, hourly_usd, storage_uri, hours, idle_minutes)


def _up_once(name: str, cpus: int | None, gpus: int | None, hourly_usd: float, storage_uri: str | None,
             hours: float | None, idle_minutes: float | None) -> tuple[ClusterHandle, bool]:
    available = detect_gpus()
    if gpus is None:
        gpus = available
    elif gpus < 0 or gpus > available:
        raise BurstError(f"--gpus {gpus}: this machine has {available} NVIDIA GPU(s)")
    with state.locked():
        existing = state.load(ClusterHandle, name)
        if existing is not None:
            if existing.state == "running" and is_alive(existing):
                return existing, False
            if existing.state == "starting" and state.starter_alive(existing):
                raise BurstError(f"cluster {name!r} is starting, started by PID {existing.starter_pid}; wait for it to finish "
                                 f"(`burst status`), then run `burst up` again", exit_code=1)
            raise BurstError(f"cluster {name!r} is recorded but not answering (state {existing.state}); run `burst down {name}` first")
        cluster_id = uuid.uuid4().hex[:12]
        cdir = state.cluster_dir(name)
        token_path = cdir / "auth_token"
        new_token(token_path)
        temp_dir = ray_head.temp_dir_of(cluster_id)
        check_socket_room(temp_dir)
        temp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        storage = cdir / "storage"
        storage.mkdir(exist_ok=True)
        ncpu = cpus or os.cpu_count() or 1
        ports = choose_ports()
        gcs, dash = ports["GCS server"], ports["dashboard"]
        handle = ClusterHandle(
            name=name, provider="local", cluster_id=cluster_id, state="starting",
            dashboard_url=f"http://127.0.0.1:{dash}", gcs_address=f"127.0.0.1:{gcs}",
            token_path=str(token_path), temp_dir=str(temp_dir), storage_uri=storage_uri or str(storage),
            layout={"nodes": 1, "cpus": ncpu, "gpus": gpus}, hourly_usd=hourly_usd,
            starter_pid=os.getpid(), expires=time.time() + hours * 3600 if hours is not None else None,
        )
        state.save(handle)  # recorded before anything starts, so `down` can always clean up

    env = head_env(cluster_id, token_path, ports)
    cmd = head_command(ports, ncpu, gpus, temp_dir)
    started = time.time() - 1.0  # create_time has a coarse clock; a holder is older than this by far
    # `ray start` writes to a file, never to pipes this process holds: in a session of its own it
    # outlives a starter that dies (a managed run's controller killed in the middle of a move), and
    # the next controller adopts the head it brings up. Through pipes, the starter's death broke
    # them and `ray start` died with its head half started (measured: the adopting controller
    # waited 90 s for nothing, took the cluster down and spent one more attempt).
    # (beside the cluster's record, not in Ray's temp dir: a process holding a file open there is
    # taken for one of the cluster's, and `burst down` of a starting cluster would stop this one)
    output = cdir / "ray-start.log"
    try:
        with open(output, "w", opener=lambda path, flags: os.open(path, flags, 0o600)) as out:
            proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=180,
                                  start_new_session=True)
    except subprocess.TimeoutExpired:
        _cleanup_failed(handle)
        raise BurstError(f"`ray start` did not finish within 180 s; cluster {name!r} was cleaned up", exit_code=1) from None
    if proc.returncode != 0:
        why = _taken_by_others(ports, started) or _ray_start_failure(output.read_text(errors="replace"))
        _cleanup_failed(handle)
        raise BurstError(f"`ray start` failed for cluster {name!r}: {why}; "
                         f"nothing was left running", exit_code=1)
    os.chmod(temp_dir, 0o700)  # Ray makes its session dir world-writable; it holds our sockets
    deadline = time.time() + READY_TIMEOUT_S
    while not is_alive(handle):
        taken = _taken_by_others(ports, started)
        if _stopped_meanwhile(handle) or taken or time.time() > deadline:
            _cleanup_failed(handle)
            if taken:
                raise BurstError(f"`ray start` failed for cluster {name!r}: {taken}; nothing was left running", exit_code=1)
            raise BurstError(f"the Ray dashboard of {name!r} (127.0.0.1:{dash}) did not answer within {READY_TIMEOUT_S:.0f} s; "
                             f"nothing was left running", exit_code=1)
        time.sleep(0.3)
    keeper = start_keeper(handle, env, idle_minutes) if handle.expires is not None or idle_minutes is not None else None
    with state.locked():
        if not _stopped_meanwhile(handle):
            handle.state = "running"
            handle.pids = [p.pid for p in cluster_processes(cluster_id, str(temp_dir))]
            if keeper is not None:
                handle.outputs["keeper_pid"] = keeper
            state.save(handle)
            return handle, True
    _cleanup_failed(handle)
    raise AssertionError("unreachable: _cleanup_failed raises for a cluster stopped meanwhile")


def _stopped_meanwhile(handle: ClusterHandle) -> bool:
    """True when `burst down` (another process) took this starting cluster away: its record is
    gone, belongs to another cluster of the same name, or says stopping."""
    try:
        current = state.load(ClusterHandle, handle.name)
    except BurstError:
        return False
    return current is None or current.cluster_id != handle.cluster_id or current.state == "stopping"


_EXCEPTION_PREFIX = re.compile(r"^[\w.]*(Error|Exception): ")


def _ray_start_failure(output: str) -> str:
    """The error `ray start` ended with, as one line: its exception's message when it raised one,
    without the "Please check <log>" hint (the session dir holding that log is removed with the
    failed cluster); otherwise its last line."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    raised = [line for line in lines if _EXCEPTION_PREFIX.match(line)]
    found = raised[-1] if raised else (lines[-1] if lines else "no output")
    message = _EXCEPTION_PREFIX.sub("", found)
    message = re.split(r"\.?\s*(Please check |Last \d+ lines of error files|You can use )", message)[0].rstrip(" .") or found
    if re.search(r"occupied|in use", message):  # a port taken between burst's choice and Ray's bind
        message += "; run `burst up` again (it picks new ports)"
    return message


def _taken_by_others(ports: dict[str, int], since: float) -> str | None:
    """A port burst chose for this cluster on which a process older than this `ray start`
    (``since``) listens, in burst's words; None otherwise. Ray does not always fail when it cannot
    bind (the dashboard just never answers), so `up` looks for itself instead of waiting it out.
    Every process of the cluster is younger than ``since``, so none of them is mistaken for the
    holder."""
    import psutil

    try:
        listeners = {c.laddr.port: c.pid for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
    except psutil.Error:
        return None
    for role, port in ports.items():
        if port not in listeners:
            continue
        pid = listeners[port]
        try:
            older = pid is None or psutil.Process(pid).create_time() < since
        except psutil.Error:
            continue
        if older:
            holder = f"PID {pid}" if pid else "a process of another user"
            return f"port {port} (Ray's {role}) is taken by {holder}; run `burst up` again (it picks new ports)"
    return None


def start_keeper(handle: ClusterHandle, env: dict, idle_minutes: float | None) -> int:
    """The cluster's keeper (``burst.runtime.keeper``), one of the cluster's own processes (its
    marker): it ends the cluster at its lease's end or when idle, and `down` stops it with the rest."""
    from ..runtime import notice

    log = Path(handle.temp_dir) / "keeper.log"
    args = [sys.executable, "-m", "burst.runtime.keeper", "--end", "local", "--cluster-id", handle.cluster_id, "--temp-dir", str(handle.temp_dir),
            "--dashboard", str(handle.dashboard_url), "--token-file", str(handle.token_path),
            "--notices", notice.root(handle.storage_uri, handle.cluster_id)]
    if handle.expires is not None:
        args += ["--expires", str(handle.expires)]
    if idle_minutes is not None:
        args += ["--idle-minutes", str(idle_minutes)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(handle.temp_dir))
    return proc.pid


HEAD_PROCESSES = ("gcs_server", "raylet")  # a local cluster's head: without either, nothing of it takes or runs a job


def head_recorded_running(handle: ClusterHandle) -> bool:
    """Whether a gcs_server and a raylet are among the cluster's processes recorded at its start
    (``handle.pids``): a look at a few processes, cheap enough for every look of a controller.
    True when none is recorded (nothing to tell by)."""
    if not handle.pids:
        return True
    names = _names(handle.pids)
    return all(name in names for name in HEAD_PROCESSES)


def _names(procs) -> set[str]:
    """The names of those of ``procs`` (processes, or their ids) still there to be asked."""
    import psutil

    names = set()
    for proc in procs:
        try:
            names.add((psutil.Process(proc) if isinstance(proc, int) else proc).name())
        except psutil.Error:
            continue
    return names


def head_missing(handle: ClusterHandle) -> str | None:
    """What of the cluster's head is gone from this machine, in words ("its head's gcs_server is
    gone on this machine"), or None while both its processes are there."""
    procs = cluster_processes(handle.cluster_id, handle.temp_dir)
    if not procs:
        return "none of its processes is left on this machine"
    names = _names(procs)
    missing = [name for name in HEAD_PROCESSES if name not in names]
    return f"its head's {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} gone on this machine" if missing else None


def keeper_ended(handle: ClusterHandle) -> str | None:
    """Why the cluster's keeper ended it (its log's word), or None."""
    path = Path(handle.temp_dir or "/nonexistent") / "keeper.log"
    lines = path.read_text().splitlines() if path.exists() else []
    ended = [line.split("cluster ended: ", 1)[1] for line in lines if "cluster ended: " in line]
    return ended[-1] if ended else None


def _cleanup_failed(handle: ClusterHandle) -> None:
    """Stop whatever a failed or interrupted `up` started and forget the cluster, unless the record
    now belongs to someone else (a `down` already forgot it; a new `up` of the same name).
    Raises when the cause was a `burst down` from another process: that, not Ray's own failure,
    is what the user needs to read."""
    stopped_by_down = _stopped_meanwhile(handle)
    stop_processes(handle.cluster_id, handle.temp_dir)
    with state.locked():
        current = state.load(ClusterHandle, handle.name)
        if current is None or current.cluster_id == handle.cluster_id:
            _forget(handle)
        elif handle.temp_dir:
            shutil.rmtree(handle.temp_dir, ignore_errors=True)
    if stopped_by_down:
        raise BurstError(f"cluster {handle.name!r} was stopped by `burst down` while it was starting; nothing was left running", exit_code=1)


def _forget(handle: ClusterHandle) -> None:
    state.delete(ClusterHandle, handle.name)
    if handle.temp_dir:
        shutil.rmtree(handle.temp_dir, ignore_errors=True)
    token = state.own_token(handle)  # never a file a hand edit named
    if token is not None:
        token.unlink(missing_ok=True)


def down(handle: ClusterHandle) -> None:
    """Stop exactly this cluster's processes, verify none is left, forget the handle."""
    with state.locked():
        handle.state = "stopping"
        state.save(handle)
    survivors = stop_processes(handle.cluster_id, handle.temp_dir)
    if survivors:
        raise BurstError(f"cluster {handle.name!r}: processes {survivors} did not stop; kill them and run `burst down {handle.name}` again", exit_code=1)
    scratch.sweep()  # what its runs' killed processes left on this machine
    with state.locked():
        _forget(handle)


class LocalTarget(Target):
    """This machine: the embedded default, and what tests and notebooks run on."""

    provider = "local"
    kind = "local"
    takes_storage = True

    def up(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> tuple[ClusterHandle, bool]:
        handle, created = up(name, cpus=placement.count, gpus=placement.gpus, hourly_usd=placement.hourly_usd,
                             storage_uri=placement.storage, hours=lease.hours, idle_minutes=lease.idle_minutes)
        if created and handle.outputs.get("keeper_pid"):
            what = ([f"at its lease's end ({time.strftime('%Y-%m-%d %H:%M', time.localtime(handle.expires))})"] if handle.expires else []) + \
                   ([f"after {lease.idle_minutes:g} idle minute(s)"] if lease.idle_minutes is not None else [])
            report.say(f"cluster {name} ends itself {' or '.join(what)}: its keeper (PID {handle.outputs['keeper_pid']}) runs beside "
                       f"the Ray head, whatever this CLI or its controller do")
        return handle, created

    def down(self, handle: ClusterHandle, report: Reporter = QUIET) -> None:
        down(handle)

    def job_runtime(self, handle: ClusterHandle) -> JobRuntime:
        """This machine's Python; nothing drains this machine's one node."""
        return JobRuntime(nodes_drain=False)

    def is_alive(self, handle: ClusterHandle, timeout: float = 2.0) -> bool:
        """Its dashboard answers, and its head's GCS and raylet are among the processes recorded at
        its start (a dashboard outlives a killed GCS by a minute, answering as if nothing happened)."""
        return head_recorded_running(handle) and is_alive(handle, timeout=timeout)

    def is_gone(self, handle: ClusterHandle) -> bool:
        """A running cluster whose head is gone from this machine: none of its processes left (a
        killed head, its keeper's end), or its GCS or raylet gone while the rest lingers (a local
        cluster keeps no GCS state to come back from: without them no job of it runs again)."""
        return handle.state == "running" and head_missing(handle) is not None

    def kept_job_log(self, handle: ClusterHandle, job_id: str) -> Path | None:
        """Ray's job driver log, in the cluster's session directory on this machine: it outlives a killed head."""
        import glob

        root = Path(handle.temp_dir or ray_head.temp_dir_of(handle.cluster_id))
        found = [Path(p) for p in glob.glob(str(root / "session_*" / "logs" / f"job-driver-{glob.escape(job_id)}.log"))]
        return max(found, key=lambda p: p.stat().st_mtime) if found else None

    def metrics_discovery(self, handle: ClusterHandle) -> Path:
        """Ray writes it into the cluster's temp dir, on this machine (its metrics ports: this machine's loopback)."""
        return Path(handle.temp_dir or ray_head.temp_dir_of(handle.cluster_id)) / "prom_metrics_service_discovery.json"

    def adopt(self, handle: ClusterHandle, report: Reporter = QUIET) -> ClusterHandle | None:
        """`ray start` runs in a session of its own: a head whose starter died may still come up."""
        deadline = time.time() + READY_TIMEOUT_S
        while not is_alive(handle):
            if time.time() > deadline:
                return None
            time.sleep(1.0)
        with state.locked():
            current = state.load(ClusterHandle, handle.name)
            if current is None or current.cluster_id != handle.cluster_id:
                return None
            current.state = "running"
            current.pids = [p.pid for p in cluster_processes(handle.cluster_id, handle.temp_dir)]
            state.save(current)
        return current

    def stopped_reason(self, handle: ClusterHandle) -> str:
        ended = keeper_ended(handle)
        if ended:
            return f"its keeper ended it: {ended}"
        return head_missing(handle) or super().stopped_reason(handle)

    def describe_state(self, handle: ClusterHandle) -> str:
        shown, ended = super().describe_state(handle), keeper_ended(handle)
        return f"ended by its keeper: {ended}" if shown == "unreachable" and ended else shown
