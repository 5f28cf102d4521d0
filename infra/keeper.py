"""A cluster's keeper, as it runs inside a cluster (a container beside the KubeRay head, a process
on TPU host 0, a Slurm batch step): it ends its own cluster at the lease's end or after its idle
time, so that nothing on the user's machine has to be awake. See ``burst.runtime.keeper`` for the
one on this machine (which uses the same loop).

Standard library only: the pods run it from its source (``python -c SOURCE``), in whatever image
they have, with no burst installed. Deciding: the head's own Jobs API (127.0.0.1, with the
cluster's token), idleness only on an answer it got. Ending, with permissions that reach only its
own cluster:

- ``kube``: delete its own ``RayCluster`` through the in-cluster API with the pod's service
  account (a Role that allows ``delete`` on that one object); its worker pods' preStop hooks post
  the checkpoint notice on the way out, and the GPU pools scale to zero once the pods are gone;
- ``tpu``: delete its own TPU node through the Cloud TPU API with the slice's service account (an
  IAM grant conditioned on the node's name); the hosts' shutdown script posts the stop notice;
- ``slurm``: cancel its own job (the batch script posts the stop notice on SIGTERM).
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
from pathlib import Path
from typing import Callable, Optional

POLL_S = float(os.environ.get("BURST_KEEPER_POLL_S", "15"))  # a look at the lease and the jobs
# after an end that failed: the waits before trying again (then the last, for ever)
RETRY_S = tuple(float(x) for x in os.environ.get("BURST_KEEPER_RETRY_S", "15,30,60,120").split(","))
K8S_SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
GCE_METADATA = "http://metadata.google.internal/computeMetadata/v1"
TPU_API = "https://tpu.googleapis.com/v2"


def source() -> str:
    """This program's text, which the pods and TPU hosts run with ``python -c``."""
    return Path(__file__).read_text()


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
         on_lease_end: Callable[[], None] = lambda: None, alive: Callable[[], bool] = lambda: True, poll_s: Optional[float] = None) -> str:
    """Watch until the lease ends or the cluster is idle, then end it; returns why. ``on_lease_end``:
    what to do first at the lease's end (this machine's keeper posts a stop notice); ``alive``: false
    once the cluster is gone by other means (a `burst down`): the keeper then has nothing to keep."""
    poll_s = POLL_S if poll_s is None else poll_s
    started = last_active = time.time()
    failures = 0
    why = None
    while True:
        now = time.time()
        if not alive():
            return "the cluster is gone"
        if why is None and expires is not None and now >= expires:
            why = "its lease ended"
            on_lease_end()
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


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="keeper", description="end this cluster at its lease's end or when idle")
    parser.add_argument("--end", required=True, choices=["kube", "tpu", "slurm"])
    parser.add_argument("--namespace")
    parser.add_argument("--name")
    parser.add_argument("--project")
    parser.add_argument("--zone")
    parser.add_argument("--job-id")
    parser.add_argument("--expires", type=float)
    parser.add_argument("--idle-minutes", type=float)
    parser.add_argument("--dashboard")
    parser.add_argument("--token-file")
    parser.add_argument("--token-env", help="an environment variable holding the Ray token (a pod's Secret)")
    args = parser.parse_args(argv)
    ends: dict[str, Callable[[], None]] = {
        "kube": lambda: end_kube(args.namespace, args.name),
        "tpu": lambda: end_tpu(args.project, args.zone, args.name),
        "slurm": lambda: end_slurm(args.job_id),
    }
    run(ends[args.end], args, token_of(args))
    return 0


def token_of(args) -> Optional[str]:
    if getattr(args, "token_env", None) and os.environ.get(args.token_env):
        return os.environ[args.token_env].strip()
    if args.token_file and os.path.exists(args.token_file):
        with open(args.token_file) as fh:
            return fh.read().strip()
    return None


def run(end: Callable[[], None], args, token: Optional[str], on_lease_end: Callable[[], None] = lambda: None,
        alive: Callable[[], bool] = lambda: True) -> str:
    activity = (lambda: job_activity(args.dashboard, token)) if args.dashboard else None
    lease = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(args.expires)) if args.expires else "none"
    say(f"keeping the cluster ({args.end}): lease until {lease}; idle stop {args.idle_minutes or 'none'} min")
    why = keep(end, args.expires, args.idle_minutes, activity, on_lease_end, alive)
    say(f"done: {why}")
    return why


if __name__ == "__main__":
    sys.exit(main())
