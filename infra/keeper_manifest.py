"""The keeper as Kubernetes objects (plain manifests, no Pulumi): the container beside a Ray head
that runs ``infra.keeper`` from its source, and the one rule its service account gets. Used by the
cloud stacks (``infra.kuberay``) and by your own Kubernetes (``infra.byo_kubernetes``)."""

from __future__ import annotations

from typing import Optional

from . import keeper


def container(image: str, namespace: str, name: str, expires: float, idle_minutes: Optional[float], env: list[dict]) -> dict:
    """The keeper beside the head: it deletes RayCluster ``namespace/name`` at ``expires`` or after
    ``idle_minutes`` with no job (asking the head's Jobs API on the pod's loopback with the token in ``env``)."""
    args = ["--end", "kube", "--namespace", namespace, "--name", name, "--expires", str(expires),
            "--dashboard", "http://127.0.0.1:8265", "--token-env", "RAY_AUTH_TOKEN"]
    if idle_minutes is not None:
        args += ["--idle-minutes", str(idle_minutes)]
    small = {"cpu": "50m", "memory": "64Mi"}
    return {"name": "burst-keeper", "image": image, "command": ["python", "-c", keeper.source(), *args], "env": env,
            "resources": {"limits": small, "requests": small}}


def rules(name: str) -> list[dict]:
    """What the keeper's service account may do: get and delete that one RayCluster, nothing else."""
    return [{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "resourceNames": [name], "verbs": ["get", "delete"]}]
