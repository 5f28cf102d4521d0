"""The Ray head burst starts, on this machine (the local target) or inside an allocation (the
Slurm job), and how to reach it: free ports for every role Ray opens, a short user-only session
directory, token authentication, the marker by which exactly one cluster's processes are found
and stopped, and the authenticated dashboard check.

Every port is chosen free and bound to 127.0.0.1 where Ray allows it, the session lives in its
own short, user-only runtime directory (Ray's Unix sockets live under it and a socket path is
capped at 107 bytes, so it cannot live under a state directory of any length), and Ray's token
authentication is on with a token file readable by the user only. Each process of the cluster
inherits ``BURST_CLUSTER_ID`` in its environment, which with the runtime directory and the
process tree is how a cluster's processes are found (never ``ray stop``, which would stop every
Ray of this user on the machine).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from ..errors import BurstError
from ..home.state import ClusterHandle

MARKER = "BURST_CLUSTER_ID"
SOCKET_PATH_MAX = 107  # bytes in a Unix socket path (sun_path holds 108 with the terminating NUL)


# Every port Ray listens on, chosen per cluster so that no other Ray (a leftover, another user's)
# can collide with a fixed default; the names are how errors refer to them.
PORT_ROLES = ("GCS server", "dashboard", "client server", "dashboard agent (HTTP)", "dashboard agent (gRPC)",
              "metrics exporter", "runtime-env agent", "node manager", "object manager",
              "dashboard metrics", "autoscaler metrics")
# The longest socket Ray creates under its temp dir: session dir (timestamp, microseconds, pid) + socket.
LONGEST_RAY_SOCKET = "/session_2026-11-23_02-46-37_123456_4194304/sockets/plasma_store"
# Ray's dashboard starts its modules through a multiprocessing forkserver, whose socket is made in TMPDIR
FORKSERVER_SOCKET = "/pymp-abcdefgh/listener-abcdefgh"


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


def cluster_processes(cluster_id: str, temp_dir: str | None = None, by_marker: bool = True) -> list:
    """psutil processes of this cluster: those whose environment carries its marker or that hold
    files open under its temp dir, and every descendant of those. ``by_marker=False``: only those
    of this temp dir (one node's share of a cluster whose other nodes may share this machine).

    The marker alone is not enough: Ray starts some children (its agents, the dashboard's
    forkserver modules) with an environment of their own, and a child whose parent died is
    re-parented away from the tree, so both the temp dir and the tree are looked at.
    """
    import psutil

    temp_dir = str(temp_dir or temp_dir_of(cluster_id))
    roots: dict[int, psutil.Process] = {}
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            if by_marker and _has_marker(proc.pid, cluster_id):
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
    from .scratch import private_dir

    return private_dir(root)


def temp_dir_of(cluster_id: str) -> Path:
    """Ray's session directory of a local cluster."""
    return runtime_root() / cluster_id


def check_socket_room(temp_dir: Path, tmp: str | None = None) -> None:
    """Fail in one line, before starting anything, when Ray's sockets would not fit in a path:
    those in its session directory, and its dashboard's forkserver socket in TMPDIR."""
    longest = f"{temp_dir}{LONGEST_RAY_SOCKET}"
    if len(longest.encode()) > SOCKET_PATH_MAX:
        raise BurstError(f"Ray's socket path {longest} would be {len(longest.encode())} bytes, over the {SOCKET_PATH_MAX}-byte limit of "
                         f"Unix sockets; set XDG_RUNTIME_DIR to a shorter directory of yours", exit_code=1)
    tmp = tmp or tempfile.gettempdir()
    forkserver = f"{tmp}{FORKSERVER_SOCKET}"
    if len(forkserver.encode()) > SOCKET_PATH_MAX:
        room = SOCKET_PATH_MAX - len(FORKSERVER_SOCKET)
        raise BurstError(f"TMPDIR ({tmp}) is too long: Ray's dashboard makes a Unix socket under it "
                         f"({len(forkserver.encode())} bytes, over the {SOCKET_PATH_MAX}-byte limit); set TMPDIR to a directory of at most "
                         f"{room} bytes", exit_code=1)


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


def head_env(cluster_id: str, token_path: Path | str, ports: dict[str, int], loopback: bool = True, node_ip: str = "127.0.0.1") -> dict[str, str]:
    """The environment of a burst Ray head: its marker, token authentication, no usage stats, and
    its own address for every process of it.

    ``RAY_ADDRESS`` is this cluster's GCS: Ray code that looks for "the" cluster without being told
    (the state API, which Ray Train's placement-group cleaner asks every second whether the run's
    controller is alive) otherwise takes any ``gcs_server`` on the machine, or the last cluster
    ``/tmp/ray`` remembers. With a second Ray on the machine (another user's on a login node, a
    second burst cluster) the cleaner asked the wrong cluster, found no controller, and removed the
    run's placement group, killing its workers: the run failed with "The actor died unexpectedly".

    ``RAY_prestart_worker_first_driver=0``: Ray starts a worker per CPU for the first driver that
    connects, which on a burst head is the dashboard's job manager; a worker serves one job, so the
    training job's actors start their own and those wait idle for nothing (about 1.4 CPU-seconds a
    cluster, measured side by side with ``benchmarks/run_cpu.py``)."""
    env = dict(os.environ)
    env.update({MARKER: cluster_id, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path),
                "RAY_USAGE_STATS_ENABLED": "0", "TF_CPP_MIN_LOG_LEVEL": "2", "RAY_prestart_worker_first_driver": "0",
                # two metrics ports that `ray start` has no flag for (fixed 44227 and 44217 otherwise)
                "DASHBOARD_METRIC_PORT": str(ports["dashboard metrics"]), "AUTOSCALER_METRIC_PORT": str(ports["autoscaler metrics"])})
    if loopback:
        # `ray start` replaces a loopback --node-ip-address with the machine's address
        # (services.resolve_ip_for_localhost) unless multi-node clusters are off, which is
        # what Ray does on macOS and Windows: then every component binds 127.0.0.1.
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    env["RAY_ADDRESS"] = f"{node_ip}:{ports['GCS server']}"  # never a RAY_ADDRESS of the user's
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


