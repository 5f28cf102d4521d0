"""What a cluster stack is built from: a layout, a lease and the versions to run.

Plain data, no Pulumi imports, so the CLI can build and print it before Pulumi is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

KUBERAY_CHART_VERSION = "1.5.1"  # pinned: KubeRay operator Helm chart
KUBERAY_REPO = "https://ray-project.github.io/kuberay-helm/"
RAY_NAMESPACE = "burst"
RAY_CLUSTER_NAME = "burst"
# Ray's metrics export port in KubeRay's pods (KubeRay starts Ray with --metrics-export-port=8080);
# named, so that a PodMonitor selects it by name. KubeRay leaves it out of the head's Service when
# the container lists ports without it (ray-project/kuberay#963), so it is listed.
METRICS_PORT = {"containerPort": 8080, "name": "metrics"}
# burst's metrics relay on the head (burst.runtime.metrics_relay, `burst monitor`): listed on the head
# container so that its Service carries it and `kubectl port-forward service/...` reaches it.
METRICS_RELAY_PORT = {"containerPort": 8266, "name": "metrics-relay"}
RAY_AUTH_SECRET = "burst-ray-auth"  # the Kubernetes Secret holding the Ray token (key RAY_AUTH_KEY)
RAY_AUTH_KEY = "auth_token"
KSA = "burst-ray"  # Kubernetes service account of the Ray pods (workload identity: the bucket, nothing else)
TPU_TENSORFLOW = "2.18.0"  # the TensorFlow the TPU VM runtime image carries (its image name follows from it)

GKE_ACCELERATORS = {  # catalog name -> GKE guest accelerator type
    "T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "L4": "nvidia-l4",
    "A100-40GB": "nvidia-tesla-a100", "A100-80GB": "nvidia-a100-80gb", "H100": "nvidia-h100-80gb",
}


@dataclass(frozen=True)
class PoolSpec:
    """One node pool: ``nodes`` machines of ``instance_type``, each with ``gpus_per_node`` accelerators."""

    name: str
    instance_type: str
    accelerator: str
    gpus_per_node: int
    nodes: int
    zone: str
    vcpus: Optional[int] = None
    memory_gib: Optional[float] = None
    gpu_driver: str = "DEFAULT"  # GKE gpu_driver_version, chosen per GPU generation by the caller


@dataclass(frozen=True)
class StackSpec:
    provider: str  # the burst provider the stack is for (recorded, never branched on here)
    cluster: str  # burst's cluster name
    lease_id: str
    expires: int  # unix seconds
    region: str
    pools: tuple[PoolSpec, ...]
    preemptible: bool
    ray_version: str
    project: Optional[str] = None  # GCP project
    external_ip: bool = False  # TPU VMs: no external IP unless asked
    tf_version: str = TPU_TENSORFLOW
    tpu_runtime: Optional[str] = None  # TPU VM image for tf_version on this slice's generation (caller's facts)
    wheel_path: Optional[str] = None  # the burst wheel the TPU hosts install
    image: Optional[str] = None  # prebuilt Ray + TensorFlow + burst image for the pods (None: stock Ray image)
    device_plugin_image: Optional[str] = None  # NVIDIA device plugin, where the provider does not install one
    auth_token: Optional[str] = field(default=None, repr=False)  # Ray's token: every head requires it (a Pulumi secret in the stack)
    config: dict = field(default_factory=dict)  # the stack's Pulumi configuration, e.g. {"gcp:region": ...}
    idle_minutes: Optional[float] = None  # the cluster's keeper ends it after this long with no job (besides its lease's end)
    store_uri: Optional[str] = None  # the region's store (infra.store or the policy's): the cluster is granted access, never owns it
    store_scope: Optional[str] = None  # Azure: the store's storage account resource id (what the grant is on)
    extra: dict = field(default_factory=dict)

    @property
    def stack_name(self) -> str:
        return f"{self.cluster}-{self.lease_id[:8]}"

    @property
    def slug(self) -> str:
        """A name fragment valid for GCP and Azure resources: lowercase, digits and dashes."""
        return safe_name(f"burst-{self.cluster}-{self.lease_id[:6]}", 40)

    def labels(self) -> dict[str, str]:
        """Labels/tags on every resource, so a sweeper can find leftovers of an expired lease."""
        return {"burst-lease": self.lease_id, "burst-expires": str(self.expires), "burst-cluster": safe_name(self.cluster, 63)}

    def require_token(self) -> str:
        """The Ray token, which no stack may be built without (a head without one takes jobs from anyone who reaches it)."""
        if not self.auth_token:
            raise ValueError("a Ray stack needs spec.auth_token: every Ray head burst starts requires the token")
        return self.auth_token

    def require_store(self) -> str:
        """The store this cluster's runs keep their files in; no cluster stack makes one of its own."""
        if not self.store_uri:
            raise ValueError("a cluster stack needs spec.store_uri: the region's store, which outlives the cluster")
        return self.store_uri

    @property
    def store_condition(self) -> Optional[dict]:
        """The IAM condition of a grant on a ``gs://BUCKET/PREFIX`` store: the objects under its
        prefix (and the bucket itself, where listing is checked), not the rest of a bucket that is
        the site's; None for a store that is a whole bucket (burst's region store)."""
        uri = self.require_store()
        bucket, _, prefix = uri.removeprefix("gs://").partition("/")
        prefix = prefix.strip("/")
        if not uri.startswith("gs://") or not prefix:
            return None
        return {"title": f"burst store {prefix}"[:100], "description": f"objects under gs://{bucket}/{prefix}/ only",
                "expression": (f'resource.type == "storage.googleapis.com/Bucket" || '
                               f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{prefix}/")')}

    @property
    def store_container_scope(self) -> str:
        """Azure: the grant's scope, the store's container (a storage account holds others' containers too)."""
        uri = self.require_store()
        container = uri.split("://", 1)[1].split("@", 1)[0]
        return f"{self.store_scope}/blobServices/default/containers/{container}"

    @property
    def store_bucket(self) -> str:
        """The GCS bucket of a ``gs://`` store (its name, without any path)."""
        uri = self.require_store()
        if not uri.startswith("gs://"):
            raise ValueError(f"a Google Cloud cluster's store is a gs:// bucket, not {uri}")
        return uri.removeprefix("gs://").split("/", 1)[0]


def safe_name(text: str, limit: int) -> str:
    """Lowercase letters, digits and dashes, starting with a letter (GCP label and resource rules)."""
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not s or not s[0].isalpha():
        s = "b-" + s
    return s[:limit].rstrip("-")
