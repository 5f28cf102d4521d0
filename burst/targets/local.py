"""The local target: a Ray head on this machine, the embedded default "on-prem".

Every port is chosen free and bound to 127.0.0.1 where Ray allows it, the session lives in its
own temp dir under the state directory, and Ray's token authentication is on with a token file
readable by the user only. Each process of the cluster inherits ``BURST_CLUSTER_ID`` in its
environment, which is how ``down`` finds exactly this cluster's processes (never ``ray stop``,
which would stop every Ray of this user on the machine).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from .. import state
from ..errors import BurstError
from ..state import ClusterHandle

MARKER = "BURST_CLUSTER_ID"
READY_TIMEOUT_S = 90.0


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _ray_binary() -> str:
    candidate = Path(sys.executable).with_name("ray")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("ray")
    if not found:
        raise BurstError("the `ray` command is not installed; install burst with `pip install -e .` in this environment")
    return found


def detect_gpus() -> int:
    """NVIDIA GPUs on this machine (0 when there is no driver)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")) if out.returncode == 0 else 0


def auth_headers(handle: ClusterHandle) -> dict[str, str]:
    """HTTP headers for the Ray dashboard / Jobs API of a token-protected cluster.

    The token comes from the cluster's token file; an attached on-prem cluster without one may
    take it from ``RAY_AUTH_TOKEN``.
    """
    if not handle.token_path:
        token = os.environ.get("RAY_AUTH_TOKEN")
        return {"Authorization": f"Bearer {token}"} if token else {}
    try:
        token = Path(handle.token_path).read_text().strip()
    except OSError as exc:
        raise BurstError(f"cannot read the token of cluster {handle.name!r} ({exc}); run `burst down {handle.name}` and `burst up` again") from None
    return {"Authorization": f"Bearer {token}"}


def cluster_processes(cluster_id: str) -> list:
    """psutil processes of this cluster: those whose environment carries its marker or that hold
    files open under its temp dir, and every descendant of those.

    The marker alone is not enough: Ray starts some children (its agents, the dashboard's
    forkserver modules) with an environment of their own, and a child whose parent died is
    re-parented away from the tree, so both the temp dir and the tree are looked at.
    """
    import psutil

    needle = f"{MARKER}={cluster_id}".encode()
    temp_dir = str(_temp_dir(cluster_id))
    roots: dict[int, psutil.Process] = {}
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    roots[proc.pid] = proc
                    continue
            if any(f.path.startswith(temp_dir) for f in proc.open_files()):
                roots[proc.pid] = proc
        except (OSError, psutil.Error):
            continue
    found = dict(roots)
    for proc in roots.values():
        try:
            found.update((child.pid, child) for child in proc.children(recursive=True) if child.pid != me)
        except psutil.Error:
            continue
    return list(found.values())


def _temp_dir(cluster_id: str) -> Path:
    """Ray's session directory of a local cluster (short: Ray puts Unix sockets under it)."""
    return state.home() / "ray" / cluster_id


def is_alive(handle: ClusterHandle, timeout: float = 2.0) -> bool:
    """True when the cluster's dashboard answers an authenticated request."""
    import urllib.error
    import urllib.request

    if not handle.dashboard_url:
        return False
    req = urllib.request.Request(handle.dashboard_url + "/api/version", headers=auth_headers(handle))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError, BurstError):
        return False