def _signal_and_wait(procs: list, method: str, timeout: float) -> list:
    """Call ``terminate`` or ``kill`` on each process; return those still alive after ``timeout``."""
    import psutil

    for p in procs:
        try:
            getattr(p, method)()
        except psutil.Error:
            pass
    return psutil.wait_procs(procs, timeout=timeout)[1]


def stop_processes(cluster_id: str, temp_dir: str | None = None, grace_s: float = 0.5, spare: int | None = None,
                   by_marker: bool = True) -> list[int]:
    """SIGTERM every process of the cluster (all found before any signal), give Ray's own daemons
    (those carrying the marker) ``grace_s`` to shut down, then SIGKILL whatever is left: Ray's
    agents ignore SIGTERM, so waiting on them would only spend the whole grace period. GCS and
    raylet take ~10 s to honour SIGTERM, and a local cluster keeps nothing that needs a clean
    shutdown (results are collected before `down`), so the grace is short. Measured on a local
    cluster of Ray 2.60 (2-core EPYC): every process that honours SIGTERM is gone within 0.25 s; GCS,
    raylet and the dashboard were still there after 5 s (a 3 s grace cost every `down` 3 s for nothing).
    Returns the pids that survived. ``spare``: a process of the cluster left running (the keeper
    that stops its own cluster); ``by_marker``: as ``cluster_processes``."""
    import psutil

    def found() -> list:
        return [p for p in cluster_processes(cluster_id, temp_dir, by_marker) if p.pid != spare]

    procs = found()
    forkservers = forkserver_dirs(procs)
    daemons = [p for p in procs if _has_marker(p.pid, cluster_id)]
    _signal_and_wait(procs, "terminate", 0)
    psutil.wait_procs(daemons, timeout=grace_s)
    _signal_and_wait([p for p in procs if p.is_running()], "kill", 5)
    # Workers forked while we were stopping: one more sweep.
    _signal_and_wait(found(), "kill", 5)
    for directory in forkservers:
        shutil.rmtree(directory, ignore_errors=True)
    return [p.pid for p in found()]


def forkserver_dirs(procs: list) -> list[Path]:
    """The directories of the multiprocessing forkserver sockets these processes listen on: Ray's
    dashboard starts its modules through a forkserver whose socket is ``$TMPDIR/pymp-*/listener-*``.
    Python removes it when the forkserver exits on its own; a killed one left one directory in the
    machine's TMPDIR for every cluster ever stopped (660 on this machine's /tmp on 2026-11-28)."""
    import psutil

    dirs = set()
    for proc in procs:
        try:
            if "multiprocessing.forkserver" not in " ".join(proc.cmdline()):
                continue
            for conn in proc.net_connections(kind="unix"):
                path = Path(conn.laddr) if isinstance(conn.laddr, str) and conn.laddr else None
                if path is not None and path.name.startswith("listener-") and path.parent.name.startswith("pymp-"):
                    dirs.add(path.parent)
        except (psutil.Error, OSError):
            continue
    return sorted(dirs)
