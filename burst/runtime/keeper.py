"""A cluster's keeper: a small process that runs with the cluster, beside its Ray head, and ends
the cluster at its lease's end or after it has had no job for its idle time, so that nothing on
the user's machine has to be awake (a closed laptop, a suspended controller, a reboot).

It is what SkyPilot's skylet is to its clusters: started with the head, it asks the head's own
Jobs API (127.0.0.1, with the cluster's token) whether a job is pending or running, decides
idleness only on an answer it got, and at the lease's end first posts a ``stop`` notice on the
cluster's storage (the workers checkpoint where they are, as on a walltime or a spot notice) and
waits for it, then ends its own cluster the one way its target allows, with permissions that reach
only that cluster:

- ``local``: stop the cluster's own Ray processes on this machine (never itself first);
- ``kube``: delete its own ``RayCluster`` through the in-cluster API, with a service account whose
  Role allows exactly that object (GPU pools autoscale to zero once the pods are gone);
- ``tpu``: delete its own TPU node through the Cloud TPU API, with the slice's service account
  (an IAM grant conditioned on the node's name);
- ``slurm``: cancel its own Slurm job.

Run as ``python -m burst.runtime.keeper --end KIND [target args] [--expires T] [--idle-minutes M]
[--dashboard URL --token-file F] [--notices ROOT]``. It writes one line per decision to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Callable, Optional

POLL_S = float(os.environ.get("BURST_KEEPER_POLL_S", "15"))  # a look at the lease and the jobs
NOTICE_WAIT_S = float(os.environ.get("BURST_KEEPER_NOTICE_S", "60"))  # the workers' time to checkpoint at the lease's end
RETRY_S = (15.0, 30.0, 60.0, 120.0)  # after an end that failed: the waits before trying again (then the last)
K8S_SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
GCE_METADATA = "http://metadata.google.internal/computeMetadata/v1"
TPU_API = "https://tpu.googleapis.com/v2"


def say(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} keeper: {line}", flush=True)


# ---------------------------------------------------------------------- is the cluster in use?


def job_activity(dashboard: str, token: Optional[str], timeout: float = 10.0) -> tuple[bool, float]:
    """(a job is pending or running, when the last job ended) from the head's Jobs API."""
    request = urllib.request.Request(f"{dashboard.rstrip('/')}/api/jobs/", headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        listed = json.loads(response.read())
    busy = any(j.get("status") in ("PENDING", "RUNNING") for j in listed)
    ends = [j["end_time"] / 1000 for j in listed if j.get("end_time")]
    return busy, max(ends, default=0.0)


# ---------------------------------------------------------------------- ending its own cluster


def end_local(cluster_id: str, temp_dir: Optional[str]) -> None:
    """Stop this machine's Ray processes of the cluster (the keeper is one of them: spared, it ends after)."""
    from .ray_head import stop_processes

    left = stop_processes(cluster_id, temp_dir, spare=os.getpid())
    if left:
        raise RuntimeError(f"processes {left} did not stop")


def _http(method: str, url: str, headers: dict, context=None, timeout: float = 30.0) -> int:
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return 404  # already gone: what the keeper wanted
        raise RuntimeError(f"{method} {url}: HTTP {exc.code} {exc.read()[:300].decode(errors='replace')}") from None


def end_kube(namespace: str, name: str) -> None:
    """Delete its own RayCluster through the in-cluster API (the pod's service account token)."""
    import ssl

    api = os.environ.get("BURST_KEEPER_KUBE_API") or \
        f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}"
    account = os.environ.get("BURST_KEEPER_SERVICE_ACCOUNT", K8S_SERVICE_ACCOUNT)
    with open(os.path.join(account, "token")) as fh:
        token = fh.read().strip()
    ca = os.path.join(account, "ca.crt")
    context = ssl.create_default_context(cafile=ca) if api.startswith("https") and os.path.exists(ca) else None
    _http("DELETE", f"{api}/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}",
          {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}, context)


def end_tpu(project: str, zone: str, node: str) -> None:
    """Delete its own TPU node through the Cloud TPU API (the slice's service account, from the metadata server)."""
    metadata = os.environ.get("BURST_KEEPER_METADATA", GCE_METADATA)
    api = os.environ.get("BURST_KEEPER_TPU_API", TPU_API)
    request = urllib.request.Request(f"{metadata}/instance/service-accounts/default/token", headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as response:
        token = json.loads(response.read())["access_token"]
    _http("DELETE", f"{api}/projects/{project}/locations/{zone}/nodes/{node}", {"Authorization": f"Bearer {token}"})


def end_slurm(job_id: str) -> None:
    proc = subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"scancel {job_id}: {proc.stderr.strip()[:300]}")


