"""The local target: a Ray head on this machine, the embedded default "on-prem".

Every port is chosen free and bound to 127.0.0.1 where Ray allows it, the session lives in its
own short, user-only runtime directory (Ray's Unix sockets live under it and a socket path is
capped at 107 bytes, so it cannot live under a state directory of any length), and Ray's token
authentication is on with a token file readable by the user only. Each process of the cluster
inherits ``BURST_CLUSTER_ID`` in its environment, which with the runtime directory and the
process tree is how ``down`` finds exactly this cluster's processes (never ``ray stop``, which
would stop every Ray of this user on the machine).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from typing import TYPE_CHECKING

from .. import state
from ..errors import BurstError
from ..state import ClusterHandle
from .base import QUIET, Lease, Reporter, Target

if TYPE_CHECKING:
    from ..placement.planner import Placement

MARKER = "BURST_CLUSTER_ID"
READY_TIMEOUT_S = 90.0
SOCKET_PATH_MAX = 107  # bytes in a Unix socket path (sun_path holds 108 with the terminating NUL)
# Every port Ray listens on, chosen per cluster so that no other Ray (a leftover, another user's)
# can collide with a fixed default; the names are how errors refer to them.
PORT_ROLES = ("GCS server", "dashboard", "client server", "dashboard agent (HTTP)", "dashboard agent (gRPC)",
              "metrics exporter", "runtime-env agent", "node manager", "object manager",
              "dashboard metrics", "autoscaler metrics")
# The longest socket Ray creates under its temp dir: session dir (timestamp, microseconds, pid) + socket.
LONGEST_RAY_SOCKET = "/session_2026-11-23_02-46-37_123456_4194304/sockets/plasma_store"


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


def free_port() -> int:
    """One port free on this machine's loopback now."""
    return _free_ports(1)[0]


def ray_command() -> list[str]:
    """The ``ray`` CLI of this interpreter: ``python -m ray.scripts.scripts``, not the ``ray``
    script, whose shebang names the path the venv was created at (a venv copied elsewhere, into a
    container image or to a site, would start Ray, and every Ray worker, with another Python)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise BurstError("Ray is not installed in this environment; install burst with `pip install -e .` here")
    return [sys.executable, "-m", "ray.scripts.scripts"]


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


def cluster_processes(cluster_id: str, temp_dir: str | None = None) -> list:
    """psutil processes of this cluster: those whose environment carries its marker or that hold
    files open under its temp dir, and every descendant of those.

    The marker alone is not enough: Ray starts some children (its agents, the dashboard's
    forkserver modules) with an environment of their own, and a child whose parent died is
    re-parented away from the tree, so both the temp dir and the tree are looked at.
    """
    import psutil

    temp_dir = str(temp_dir or _temp_dir(cluster_id))
    roots: dict[int, psutil.Process] = {}
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            if _has_marker(proc.pid, cluster_id):
                roots[proc.pid] = proc
                continue
            if any(f.path.startswith(temp_dir + os.sep) for f in proc.open_files()):
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


def _has_marker(pid: int, cluster_id: str) -> bool:
    """Whether the process's environment carries this cluster's marker (False once it is gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return f"{MARKER}={cluster_id}".encode() in fh.read().split(b"\0")
    except OSError:
        return False


def runtime_root() -> Path:
    """A short directory private to this user for Ray sessions: ``$XDG_RUNTIME_DIR/burst`` or
    ``/tmp/burst-<uid>`` (not TMPDIR, which may be long), created mode 0700 and checked."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg) and os.access(xdg, os.W_OK):
        root = Path(xdg) / "burst"
    else:
        root = Path("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()) / f"burst-{os.getuid()}"
    from ..runtime.scratch import private_dir

    return private_dir(root)


def _temp_dir(cluster_id: str) -> Path:
    """Ray's session directory of a local cluster."""
    return runtime_root() / cluster_id


def check_socket_room(temp_dir: Path) -> None:
    """Fail in one line, before starting anything, when Ray's sockets would not fit in a path."""
    longest = f"{temp_dir}{LONGEST_RAY_SOCKET}"
    if len(longest.encode()) > SOCKET_PATH_MAX:
        raise BurstError(f"Ray's socket path {longest} would be {len(longest.encode())} bytes, over the {SOCKET_PATH_MAX}-byte limit of "
                         f"Unix sockets; set XDG_RUNTIME_DIR to a shorter directory of yours", exit_code=1)


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


def choose_ports() -> dict[str, int]:
    """A free port on this machine for each of Ray's roles."""
    return dict(zip(PORT_ROLES, _free_ports(len(PORT_ROLES))))


def head_env(cluster_id: str, token_path: Path | str, ports: dict[str, int], loopback: bool = True) -> dict[str, str]:
    """The environment of a burst Ray head: its marker, token authentication, no usage stats."""
    env = dict(os.environ)
    env.update({MARKER: cluster_id, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path),
                "RAY_USAGE_STATS_ENABLED": "0", "TF_CPP_MIN_LOG_LEVEL": "2",
                # two metrics ports that `ray start` has no flag for (fixed 44227 and 44217 otherwise)
                "DASHBOARD_METRIC_PORT": str(ports["dashboard metrics"]), "AUTOSCALER_METRIC_PORT": str(ports["autoscaler metrics"])})
    if loopback:
        # `ray start` replaces a loopback --node-ip-address with the machine's address
        # (services.resolve_ip_for_localhost) unless multi-node clusters are off, which is
        # what Ray does on macOS and Windows: then every component binds 127.0.0.1.
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    env.pop("RAY_ADDRESS", None)
    return env


