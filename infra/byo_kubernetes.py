"""The objects burst creates in a Kubernetes cluster it did not create: plain manifests, applied
with ``kubectl apply`` and deleted by name, nothing else of the cluster touched.

* ``Namespace`` (only when it does not exist yet), labelled ``app.kubernetes.io/managed-by: burst``
  and no lease: it is shared by every burst cluster in it, and the last one to leave deletes it
  (``namespace_manifest``; a namespace without the label is the site's and is never deleted).
* ``Secret`` holding the Ray token: every Ray container runs with ``RAY_AUTH_MODE=token`` and reads
  the token from it; the dashboard and the Jobs API listen on the head pod's loopback, where
  ``kubectl port-forward`` reaches them.
* ``PersistentVolumeClaim`` for the run's storage when the site gives no bucket, mounted at the
  same path in every Ray pod (``ReadWriteMany``: Ray Train's workers write their checkpoints there).
* ``RayCluster`` (KubeRay ``ray.io/v1``): a head on any node, one worker group of ``workers`` pods
  with ``gpus_per_worker`` GPUs each on the nodes the policy selects (node selector, tolerations);
  with a Kueue ``LocalQueue`` it carries the queue label and starts suspended, and Kueue admits it.
  Every Ray container names its metrics port (KubeRay's default, 8080) ``metrics``.
* ``PodMonitor`` (Prometheus Operator ``monitoring.coreos.com/v1``), where the site asks for one:
  the site's Prometheus scrapes every Ray pod of this cluster on that port (KubeRay's own
  ``config/prometheus/podMonitor.yaml`` does the same for worker pods).

Plain data (no Pulumi): the dry run prints it, the tests validate it against the Kubernetes and
KubeRay schemas, and the target applies exactly what was rendered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from . import keeper_manifest
from .notice_hook import hook_command, notice_root
from .spec import METRICS_PORT, METRICS_RELAY_PORT, RAY_AUTH_KEY, RAY_AUTH_SECRET

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_BY = {"app.kubernetes.io/managed-by": "burst"}  # what burst created and shares between its clusters
OPERATOR_MARKER = "burst-kuberay-operator"  # a ConfigMap beside the KubeRay operator that burst installed
STORAGE_VOLUME = "burst-storage"
KUBERAY_CLUSTER_LABEL = "ray.io/cluster"  # KubeRay labels every pod of a RayCluster with its name
NOTICE_WAIT_S = 20
TERMINATION_GRACE_S = 25


@dataclass(frozen=True)
class ByoSpec:
    """What the RayCluster in a site's Kubernetes is made of."""

    name: str                           # RayCluster name (also the prefix of the Secret and the claim)
    cluster_id: str                     # burst's id of the cluster (its handle's): where its notices go
    namespace: str
    labels: dict[str, str]              # on every object: the lease, its expiry, the burst cluster
    ray_version: str
    workers: int                        # worker pods
    gpus_per_worker: int                # GPUs each worker pod requests (0: a CPU worker)
    cpus_per_worker: int = 4
    memory_gib_per_worker: int = 16
    image: Optional[str] = None         # prebuilt Ray + TensorFlow + burst image (None: the stock Ray image)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict, ...] = ()
    local_queue: Optional[str] = None   # Kueue LocalQueue
    bucket: Optional[str] = None        # storage both sides reach; None: a claim mounted at mount_path
    mount_path: str = "/mnt/burst"
    pvc_size_gi: int = 50
    storage_class: Optional[str] = None
    expires: Optional[float] = None     # the lease's end: the keeper beside the head deletes the RayCluster then
    idle_minutes: Optional[float] = None  # ... or after this long with no job
    pod_monitor: bool = False           # a PodMonitor for the site's Prometheus Operator

    @property
    def keeper_name(self) -> str:
        """The keeper's service account, Role and RoleBinding."""
        return f"{self.name}-keeper"

    @property
    def secret_name(self) -> str:
        return f"{self.name}-{RAY_AUTH_SECRET}"

    @property
    def claim_name(self) -> str:
        return f"{self.name}-storage"

    @property
    def head_service(self) -> str:
        return f"{self.name}-head-svc"

    @property
    def job_storage(self) -> str:
        """The storage as the Ray pods see it."""
        return self.bucket or self.mount_path


def _meta(spec: ByoSpec, name: str, namespaced: bool = True) -> dict:
    meta = {"name": name, "labels": dict(spec.labels)}
    if namespaced:
        meta["namespace"] = spec.namespace
    return meta


