"""`burst monitor CLUSTER`: a real Prometheus scraping a cluster's Ray metrics, for those who run
Prometheus and Grafana.

Ray keeps a Prometheus service-discovery file on its head listing every node's metrics endpoint
(Ray's "Collecting and monitoring metrics" guide: ``prom_metrics_service_discovery.json`` in its
temp dir); the target says where that file is readable from this machine, or that the cluster's
dashboard, which answers here, is to be asked for its nodes instead (an on-prem Ray cluster, a
Slurm head on the site's network): then burst writes the file from the dashboard's node list, once
(``burst monitor`` again renews it after the cluster changed). A cluster reached only through a
tunnel (a Kubernetes head through `kubectl port-forward`, a TPU host or a Slurm node through ssh)
gets the same node list through the tunnel burst opens for one command, a metrics relay on its
head (``burst.runtime.metrics_relay``, a forward proxy for its nodes' metrics pages only) and a
tunnel of its own to that relay, held beside Prometheus, which scrapes every node through it
(``proxy_url``). Prometheus (Debian's
``prometheus`` package, or any 2.x binary on PATH) is started with that file as its only scrape
source, listening on this machine's loopback only, its data under ``~/.burst/monitor/<cluster>``.
It runs with the cluster's process marker in its environment, so whatever takes the cluster down
(``burst down``, an idle stop, a lease's end) stops it too. Grafana dashboards are written beside
it: Ray's own (generated in the cluster's session directory) and burst's (``burst/monitoring``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from pydantic import BaseModel

from .errors import BurstError
from .home.state import ClusterHandle

if TYPE_CHECKING:
    from .targets.base import Target

SCRAPE_INTERVAL_S = 5
READY_TIMEOUT_S = 60.0
BURST_DASHBOARD = Path(__file__).resolve().parent / "monitoring" / "burst_grafana_dashboard.json"


class Monitor(BaseModel):
    """A running Prometheus for one cluster: where it answers and what it keeps."""

    cluster: str
    pid: int
    url: str
    directory: str
    dashboards: list[str] = []
    forward_pid: Optional[int] = None  # the tunnel to the head's metrics relay, for a cluster reached through one
    relay_url: Optional[str] = None    # that relay, as Prometheus reaches it (its scrapes' proxy)
    # when each process started (psutil's create_time): a pid the system gave to another process since is never stopped
    started: Optional[float] = None
    forward_started: Optional[float] = None


def directory(cluster: str, home: Optional[Path] = None) -> Path:
    """Where the cluster's Prometheus keeps its record and data: in ``home`` (a burst server reads a
    member's), else this process's state directory."""
    from .home import state

    return (home or state.home_path()) / "monitor" / cluster


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise BurstError("Prometheus is not installed: install Debian's `prometheus` package (apt-get install prometheus) "
                         "or put a Prometheus 2.x binary on PATH, then run `burst monitor` again", exit_code=1)
    return found


def config_text(discovery: Path, interval_s: int = SCRAPE_INTERVAL_S, proxy_url: Optional[str] = None) -> str:
    """prometheus.yml: Ray's nodes, from Ray's own service-discovery file (re-read as Ray updates it);
    with ``proxy_url``, every scrape goes through the head's metrics relay at that address."""
    proxy = f"    proxy_url: {json.dumps(proxy_url)}\n" if proxy_url else ""
    return (f"global:\n  scrape_interval: {interval_s}s\n  evaluation_interval: {interval_s}s\n"
            f"scrape_configs:\n  - job_name: ray\n{proxy}    file_sd_configs:\n      - files: [{json.dumps(str(discovery))}]\n")


def running(cluster: str, home: Optional[Path] = None) -> Optional[Monitor]:
    """The cluster's Prometheus when it is running (its record, else None)."""
    path = directory(cluster, home) / "monitor.json"
    try:
        mon = Monitor.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    return mon if _alive(mon.pid) else None


def tunnel_holds(mon: Monitor) -> bool:
    """True when the monitor needs no tunnel, or its tunnel to the head's relay still runs."""
    return mon.forward_pid is None or _alive(mon.forward_pid, named=None)


def _started(pid: Optional[int]) -> Optional[float]:
    import psutil

    try:
        return psutil.Process(pid).create_time() if pid is not None else None
    except psutil.Error:
        return None