def up(name: str, cpus: int | None = None, gpus: int | None = None, hourly_usd: float = 0.0,
       budget_usd: float | None = None, storage_uri: str | None = None) -> tuple[ClusterHandle, bool]:
    """Start (or find) the local cluster ``name``; returns (handle, created)."""
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
            raise BurstError(f"cluster {name!r} is recorded but not answering (state {existing.state}); run `burst down {name}` first")
        cluster_id = uuid.uuid4().hex[:12]
        cdir = state.home() / "clusters" / name
        cdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        token_path = cdir / "auth_token"
        token_path.unlink(missing_ok=True)
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
        temp_dir = _temp_dir(cluster_id)
        temp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        storage = cdir / "storage"
        storage.mkdir(exist_ok=True)
        ncpu = cpus or os.cpu_count() or 1
        gcs, dash, client, agent_http, agent_grpc, metrics, rt_env, node_mgr, obj_mgr = _free_ports(9)
        handle = ClusterHandle(
            name=name, provider="local", cluster_id=cluster_id, state="starting",
            dashboard_url=f"http://127.0.0.1:{dash}", gcs_address=f"127.0.0.1:{gcs}",
            token_path=str(token_path), temp_dir=str(temp_dir), storage_uri=storage_uri or str(storage),
            layout={"nodes": 1, "cpus": ncpu, "gpus": gpus}, hourly_usd=hourly_usd, budget_usd=budget_usd,
        )
        state.save(handle)  # recorded before anything starts, so `down` can always clean up

    env = dict(os.environ)
    env.update({MARKER: cluster_id, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path),
                "RAY_USAGE_STATS_ENABLED": "0", "TF_CPP_MIN_LOG_LEVEL": "2"})
    env.pop("RAY_ADDRESS", None)
    cmd = [
        _ray_binary(), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
        "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash), "--include-dashboard", "true",
        "--ray-client-server-port", str(client), "--dashboard-agent-listen-port", str(agent_http),
        "--dashboard-agent-grpc-port", str(agent_grpc), "--metrics-export-port", str(metrics),
        "--runtime-env-agent-port", str(rt_env), "--node-manager-port", str(node_mgr),
        "--object-manager-port", str(obj_mgr), "--num-cpus", str(ncpu), "--num-gpus", str(gpus),
        "--temp-dir", str(temp_dir), "--disable-usage-stats",
    ]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, start_new_session=True)
    except subprocess.TimeoutExpired:
        _cleanup_failed(handle)
        raise BurstError(f"`ray start` did not finish within 180 s; cluster {name!r} was cleaned up", exit_code=1) from None
    if proc.returncode != 0:
        _cleanup_failed(handle)
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BurstError(f"`ray start` failed for cluster {name!r}: {last[0]}", exit_code=1)
    deadline = time.time() + READY_TIMEOUT_S
    while not is_alive(handle):
        if time.time() > deadline:
            _cleanup_failed(handle)
            raise BurstError(f"the Ray dashboard of {name!r} did not answer within {READY_TIMEOUT_S:.0f} s; cleaned up", exit_code=1)
        time.sleep(0.3)
    with state.locked():
        handle.state = "running"
        handle.pids = [p.pid for p in cluster_processes(cluster_id)]
        state.save(handle)
    return handle, True


def _cleanup_failed(handle: ClusterHandle) -> None:
    stop_processes(handle.cluster_id)
    with state.locked():
        _forget(handle)


def _signal_and_wait(procs: list, method: str, timeout: float) -> list:
    """Call ``terminate`` or ``kill`` on each process; return those still alive after ``timeout``."""
    import psutil

    for p in procs:
        try:
            getattr(p, method)()
        except psutil.Error:
            pass
    return psutil.wait_procs(procs, timeout=timeout)[1]


def stop_processes(cluster_id: str, grace_s: float = 3.0) -> list[int]:
    """SIGTERM every process of the cluster (all found before any signal), give Ray's own daemons
    (those carrying the marker) ``grace_s`` to shut down, then SIGKILL whatever is left: Ray's
    agents ignore SIGTERM, so waiting on them would only spend the whole grace period. GCS and
    raylet take ~10 s to honour SIGTERM, and a local cluster keeps nothing that needs a clean
    shutdown (results are collected before `down`), so the grace is short.
    Returns the pids that survived."""
    import psutil

    procs = cluster_processes(cluster_id)
    needle = f"{MARKER}={cluster_id}".encode()

    def marked(p) -> bool:
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as fh:
                return needle in fh.read().split(b"\0")
        except OSError:
            return False

    daemons = [p for p in procs if marked(p)]
    _signal_and_wait(procs, "terminate", 0)
    psutil.wait_procs(daemons, timeout=grace_s)
    _signal_and_wait([p for p in procs if p.is_running()], "kill", 5)
    # Workers forked while we were stopping: one more sweep.
    _signal_and_wait(cluster_processes(cluster_id), "kill", 5)
    return [p.pid for p in cluster_processes(cluster_id)]


def _forget(handle: ClusterHandle) -> None:
    state.delete(ClusterHandle, handle.name)
    if handle.temp_dir:
        shutil.rmtree(handle.temp_dir, ignore_errors=True)
    if handle.token_path:
        Path(handle.token_path).unlink(missing_ok=True)


def down(handle: ClusterHandle) -> None:
    """Stop exactly this cluster's processes, verify none is left, forget the handle."""
    with state.locked():
        handle.state = "stopping"
        state.save(handle)
    survivors = stop_processes(handle.cluster_id)
    if survivors:
        raise BurstError(f"cluster {handle.name!r}: processes {survivors} did not stop; kill them and run `burst down {handle.name}` again", exit_code=1)
    with state.locked():
        _forget(handle)