def auth_env(spec: ByoSpec) -> list[dict]:
    return [{"name": "RAY_AUTH_MODE", "value": "token"},
            {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": spec.secret_name, "key": RAY_AUTH_KEY}}}]


def _pod(spec: ByoSpec, container: dict, workers: bool) -> dict:
    pod: dict = {"containers": [container]}
    if not spec.bucket:
        container["volumeMounts"] = [{"name": STORAGE_VOLUME, "mountPath": spec.mount_path}]
        pod["volumes"] = [{"name": STORAGE_VOLUME, "persistentVolumeClaim": {"claimName": spec.claim_name}}]
    if workers:
        if spec.node_selector:
            pod["nodeSelector"] = dict(spec.node_selector)
        if spec.tolerations:
            pod["tolerations"] = [dict(t) for t in spec.tolerations]
        container["lifecycle"] = {"preStop": {"exec": {"command": hook_command(notice_root(spec.job_storage, spec.cluster_id), "checkpoint", "Kubernetes ends a worker pod",
                                                                              NOTICE_WAIT_S)}}}
        pod["terminationGracePeriodSeconds"] = TERMINATION_GRACE_S
    elif spec.tolerations:
        pod["tolerations"] = [dict(t) for t in spec.tolerations]  # the head may have to land on the same tainted nodes
    return pod


def ray_cluster(spec: ByoSpec) -> dict:
    gpu = spec.gpus_per_worker > 0
    worker_resources = {"cpu": str(spec.cpus_per_worker), "memory": f"{spec.memory_gib_per_worker}Gi"}
    if gpu:
        worker_resources["nvidia.com/gpu"] = str(spec.gpus_per_worker)
    head = {"name": "ray-head", "image": spec.image or f"rayproject/ray:{spec.ray_version}-py311",
            "resources": {"limits": {"cpu": "2", "memory": "8Gi"}, "requests": {"cpu": "2", "memory": "8Gi"}},
            "ports": [{"containerPort": 6379, "name": "gcs"}, {"containerPort": 8265, "name": "dashboard"}, METRICS_PORT, METRICS_RELAY_PORT],
            "env": auth_env(spec)}
    head_pod = _pod(spec, head, workers=False)
    if spec.expires is not None:  # the keeper beside the head, with a service account that may delete this RayCluster only
        head_pod["containers"].append(keeper_manifest.container(head["image"], spec.namespace, spec.name, spec.expires, spec.idle_minutes,
                                                                 auth_env(spec)))
        head_pod["serviceAccountName"] = spec.keeper_name
    worker = {"name": "ray-worker", "image": spec.image or f"rayproject/ray:{spec.ray_version}-py311{'-gpu' if gpu else ''}",
              "resources": {"limits": dict(worker_resources), "requests": dict(worker_resources)}, "env": auth_env(spec),
              "ports": [METRICS_PORT]}
    labels = dict(spec.labels)
    if spec.local_queue:
        labels[KUEUE_QUEUE_LABEL] = spec.local_queue
    body = {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels},
        "spec": {
            "rayVersion": spec.ray_version,
            "headGroupSpec": {"serviceType": "ClusterIP", "rayStartParams": {"dashboard-host": "127.0.0.1", "num-gpus": "0"},
                              "template": {"metadata": {"labels": dict(spec.labels)}, "spec": head_pod}},
            "workerGroupSpecs": [{
                "groupName": "workers", "replicas": spec.workers, "minReplicas": spec.workers, "maxReplicas": spec.workers,
                "rayStartParams": {"num-gpus": str(spec.gpus_per_worker)},
                "template": {"metadata": {"labels": dict(spec.labels)}, "spec": _pod(spec, worker, workers=True)},
            }],
        },
    }
    if spec.local_queue:
        body["spec"]["suspend"] = True  # Kueue admits it (and unsuspends it) when the queue's quota has room
    return body


def namespace_manifest(namespace: str) -> dict:
    """A namespace burst creates: labelled as burst's, shared by its clusters (no lease label)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": dict(MANAGED_BY)}}


def operator_marker(namespace: str, release: str, chart_version: str) -> dict:
    """The mark that burst installed the KubeRay operator release in ``namespace``: applied before
    ``helm install``, so that the last burst cluster to leave uninstalls it, and nobody else's."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": OPERATOR_MARKER, "namespace": namespace, "labels": {**MANAGED_BY, "burst-part": "kuberay-operator"}},
            "data": {"release": release, "chart_version": chart_version}}


def manifests(spec: ByoSpec, token: str) -> list[dict]:
    """Every object of one burst cluster, in the order they are applied (deleted in the reverse
    order). The namespace is not one of them: see ``namespace_manifest``."""
    objects = []
    objects.append({"apiVersion": "v1", "kind": "Secret", "metadata": _meta(spec, spec.secret_name), "type": "Opaque",
                    "stringData": {RAY_AUTH_KEY: token}})
    if not spec.bucket:
        claim = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": f"{spec.pvc_size_gi}Gi"}}}
        if spec.storage_class:
            claim["storageClassName"] = spec.storage_class
        objects.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": _meta(spec, spec.claim_name), "spec": claim})
    if spec.expires is not None:
        objects += [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(spec, spec.keeper_name)},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(spec, spec.keeper_name),
             "rules": keeper_manifest.rules(spec.name)},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(spec, spec.keeper_name),
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": spec.keeper_name},
             "subjects": [{"kind": "ServiceAccount", "name": spec.keeper_name, "namespace": spec.namespace}]},
        ]
    objects.append(ray_cluster(spec))
    if spec.pod_monitor:
        objects.append(pod_monitor(spec))
    return objects


def pod_monitor(spec: ByoSpec) -> dict:
    """The Prometheus Operator's scrape of this cluster's Ray pods (head and workers), every 15 s."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": _meta(spec, f"{spec.name}-metrics"),
            "spec": {"selector": {"matchLabels": {KUBERAY_CLUSTER_LABEL: spec.name}},
                     "podMetricsEndpoints": [{"port": METRICS_PORT["name"], "path": "/metrics", "interval": "15s"}]}}