# ---------------------------------------------------------------------- the loop


def keep(end: Callable[[], None], expires: Optional[float], idle_minutes: Optional[float], activity: Optional[Callable[[], tuple[bool, float]]],
         notices: Optional[str] = None, alive: Callable[[], bool] = lambda: True, poll_s: float = POLL_S) -> str:
    """Watch until the lease ends or the cluster is idle, then end it; returns why. ``alive``: false
    once the cluster is gone by other means (a `burst down`): the keeper then has nothing to keep."""
    started = last_active = time.time()
    failures = 0
    why = None
    while True:
        now = time.time()
        if not alive():
            return "the cluster is gone"
        if why is None and expires is not None and now >= expires:
            why = "its lease ended"
            if notices:
                _stop_notice(notices)
        if why is None and idle_minutes is not None and activity is not None:
            try:
                busy, last_end = activity()
            except Exception as exc:  # noqa: BLE001 - not asked this time: no decision on a guess
                busy = None
                say(f"the head did not answer ({exc.__class__.__name__}); no idle decision on this look")
            if busy is not None:
                last_active = now if busy else max(last_active, last_end, started)
                if now - last_active >= idle_minutes * 60:
                    why = f"no job for {idle_minutes:g} minute(s)"
        if why is not None:
            say(f"ending the cluster: {why}")
            try:
                end()
                say(f"cluster ended: {why}")
                return why
            except Exception as exc:  # noqa: BLE001 - whatever the API said: try again, a cluster left up costs money
                wait = RETRY_S[min(failures, len(RETRY_S) - 1)]
                failures += 1
                say(f"ending the cluster failed ({str(exc)[:300]}); trying again in {wait:g} s")
                time.sleep(wait)
                continue
        time.sleep(poll_s)


def _stop_notice(root: str) -> None:
    """A ``stop`` notice on the cluster's storage: the workers checkpoint where they are and stop."""
    from . import notice

    try:
        posted = notice.write(root, "stop", "the cluster's lease ended (its keeper)")
        checkpointed = notice.wait_taken(root, posted, NOTICE_WAIT_S)
        say("the workers checkpointed on the lease's notice" if checkpointed else f"no checkpoint within {NOTICE_WAIT_S:g} s of the notice")
    except Exception as exc:  # noqa: BLE001 - the lease ends regardless
        say(f"the stop notice could not be posted ({exc})")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m burst.runtime.keeper", description="end this cluster at its lease's end or when idle")
    parser.add_argument("--end", required=True, choices=["local", "kube", "tpu", "slurm"])
    parser.add_argument("--cluster-id")
    parser.add_argument("--temp-dir")
    parser.add_argument("--namespace")
    parser.add_argument("--name")
    parser.add_argument("--project")
    parser.add_argument("--zone")
    parser.add_argument("--job-id")
    parser.add_argument("--expires", type=float)
    parser.add_argument("--idle-minutes", type=float)
    parser.add_argument("--dashboard")
    parser.add_argument("--token-file")
    parser.add_argument("--notices")
    args = parser.parse_args(argv)
    ends: dict[str, Callable[[], None]] = {
        "local": lambda: end_local(args.cluster_id, args.temp_dir),
        "kube": lambda: end_kube(args.namespace, args.name),
        "tpu": lambda: end_tpu(args.project, args.zone, args.name),
        "slurm": lambda: end_slurm(args.job_id),
    }
    token = None
    if args.token_file and os.path.exists(args.token_file):
        with open(args.token_file) as fh:
            token = fh.read().strip()
    activity = (lambda: job_activity(args.dashboard, token)) if args.dashboard else None
    alive = lambda: True  # noqa: E731
    if args.end == "local":
        alive = lambda: _head_alive(args.cluster_id, args.temp_dir)  # noqa: E731
    lease = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(args.expires)) if args.expires else "none"
    say(f"keeping the cluster ({args.end}): lease until {lease}; idle stop {args.idle_minutes or 'none'} min")
    say(f"done: {keep(ends[args.end], args.expires, args.idle_minutes, activity, args.notices, alive)}")
    return 0


def _head_alive(cluster_id: str, temp_dir: Optional[str]) -> bool:
    """True while any other process of the local cluster runs (a `burst down` leaves the keeper nothing to keep)."""
    from .ray_head import cluster_processes

    return any(p.pid != os.getpid() for p in cluster_processes(cluster_id, temp_dir))


if __name__ == "__main__":
    sys.exit(main())
