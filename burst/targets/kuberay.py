"""Cloud Kubernetes targets: a managed cluster with GPU node pools running KubeRay.

``gcp`` is GKE and ``azure`` is AKS. Given ``--image`` (built from ``docker/Dockerfile``: Ray's GPU
image, pinned TensorFlow, burst's wheel) the pods run it and a job needs nothing installed at
start; without one they run the stock Ray image, and every job pip-installs TensorFlow and ships
burst's source in its runtime env on every node (minutes per start, and the network from every
node). The head is reached with ``kubectl port-forward`` (its service is ClusterIP only).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from ..errors import BurstError
from ..home.state import ClusterHandle
from ..client.jobs import JobRuntime
from .base import JobResources
from . import azure_cloud, google_cloud, kube_head
from .google_cloud import GoogleCloudStack
from .pulumi_stack import PulumiTarget, missing_tools, stack_errors

SOURCE_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_PACKAGES = ("tensorflow[and-cuda]>=2.16,<2.22", "h5py>=3.10", "matplotlib>=3.8", "pydantic>=2.6", "pyyaml>=6",
                    "typer>=0.12", "rich>=13", "filelock>=3.13", "psutil>=5.9")


def pod_job_runtime(handle: ClusterHandle) -> JobRuntime:
    """How a job starts in KubeRay pods: with burst's image, its own Python; with the stock Ray image,
    a runtime env that installs TensorFlow and ships burst's source to every node."""
    if handle.outputs.get("image"):  # burst, TensorFlow and the workload are in the image
        return JobRuntime(python="python")
    return JobRuntime(python="python", runtime_env={
        "working_dir": str(SOURCE_ROOT), "pip": list(CLUSTER_PACKAGES),
        "excludes": [".git", ".venv", "burst-runs", "tests", "*.h5", "*.tfrecord"]})


class KubeRayTarget(PulumiTarget):
    head_hint = "see `kubectl get pods -n burst`"
    runs_images = True

    def job_resources(self, handle: ClusterHandle, workers: int) -> JobResources:
        """One Ray Train worker per GPU group of a node (a whole node when the pools are uniform)."""
        per_worker = int(handle.layout.get("gpus_per_worker", 1))
        return JobResources(workers=int(handle.layout["count"]) // per_worker, gpus_per_worker=per_worker, cpus_per_worker=1)

    def job_runtime(self, handle: ClusterHandle) -> JobRuntime:
        return pod_job_runtime(handle)

    def kubeconfig(self, handle: ClusterHandle) -> Optional[str]:
        with stack_errors():
            return self._driver(handle.stack).outputs().get("kubeconfig") or ""

    def is_gone(self, handle: ClusterHandle) -> bool:
        """The API server says the Ray cluster is lost: its RayCluster is gone (the keeper beside the
        head ended it, idle or at the lease's end, and what the stack holds besides is left for burst to
        take down), or its head pod is gone, being deleted or failed (a preempted spot node takes its
        pods with it). Asked through the API server, not the head; False when it cannot tell."""
        return self._head_verdict(handle) is not None

    def stopped_reason(self, handle: ClusterHandle) -> str:
        return self._head_verdict(handle) or super().stopped_reason(handle)

    def _head_verdict(self, handle: ClusterHandle) -> Optional[str]:
        import json
        import subprocess

        ns = handle.outputs.get("ray_namespace", "burst")
        try:
            with self.kubeconfig_file(handle) as config:
                if not config:
                    return None
                ask = ["kubectl", f"--kubeconfig={config}", "--request-timeout=20s", "get", "-n", ns]
                clusters = subprocess.run([*ask, "rayclusters.ray.io", "-o", "name"], capture_output=True, text=True, timeout=60)
                if clusters.returncode != 0:
                    return None
                if not clusters.stdout.strip():
                    return f"its RayCluster in namespace {ns} is gone"
                pods = subprocess.run([*ask, "pods", "-l", "ray.io/node-type=head", "-o", "json"], capture_output=True, text=True, timeout=60)
        except (BurstError, OSError, subprocess.TimeoutExpired):
            return None
        if pods.returncode != 0:
            return None
        try:
            listed = json.loads(pods.stdout).get("items", [])
        except ValueError:
            return None
        return kube_head.head_lost(listed, handle.outputs.get("head_pod") or {})

    def tunnel_command(self, handle: ClusterHandle, port: int, kubeconfig: Optional[str], remote_port: int = 8265) -> list[str]:
        return ["kubectl", f"--kubeconfig={kubeconfig}", "port-forward", "-n", handle.outputs.get("ray_namespace", "burst"),
                f"service/{handle.outputs.get('ray_head_service', 'burst-head-svc')}", f"{port}:{remote_port}", "--address=127.0.0.1"]


class GkeTarget(KubeRayTarget, GoogleCloudStack):
    provider = "gcp"

    def program(self, spec) -> Callable[[], object]:
        from infra import gke

        return lambda: gke.program(spec)

    def preflight_problems(self, lay, preemptible: bool) -> list[str]:
        return google_cloud.gke_problems(self.preflight_session(), self.project() or "", lay, preemptible)

    def missing_tools(self) -> list[str]:
        return missing_tools(
            ("kubectl", "gke-gcloud-auth-plugin"), "to reach the Ray head on GKE: `gcloud components install kubectl gke-gcloud-auth-plugin`")


class AksTarget(KubeRayTarget):
    provider = "azure"
    vendor = "azure"
    store_schemes = ("abfs", "abfss")
    store_service = "blob"

    def program(self, spec) -> Callable[[], object]:
        from infra import aks

        return lambda: aks.program(spec)

    def stack_config(self, spec_fields: dict) -> dict[str, str]:
        return {"azure-native:location": spec_fields["region"]}

    def store_project(self) -> str:
        """The subscription (a rendering without a login names a placeholder one)."""
        try:
            return azure_cloud.azure_subscription()
        except BurstError:
            return "00000000-0000-0000-0000-000000000000"

    def named_store_scope(self, uri: str) -> Optional[str]:
        """The named container's storage account, looked up in the subscription (the grant's scope)."""
        return azure_cloud.storage_account_id(azure_cloud.azure_session(), azure_cloud.azure_subscription(), uri)

    def preflight_problems(self, lay, preemptible: bool) -> list[str]:
        subscription = azure_cloud.azure_subscription()  # before any token is asked for
        return azure_cloud.aks_problems(azure_cloud.azure_session(), subscription, lay, preemptible)

    def missing_credentials(self) -> list[str]:
        problems = []
        sp = [v for v in ("ARM_CLIENT_ID", "ARM_CLIENT_SECRET", "ARM_TENANT_ID", "ARM_SUBSCRIPTION_ID") if os.environ.get(v)]
        if 0 < len(sp) < 4:
            problems.append("incomplete Azure service principal: set all of ARM_CLIENT_ID, ARM_CLIENT_SECRET, ARM_TENANT_ID, ARM_SUBSCRIPTION_ID")
        elif not sp and not azure_cloud.azure_subscriptions():
            problems.append("not logged in to Azure: run `az login`, or set ARM_CLIENT_ID, ARM_CLIENT_SECRET, ARM_TENANT_ID "
                            "and ARM_SUBSCRIPTION_ID for a service principal")
        return problems

    def missing_tools(self) -> list[str]:
        return missing_tools(("kubectl",), "to reach the Ray head on AKS: `az aks install-cli`")
