"""A site's own Kubernetes as the tests stand it in: the kubectl and helm stand-ins
(``tests/fakes/kube``, behaving as the real tools are documented to) over a directory of objects,
and a site policy that places a cluster there."""

from __future__ import annotations

import json
import os
from pathlib import Path

FAKES = Path(__file__).resolve().parents[1] / "fakes" / "kube"
SITE = ("providers: [kubernetes, gcp]\n"
        "onprem: {scheduler: kubernetes, name: lab-k8s, accelerator: A100-40GB, gpus: 16, gpus_per_node: 4, usd_per_gpu_hour: 1.2,\n"
        "         grid_gco2_per_kwh: 50, context: lab, namespace: physics,\n"
        "         node_selector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB}, tolerations: [{key: nvidia.com/gpu, effect: NoSchedule}]%s}\n")


def env(fake: Path) -> dict[str, str]:
    """What a process needs to find the stand-ins, over ``fake``'s objects."""
    return {"FAKE_KUBE": str(fake), "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}"}


def site_operator(fake: Path) -> None:
    """The site runs its own KubeRay operator (installed by its admins, in ray-system)."""
    (fake / "crds.json").write_text(json.dumps(sorted(set(json.loads((fake / "crds.json").read_text()) if (fake / "crds.json").exists() else [])
                                                      | {"rayclusters.ray.io"})))
    (fake / "objects").mkdir(exist_ok=True)
    (fake / "objects" / "ray-system_deployment_kuberay-operator.json").write_text(json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "kuberay-operator", "namespace": "ray-system",
                                                                     "labels": {"app.kubernetes.io/name": "kuberay-operator"}},
        "status": {"availableReplicas": 1}}))


def left_on(fake: Path) -> list[str]:
    return sorted(p.stem for p in (fake / "objects").glob("*.json")) if (fake / "objects").exists() else []


def calls(fake: Path) -> list[dict]:
    return [json.loads(line) for line in (fake / "calls.jsonl").read_text().splitlines()] if (fake / "calls.jsonl").exists() else []
