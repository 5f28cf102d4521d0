"""KubeRay on a Kubernetes cluster: the operator (Helm chart, pinned) and one ``RayCluster``.

The head runs on the system pool and is exposed only as a ClusterIP service (burst reaches it
with ``kubectl port-forward``, which connects to the pod's own loopback, where the dashboard and
Jobs API listen). Every Ray container runs with Ray's token authentication, the token coming from
a Kubernetes Secret: the GCS, which workers reach on the pod's address, and every other Ray
service refuse requests without it. Each GPU pool gets one worker group with one pod per node that
requests all the node's GPUs, so Ray Train's workers own whole nodes (the measured optimum).
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from . import keeper_manifest
from .notice_hook import hook_command, notice_root
from .spec import KSA, KUBERAY_CHART_VERSION, KUBERAY_REPO, METRICS_PORT, METRICS_RELAY_PORT, RAY_AUTH_KEY, RAY_AUTH_SECRET, RAY_CLUSTER_NAME, RAY_NAMESPACE, PoolSpec, StackSpec

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
AKS_SPOT_TOLERATION = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
# Ray's token mode on every Ray container; the token itself from the Secret, never written into the manifest.
AUTH_ENV = [{"name": "RAY_AUTH_MODE", "value": "token"},
            {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": RAY_AUTH_SECRET, "key": RAY_AUTH_KEY}}}]
# A worker pod that Kubernetes ends (spot reclaim, node drain) first posts a checkpoint notice on the
# cluster's storage and gives the run this long to save where it is; Ray Train restarts the lost
# worker from that checkpoint. GKE gives a preempted spot node's pods about 25 s.
NOTICE_WAIT_S = 20
TERMINATION_GRACE_S = 25


KEEPER_ROLE = "burst-keeper"  # may get and delete the cluster's own RayCluster, nothing else


def notice_hook(root: pulumi.Input[str]) -> dict:
    return {"preStop": {"exec": {"command": hook_command(root, "checkpoint", "Kubernetes ends a worker pod", NOTICE_WAIT_S)}}}


def worker_group(pool: PoolSpec, spec: StackSpec, node_selector: dict, tolerations: list, env: list, service_account: Optional[str],
                 pod_labels: Optional[dict] = None, storage_uri: Optional[pulumi.Input[str]] = None) -> dict:
    cpu = max(1, (pool.vcpus or 8) - 2)  # leave room for kubelet and daemon sets
    memory = f"{int((pool.memory_gib or 30) * 0.8)}Gi"
    resources = {"nvidia.com/gpu": pool.gpus_per_node, "cpu": str(cpu), "memory": memory}
    pod = {
        "tolerations": tolerations,
        "nodeSelector": node_selector,
        "containers": [{
            "name": "ray-worker", "image": spec.image or f"rayproject/ray:{spec.ray_version}-py311-gpu",
            "resources": {"limits": resources, "requests": resources}, "env": AUTH_ENV + env, "ports": [METRICS_PORT],
        }],
    }
    if storage_uri is not None:
        pod["containers"][0]["lifecycle"] = notice_hook(notice_root(storage_uri, spec.lease_id))  # the handle's cluster id
        pod["terminationGracePeriodSeconds"] = TERMINATION_GRACE_S
    if service_account:
        pod["serviceAccountName"] = service_account
    return {"groupName": pool.name, "replicas": pool.nodes, "minReplicas": pool.nodes, "maxReplicas": pool.nodes,
            "rayStartParams": {"num-gpus": str(pool.gpus_per_node)},
            "template": {"metadata": {"labels": {**spec.labels(), **(pod_labels or {})}}, "spec": pod}}


def ray_cluster_spec(spec: StackSpec, system_selector: dict, groups: list[dict], env: list, service_account: Optional[str],
                     pod_labels: Optional[dict] = None) -> dict:
    image = spec.image or f"rayproject/ray:{spec.ray_version}-py311"
    head_pod = {
        "nodeSelector": system_selector,
        "containers": [{
            "name": "ray-head", "image": image,
            "resources": {"limits": {"cpu": "2", "memory": "8Gi"}, "requests": {"cpu": "2", "memory": "8Gi"}},
            "ports": [{"containerPort": 6379, "name": "gcs"}, {"containerPort": 8265, "name": "dashboard"}, METRICS_PORT, METRICS_RELAY_PORT],
            "env": AUTH_ENV + env,
        }, keeper_manifest.container(image, RAY_NAMESPACE, RAY_CLUSTER_NAME, spec.expires, spec.idle_minutes, AUTH_ENV)],
    }
    if service_account:
        head_pod["serviceAccountName"] = service_account
    return {
        "rayVersion": spec.ray_version,
        # dashboard (Jobs API) on the pod's loopback: the port-forward reaches it there, nothing else in the cluster does
        "headGroupSpec": {"serviceType": "ClusterIP", "rayStartParams": {"dashboard-host": "127.0.0.1", "num-gpus": "0"},
                          "template": {"metadata": {"labels": {**spec.labels(), **(pod_labels or {})}}, "spec": head_pod}},
        "workerGroupSpecs": groups,
    }


class KubeRay(pulumi.ComponentResource):
    """The KubeRay operator and one RayCluster on a Kubernetes cluster, as one component.

    Its outputs are what burst needs to reach the head (``namespace``, ``head_service``); the
    program that uses it exports them. ``object_opts`` are the options every further in-cluster
    object of the program takes (this component's provider, after the namespace, deleted with
    the cluster).
    """

    def __init__(self, name: str, spec: StackSpec, kubeconfig: pulumi.Input[str], cluster: pulumi.Resource,
                 pool_resources: Sequence[pulumi.Resource], node_selector_for, system_selector: dict, tolerations: list,
                 env: Optional[list] = None, service_account: Optional[str] = None, extra: Sequence[pulumi.Resource] = (),
                 pod_labels: Optional[dict] = None, storage_uri: Optional[pulumi.Input[str]] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("burst:index:KubeRay", name, None, opts)
        env = env or []
        self.provider = k8s.Provider(f"{spec.slug}-k8s", kubeconfig=kubeconfig, delete_unreachable=True,
                                     opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster, *pool_resources]))
        in_cluster = pulumi.ResourceOptions(parent=self, provider=self.provider, deleted_with=cluster)
        self.namespace_resource = k8s.core.v1.Namespace("ray-namespace", metadata={"name": RAY_NAMESPACE, "labels": spec.labels()},
                                                        opts=in_cluster)
        self.operator = k8s.helm.v3.Release(
            "kuberay-operator", chart="kuberay-operator", version=KUBERAY_CHART_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=KUBERAY_REPO),
            namespace=RAY_NAMESPACE, skip_await=False, timeout=600,
            values={"nodeSelector": system_selector, "labels": spec.labels()},
            opts=pulumi.ResourceOptions.merge(in_cluster, pulumi.ResourceOptions(depends_on=[self.namespace_resource])),
        )
        self.auth_secret = k8s.core.v1.Secret(
            "ray-auth", metadata={"name": RAY_AUTH_SECRET, "namespace": RAY_NAMESPACE, "labels": spec.labels()},
            string_data={RAY_AUTH_KEY: pulumi.Output.secret(spec.require_token())},
            opts=pulumi.ResourceOptions.merge(in_cluster, pulumi.ResourceOptions(depends_on=[self.namespace_resource])),
        )
        keeper_opts = pulumi.ResourceOptions.merge(in_cluster, pulumi.ResourceOptions(depends_on=[self.namespace_resource]))
        self.keeper_role = k8s.rbac.v1.Role(
            "keeper-role", metadata={"name": KEEPER_ROLE, "namespace": RAY_NAMESPACE, "labels": spec.labels()}, rules=keeper_manifest.rules(RAY_CLUSTER_NAME),
            opts=keeper_opts)
        self.keeper_binding = k8s.rbac.v1.RoleBinding(
            "keeper-binding", metadata={"name": KEEPER_ROLE, "namespace": RAY_NAMESPACE, "labels": spec.labels()},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": KEEPER_ROLE},
            subjects=[{"kind": "ServiceAccount", "name": service_account or "default", "namespace": RAY_NAMESPACE}], opts=keeper_opts)
        groups = [worker_group(p, spec, node_selector_for(p), tolerations, env, service_account, pod_labels, storage_uri) for p in spec.pools]
        self.ray_cluster = k8s.apiextensions.CustomResource(
            "raycluster", api_version="ray.io/v1", kind="RayCluster",
            metadata={"name": RAY_CLUSTER_NAME, "namespace": RAY_NAMESPACE, "labels": spec.labels()},
            spec=ray_cluster_spec(spec, system_selector, groups, env, service_account, pod_labels),
            opts=pulumi.ResourceOptions.merge(in_cluster, pulumi.ResourceOptions(depends_on=[self.operator, self.auth_secret, *extra])),
        )
        self.labels = spec.labels()
        self.namespace = RAY_NAMESPACE
        self.head_service = f"{RAY_CLUSTER_NAME}-head-svc"
        self.object_opts = pulumi.ResourceOptions(provider=self.provider, depends_on=[self.namespace_resource], deleted_with=cluster)
        self.register_outputs({"namespace": self.namespace, "head_service": self.head_service})

    def service_account(self, annotations: dict) -> k8s.core.v1.ServiceAccount:
        """The Ray pods' Kubernetes service account (``KSA``); ``annotations`` tie it to the cloud identity that may use the bucket."""
        return k8s.core.v1.ServiceAccount(
            "ray-ksa", metadata={"name": KSA, "namespace": self.namespace, "labels": self.labels, "annotations": annotations},
            opts=self.object_opts)
