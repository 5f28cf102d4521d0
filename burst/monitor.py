"""`burst monitor CLUSTER`: a real Prometheus scraping a cluster's Ray metrics, for those who run
Prometheus and Grafana.

Ray keeps a Prometheus service-discovery file on its head listing every node's metrics endpoint
(Ray's "Collecting and monitoring metrics" guide: ``prom_metrics_service_discovery.json`` in its
temp dir); the target says where that file is readable from this machine, or that the cluster's
dashboard, which answers here, is to be asked for its nodes instead (an on-prem Ray cluster, a
Slurm head on the site's network): then burst writes the file from the dashboard's node list, once
(``burst monitor`` again renews it after the cluster changed). Prometheus (Debian's
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
from typing import Optional

from pydantic import BaseModel

from .errors import BurstError
from .state import ClusterHandle

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


def directory(cluster: str) -> Path:
    from . import state

    return state.home_path() / "monitor" / cluster


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise BurstError("Prometheus is not installed: install Debian's `prometheus` package (apt-get install prometheus) "
                         "or put a Prometheus 2.x binary on PATH, then run `burst monitor` again", exit_code=1)
    return found


def config_text(discovery: Path, interval_s: int = SCRAPE_INTERVAL_S) -> str:
    """prometheus.yml: Ray's nodes, from Ray's own service-discovery file (re-read as Ray updates it)."""
    return (f"global:\n  scrape_interval: {interval_s}s\n  evaluation_interval: {interval_s}s\n"
            f"scrape_configs:\n  - job_name: ray\n    file_sd_configs:\n      - files: [{json.dumps(str(discovery))}]\n")


def running(cluster: str) -> Optional[Monitor]:
    """The cluster's Prometheus when it is running (its record, else None)."""
    path = directory(cluster) / "monitor.json"
    try:
        mon = Monitor.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    return mon if _alive(mon.pid) else None


def _alive(pid: int) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and "prometheus" in proc.name()
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
    from .runtime.ray_head import MARKER, free_port

    binary = prometheus_binary()
    here = directory(handle.name)
    here.mkdir(parents=True, exist_ok=True, mode=0o700)
    if discovery is None:
        discovery = discovery_from_dashboard(handle, here / "nodes.json")
    if not discovery.exists():
        raise BurstError(f"cluster {handle.name!r} has no metrics discovery file at {discovery} (is its Ray head running? see `burst status`)",
                         exit_code=1)
    (here / "prometheus.yml").write_text(config_text(discovery))
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [binary, f"--config.file={here / 'prometheus.yml'}", f"--storage.tsdb.path={here / 'data'}",
           f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=15d"]
    log = (here / "prometheus.log").open("ab")
    env = {**os.environ, MARKER: handle.cluster_id}  # the cluster's own processes: taken down with it
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd=str(here))
    log.close()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _ready(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
            tail = (here / "prometheus.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise BurstError(f"Prometheus did not start for cluster {handle.name!r}: {tail[0][:300]}; its log: {here / 'prometheus.log'}", exit_code=1)
        time.sleep(0.3)
    mon = Monitor(cluster=handle.name, pid=proc.pid, url=url, directory=str(here), dashboards=_dashboards(handle, here))
    (here / "monitor.json").write_text(mon.model_dump_json(indent=1))
    return mon


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
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
    """Stop the cluster's Prometheus; True when one was running."""
    import psutil

    mon = running(cluster)
    if mon is None:
        return False
    try:
        proc = psutil.Process(mon.pid)
        proc.terminate()
        proc.wait(timeout=20)
    except psutil.TimeoutExpired:
        proc.kill()
    except psutil.Error:
        pass
    return True


def query(url: str, promql: str) -> list[dict]:
    """An instant PromQL query against a Prometheus: its result vector."""
    from urllib.parse import urlencode

    with urllib.request.urlopen(f"{url}/api/v1/query?{urlencode({'query': promql})}", timeout=10) as resp:
        answer = json.loads(resp.read())
    if answer.get("status") != "success":
        raise BurstError(f"Prometheus could not answer {promql!r}: {answer.get('error', answer)}", exit_code=1)
    return answer["data"]["result"]