def _ours(pid: Optional[int], started: Optional[float], named: Optional[str]):
    """The process burst started as ``pid``, if it still runs: the same start time (a pid reused by
    another process has another), or, for a record written before start times were kept, the
    program's name. None: gone, or not ours."""
    import psutil

    if pid is None or not _alive(pid, named=None):
        return None
    try:
        proc = psutil.Process(pid)
        if started is not None:
            return proc if abs(proc.create_time() - started) < 1e-3 else None  # the same figure, read the same way
        return proc if named is not None and named in proc.name() else None
    except psutil.Error:
        return None


def _alive(pid: int, named: Optional[str] = "prometheus") -> bool:
    """``pid`` runs (not a zombie) and, with ``named``, is that program (a pid reused by another is not)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and (named is None or named in proc.name())
    except psutil.Error:
        return False


def discovery_from_dashboard(handle: ClusterHandle, out: Path) -> Path:
    """Every live node's metrics endpoint, asked of the cluster's dashboard (its node summary: each
    raylet's address and metrics export port), written as a Prometheus ``file_sd`` file."""
    from .runtime.ray_head import auth_headers

    req = urllib.request.Request(f"{handle.dashboard_url}/nodes?view=summary", headers=auth_headers(handle))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            nodes = json.loads(resp.read())["data"]["summary"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
        raise BurstError(f"cannot list the nodes of cluster {handle.name!r} from its dashboard {handle.dashboard_url} ({exc}); "
                         f"check `burst status`", exit_code=1) from None
    targets = sorted({f"{n['raylet']['nodeManagerAddress']}:{n['raylet']['metricsExportPort']}" for n in nodes
                      if isinstance(n, dict) and n.get("raylet", {}).get("state") == "ALIVE" and n["raylet"].get("metricsExportPort")})
    if not targets:
        raise BurstError(f"cluster {handle.name!r}'s dashboard lists no live node with a metrics port", exit_code=1)
    out.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": targets}]))
    return out


def start(handle: ClusterHandle, discovery: Optional[Path], port: Optional[int] = None) -> Monitor:
    """Start Prometheus on 127.0.0.1 scraping the nodes ``discovery`` lists (None: those the
    cluster's dashboard lists now); wait until it is ready."""
    here = _workdir(handle)
    if discovery is None:
        discovery = discovery_from_dashboard(handle, here / "nodes.json")
    if not discovery.exists():
        raise BurstError(f"cluster {handle.name!r} has no metrics discovery file at {discovery} (is its Ray head running? see `burst status`)",
                         exit_code=1)
    return _launch(handle, here, discovery, port)


def start_relayed(handle: ClusterHandle, target: "Target", port: Optional[int] = None) -> Monitor:
    """For a cluster reached only through a tunnel: list its nodes and start the metrics relay on
    its head (a Ray job, through the tunnel burst opens for one command), hold a tunnel of its own
    to the relay (with the cluster's process marker: it goes when the cluster goes), and start
    Prometheus scraping every node through it."""
    from .runtime.metrics_relay import RELAY_PORT
    from .runtime.ray_head import free_port

    here = _workdir(handle)
    local_port = free_port()
    command = target.forward_command(handle, local_port, RELAY_PORT, here)
    if command is None:
        raise BurstError(f"cluster {handle.name!r} ({handle.provider}) runs its nodes where this machine cannot scrape them and through "
                         f"no tunnel burst holds; every run's report already holds its nodes' utilisation", exit_code=2)
    with target.reach(handle) as reached:
        discovery = discovery_from_dashboard(reached, here / "nodes.json")
        _start_relay(reached, target)
    relay = f"http://127.0.0.1:{local_port}"
    forward = _start_until_ready(command, handle, here / "forward.log", f"{relay}/healthz",
                                 lambda last: f"the tunnel to the metrics relay of cluster {handle.name!r} did not open: {last}")
    try:
        return _launch(handle, here, discovery, port, proxy_url=relay, forward_pid=forward.pid)
    except BurstError:
        _end(forward)
        raise


def _start_relay(reached: ClusterHandle, target: "Target") -> None:
    """Run ``python -m burst.runtime.metrics_relay`` as a Ray job on the cluster and wait for it."""
    import shlex

    from .client import jobs

    runtime = target.job_runtime(reached)
    client = jobs.client(reached)
    job = client.submit_job(entrypoint=f"{shlex.quote(runtime.python)} -m burst.runtime.metrics_relay", runtime_env=runtime.runtime_env or None)
    deadline = time.monotonic() + READY_TIMEOUT_S * 2
    while (status := jobs.job_status(client, job)) not in jobs.TERMINAL:
        if time.monotonic() > deadline:
            client.stop_job(job)
            raise BurstError(f"the metrics relay did not start on cluster {reached.name!r} within {READY_TIMEOUT_S * 2:.0f} s", exit_code=1)
        time.sleep(0.5)
    if status != "SUCCEEDED":
        said = [line for line in client.get_job_logs(job).splitlines() if line.strip()][-1:] or [status]
        raise BurstError(f"the metrics relay did not start on cluster {reached.name!r}: {said[0][:300]}", exit_code=1)


def _workdir(handle: ClusterHandle) -> Path:
    prometheus_binary()  # a missing Prometheus is said before anything else is done
    here = directory(handle.name)
    here.mkdir(parents=True, exist_ok=True, mode=0o700)
    return here


def _launch(handle: ClusterHandle, here: Path, discovery: Path, port: Optional[int], proxy_url: Optional[str] = None,
            forward_pid: Optional[int] = None) -> Monitor:
    from .runtime.ray_head import free_port

    (here / "prometheus.yml").write_text(config_text(discovery, proxy_url=proxy_url))
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [prometheus_binary(), f"--config.file={here / 'prometheus.yml'}", f"--storage.tsdb.path={here / 'data'}",
           f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=15d"]
    proc = _start_until_ready(cmd, handle, here / "prometheus.log", f"{url}/-/ready",
                              lambda last: f"Prometheus did not start for cluster {handle.name!r}: {last}; its log: {here / 'prometheus.log'}")
    mon = Monitor(cluster=handle.name, pid=proc.pid, url=url, directory=str(here), dashboards=_dashboards(handle, here), forward_pid=forward_pid,
                  relay_url=proxy_url, started=_started(proc.pid), forward_started=_started(forward_pid))
    (here / "monitor.json").write_text(mon.model_dump_json(indent=1))
    return mon


def _start_until_ready(cmd: list[str], handle: ClusterHandle, log_path: Path, ready_url: str, failed: Callable[[str], str]) -> subprocess.Popen:
    """Start ``cmd`` (logging to ``log_path``, with the cluster's process marker: taken down with
    the cluster) and wait until ``ready_url`` answers 200; on exit or timeout, kill it and raise
    ``failed(its log's last line)``."""
    from .runtime.ray_head import MARKER

    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env={**os.environ, MARKER: handle.cluster_id},
                                start_new_session=True, cwd=str(log_path.parent))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _ready(ready_url):
        if proc.poll() is not None or time.monotonic() > deadline:
            _end(proc)
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise BurstError(failed(tail[0][:300]), exit_code=1)
        time.sleep(0.3)
    return proc


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _dashboards(handle: ClusterHandle, here: Path) -> list[str]:
    """Grafana dashboards for this Prometheus: burst's, and Ray's own where its session made them."""
    out = here / "grafana"
    out.mkdir(exist_ok=True)
    written = [shutil.copy(BURST_DASHBOARD, out / BURST_DASHBOARD.name)]
    if handle.temp_dir:
        for made in sorted(Path(handle.temp_dir).glob("session_latest/metrics/grafana/dashboards/*.json")):
            written.append(shutil.copy(made, out / made.name))
    return [str(p) for p in written]


def stop(cluster: str) -> bool:
    """Stop the cluster's Prometheus and the tunnel it scrapes through, each only if it is the very
    process burst started (a pid reused since is left alone), whether or not the other still runs
    (a Prometheus that died leaves its tunnel otherwise); the record goes too. True when there was one."""
    import psutil

    path = directory(cluster) / "monitor.json"
    try:
        mon = Monitor.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return False
    for proc in (_ours(mon.pid, mon.started, "prometheus"), _ours(mon.forward_pid, mon.forward_started, None)):
        if proc is None:
            continue
        try:
            proc.terminate()
            proc.wait(timeout=20)
        except psutil.TimeoutExpired:
            proc.kill()
        except psutil.Error:
            pass
    (Path(mon.directory) / "kubeconfig").unlink(missing_ok=True)
    path.unlink(missing_ok=True)
    return True


def query(url: str, promql: str) -> list[dict]:
    """An instant PromQL query against a Prometheus: its result vector."""
    from urllib.parse import urlencode

    with urllib.request.urlopen(f"{url}/api/v1/query?{urlencode({'query': promql})}", timeout=10) as resp:
        answer = json.loads(resp.read())
    if answer.get("status") != "success":
        raise BurstError(f"Prometheus could not answer {promql!r}: {answer.get('error', answer)}", exit_code=1)
    return answer["data"]["result"]