def head_command(ports: dict[str, int], cpus: int, gpus: int, temp_dir: Path | str, node_ip: str = "127.0.0.1",
                 block: bool = False) -> list[str]:
    """``ray start --head`` on the chosen ports, the dashboard on this node's loopback only."""
    p = ports
    return [
        *ray_command(), "start", "--head", "--node-ip-address", node_ip, "--port", str(p["GCS server"]),
        "--dashboard-host", "127.0.0.1", "--dashboard-port", str(p["dashboard"]), "--include-dashboard", "true",
        "--ray-client-server-port", str(p["client server"]), "--dashboard-agent-listen-port", str(p["dashboard agent (HTTP)"]),
        "--dashboard-agent-grpc-port", str(p["dashboard agent (gRPC)"]), "--metrics-export-port", str(p["metrics exporter"]),
        "--runtime-env-agent-port", str(p["runtime-env agent"]), "--node-manager-port", str(p["node manager"]),
        "--object-manager-port", str(p["object manager"]), "--num-cpus", str(cpus), "--num-gpus", str(gpus),
        "--temp-dir", str(temp_dir), "--disable-usage-stats", *(["--block"] if block else []),
    ]


def new_token(path: Path) -> None:
    """A fresh Ray auth token, readable by the user only."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32))


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
            if existing.state == "starting" and state.starter_alive(existing):
                raise BurstError(f"cluster {name!r} is starting, started by PID {existing.starter_pid}; wait for it to finish "
                                 f"(`burst status`), then run `burst up` again", exit_code=1)
            raise BurstError(f"cluster {name!r} is recorded but not answering (state {existing.state}); run `burst down {name}` first")
        cluster_id = uuid.uuid4().hex[:12]
        cdir = state.cluster_dir(name)
        token_path = cdir / "auth_token"
        new_token(token_path)
        temp_dir = _temp_dir(cluster_id)
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
            layout={"nodes": 1, "cpus": ncpu, "gpus": gpus}, hourly_usd=hourly_usd, budget_usd=budget_usd,
            starter_pid=os.getpid(),
        )
        state.save(handle)  # recorded before anything starts, so `down` can always clean up

    env = head_env(cluster_id, token_path, ports)
    cmd = head_command(ports, ncpu, gpus, temp_dir)
    started = time.time() - 1.0  # create_time has a coarse clock; a holder is older than this by far
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, start_new_session=True)
    except subprocess.TimeoutExpired:
        _cleanup_failed(handle)
        raise BurstError(f"`ray start` did not finish within 180 s; cluster {name!r} was cleaned up", exit_code=1) from None
    if proc.returncode != 0:
        why = _taken_by_others(ports, started) or _ray_start_failure(proc.stderr or proc.stdout)
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
    with state.locked():
        if not _stopped_meanwhile(handle):
            handle.state = "running"
            handle.pids = [p.pid for p in cluster_processes(cluster_id, str(temp_dir))]
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


def _signal_and_wait(procs: list, method: str, timeout: float) -> list:
    """Call ``terminate`` or ``kill`` on each process; return those still alive after ``timeout``."""
    import psutil

    for p in procs:
        try:
            getattr(p, method)()
        except psutil.Error:
            pass
    return psutil.wait_procs(procs, timeout=timeout)[1]


def stop_processes(cluster_id: str, temp_dir: str | None = None, grace_s: float = 3.0) -> list[int]:
    """SIGTERM every process of the cluster (all found before any signal), give Ray's own daemons
    (those carrying the marker) ``grace_s`` to shut down, then SIGKILL whatever is left: Ray's
    agents ignore SIGTERM, so waiting on them would only spend the whole grace period. GCS and
    raylet take ~10 s to honour SIGTERM, and a local cluster keeps nothing that needs a clean
    shutdown (results are collected before `down`), so the grace is short.
    Returns the pids that survived."""
    import psutil

    procs = cluster_processes(cluster_id, temp_dir)
    daemons = [p for p in procs if _has_marker(p.pid, cluster_id)]
    _signal_and_wait(procs, "terminate", 0)
    psutil.wait_procs(daemons, timeout=grace_s)
    _signal_and_wait([p for p in procs if p.is_running()], "kill", 5)
    # Workers forked while we were stopping: one more sweep.
    _signal_and_wait(cluster_processes(cluster_id, temp_dir), "kill", 5)
    return [p.pid for p in cluster_processes(cluster_id, temp_dir)]


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
    survivors = stop_processes(handle.cluster_id, handle.temp_dir)
    if survivors:
        raise BurstError(f"cluster {handle.name!r}: processes {survivors} did not stop; kill them and run `burst down {handle.name}` again", exit_code=1)
    with state.locked():
        _forget(handle)


class LocalTarget(Target):
    """This machine: the embedded default, and what tests and notebooks run on."""

    provider = "local"
    kind = "local"
    takes_storage = True

    def up(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> tuple[ClusterHandle, bool]:
        return up(name, cpus=placement.count, gpus=placement.gpus, hourly_usd=placement.hourly_usd, budget_usd=lease.budget_usd,
                  storage_uri=placement.storage)

    def down(self, handle: ClusterHandle, report: Reporter = QUIET) -> None:
        down(handle)

    def is_alive(self, handle: ClusterHandle, timeout: float = 2.0) -> bool:
        return is_alive(handle, timeout=timeout)
