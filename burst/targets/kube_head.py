"""A Ray head in Kubernetes as the API server reports its pod: lost or not, in the pod's words.
Shared by your own Kubernetes (``kubernetes``) and the clouds' KubeRay clusters (``kuberay``)."""

from __future__ import annotations

from typing import Optional


def restarts(pod: dict) -> int:
    return sum(int(cs.get("restartCount") or 0) for cs in pod.get("status", {}).get("containerStatuses", []))


def head_lost(pods: list[dict], started_on: dict) -> Optional[str]:
    """Why a Ray cluster's head is lost, in its pod's words, or None while the head the cluster
    came up with still runs. ``pods``: the head pods listed (deleting ones included); ``started_on``:
    that head's uid and container restarts when the cluster came up. KubeRay replaces a deleted or
    failed head pod, and a head container that restarts starts a new GCS: without GCS fault
    tolerance (burst sets none) either is a new Ray cluster that knows no job of the old one
    (https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/kuberay-gcs-ft.html)."""
    if not pods:
        return "its head pod is gone"
    pod = pods[0]
    name, status = pod.get("metadata", {}).get("name", "?"), pod.get("status", {})
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return f"pod {name} is being deleted"
    if status.get("phase") in ("Failed", "Succeeded"):
        why = ": ".join(part for part in (status.get("reason"), (status.get("message") or "").strip()[:200]) if part)
        return f"pod {name} {status['phase']}" + (f" ({why})" if why else "")
    uid = pod.get("metadata", {}).get("uid")
    if started_on.get("uid") and uid and uid != started_on["uid"]:
        return f"pod {name} is a new head (the pod the cluster came up with is gone)"
    if "restarts" in started_on and restarts(pod) > int(started_on["restarts"] or 0):  # a baseline only: restarts while it started are its past
        for cs in status.get("containerStatuses", []):
            ended = (cs.get("lastState") or {}).get("terminated") or {}
            if ended:
                return (f"pod {name} restarted its {cs.get('name', 'head')} container ({ended.get('reason') or 'terminated'}, "
                        f"exit code {ended.get('exitCode', '?')})")
        return f"pod {name} restarted its container"
    return None
