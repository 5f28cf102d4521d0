"""GKE with GPU node pools, access to the region's store, and KubeRay (``--provider gcp``).

Zonal cluster (a regional one would triple every pool's node count), default pool removed,
deletion protection off so ``burst down`` can delete it, workload identity for the Ray pods'
access to the region's store (``infra.store``: a bucket that outlives the cluster), one small system pool for the Ray head and the operator, and one GPU pool
per layout pool, each in the zone the layout gave it (a zone that offers its GPU; a large
request spans several zones of the region, which makes the cluster multi-zonal): machine type
matched to the accelerator, spot when asked, the driver branch the caller chose for the GPU
generation. No explicit GPU taint: GKE puts ``nvidia.com/gpu=present:NoSchedule`` on GPU nodes
itself and rejects a second taint with that key.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from . import kuberay
from .spec import GKE_ACCELERATORS, KSA, RAY_NAMESPACE, StackSpec

SYSTEM_MACHINE = "e2-standard-4"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
TIMEOUTS = pulumi.CustomTimeouts(create="60m", update="60m", delete="45m")


def kubeconfig(cluster: gcp.container.Cluster) -> pulumi.Output[str]:
    """The standard GKE kubeconfig (pulumi/examples gcp-py-gke); needs gke-gcloud-auth-plugin."""
    return pulumi.Output.secret(pulumi.Output.all(cluster.name, cluster.endpoint, cluster.master_auth).apply(lambda a: f"""apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {a[2]['cluster_ca_certificate']}
    server: https://{a[1]}
  name: {a[0]}
contexts:
- context:
    cluster: {a[0]}
    user: {a[0]}
  name: {a[0]}
current-context: {a[0]}
kind: Config
preferences: {{}}
users:
- name: {a[0]}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: gke-gcloud-auth-plugin
      installHint: Install gke-gcloud-auth-plugin for use with kubectl
      provideClusterInfo: true
"""))


def program(spec: StackSpec) -> dict:
    labels = spec.labels()
    zone = spec.pools[0].zone
    other_zones = sorted({p.zone for p in spec.pools} - {zone})
    cluster = gcp.container.Cluster(
        spec.slug, name=spec.slug, project=spec.project, location=zone, node_locations=other_zones or None,
        remove_default_node_pool=True, initial_node_count=1, deletion_protection=False,
        release_channel=gcp.container.ClusterReleaseChannelArgs(channel="REGULAR"),
        workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(workload_pool=f"{spec.project}.svc.id.goog"),
        resource_labels=labels, opts=pulumi.ResourceOptions(custom_timeouts=TIMEOUTS),
    )
    system = gcp.container.NodePool(
        "system", name="system", project=spec.project, cluster=cluster.name, location=zone, node_locations=[zone], node_count=1,
        node_config=gcp.container.NodePoolNodeConfigArgs(
            machine_type=SYSTEM_MACHINE, oauth_scopes=SCOPES, labels={"burst-role": "system"}, resource_labels=labels,
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA")),
        opts=pulumi.ResourceOptions(custom_timeouts=TIMEOUTS),
    )
    pools, previous = [], system
    for pool in spec.pools:
        if pool.accelerator not in GKE_ACCELERATORS:
            raise ValueError(f"GKE has no accelerator type for {pool.accelerator}")
        # One GKE operation per cluster at a time: pools are created one after the other.
        previous = gcp.container.NodePool(
            pool.name, name=pool.name, project=spec.project, cluster=cluster.name, location=zone, node_locations=[pool.zone],
            initial_node_count=pool.nodes,
            # the pool scales to zero once the keeper has deleted the RayCluster at the lease's end
            autoscaling=gcp.container.NodePoolAutoscalingArgs(min_node_count=0, max_node_count=pool.nodes),
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=pool.instance_type, spot=spec.preemptible, oauth_scopes=SCOPES,
                guest_accelerators=[gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                    type=GKE_ACCELERATORS[pool.accelerator], count=pool.gpus_per_node,
                    gpu_driver_installation_config=gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                        gpu_driver_version=pool.gpu_driver))],
                labels={"burst-role": "gpu", "burst-pool": pool.name}, resource_labels=labels,
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA")),
            opts=pulumi.ResourceOptions(custom_timeouts=TIMEOUTS, depends_on=[previous]),
        )
        pools.append(previous)

    # Workload identity: the Ray pods' Kubernetes service account acts as a Google one that may
    # read and write the region's store, and nothing else. The grant goes with the cluster; the store stays.
    gsa = gcp.serviceaccount.Account("ray-sa", account_id=f"{spec.slug[:24]}-ray".strip("-"), project=spec.project,
                                     display_name=f"burst Ray pods of {spec.cluster}",
                                     # service accounts take no labels: the lease goes in the description
                                     description=" ".join(f"{k}={v}" for k, v in labels.items()))
    condition = spec.store_condition  # a named store under a prefix: that prefix only
    gcp.storage.BucketIAMMember("ray-bucket-access", bucket=spec.store_bucket, role="roles/storage.objectAdmin",
                                member=gsa.email.apply(lambda e: f"serviceAccount:{e}"),
                                condition=gcp.storage.BucketIAMMemberConditionArgs(**condition) if condition else None)
    # The workload pool exists once the cluster does (a project's first GKE cluster creates it):
    # the member is taken from the cluster's output, so the binding waits for the cluster.
    pool_name = cluster.workload_identity_config.apply(lambda c: c["workload_pool"] if isinstance(c, dict) else c.workload_pool)
    gcp.serviceaccount.IAMMember("ray-workload-identity", service_account_id=gsa.name, role="roles/iam.workloadIdentityUser",
                                 member=pool_name.apply(lambda p: f"serviceAccount:{p}[{RAY_NAMESPACE}/{KSA}]"),
                                 opts=pulumi.ResourceOptions(depends_on=[cluster]))
    config = kubeconfig(cluster)
    ray = kuberay.KubeRay(
        "ray", spec, config, cluster, pools,
        node_selector_for=lambda p: {"cloud.google.com/gke-nodepool": p.name},
        system_selector={"cloud.google.com/gke-nodepool": "system"},
        tolerations=[kuberay.GPU_TOLERATION], service_account=KSA, storage_uri=spec.require_store(),
    )
    ksa = ray.service_account({"iam.gke.io/gcp-service-account": gsa.email})
    pulumi.export("kubeconfig", config)
    pulumi.export("ray_namespace", ray.namespace)
    pulumi.export("ray_head_service", ray.head_service)
    pulumi.export("storage_uri", spec.require_store())
    pulumi.export("cluster_name", cluster.name)
    pulumi.export("zone", zone)
    return {"cluster": cluster, "system_pool": system, "gpu_pools": pools, "ray": ray, "ksa": ksa}
