"""AKS with GPU agent pools, access to the region's store, and KubeRay (``--provider azure``).

Its own resource group per burst (deleting it is the backstop for anything left), a cluster
whose only inline pool is the system pool, GPU pools as separate ``AgentPool`` resources (extra
inline profiles trigger the re-creation bugs in pulumi-azure-native#579/#2719), Spot priority
when asked with its automatic ``scalesetpriority=spot:NoSchedule`` taint tolerated by the Ray
workers, and the same KubeRay module as GKE. AKS installs the NVIDIA driver on GPU nodes but not
the device plugin: without the plugin's DaemonSet no node advertises ``nvidia.com/gpu`` and
every Ray worker stays Pending, so the stack deploys it on the GPU pools (tolerating their GPU
and Spot taints). The Ray pods reach the blob container through Azure AD workload identity (a
managed identity of their own, federated with their Kubernetes service account, allowed the
region's store, ``infra.store``, which outlives the cluster): no account key exists in the cluster, in a Secret or in any pod's environment.
"""

from __future__ import annotations

import base64

import pulumi
import pulumi_kubernetes as k8s
from pulumi_azure_native import authorization, containerservice, managedidentity, resources

from . import kuberay
from .spec import KSA, RAY_NAMESPACE, StackSpec

SYSTEM_VM = "Standard_D4s_v5"
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"  # Azure's built-in role: read, write and delete blobs
WORKLOAD_IDENTITY_AUDIENCE = "api://AzureADTokenExchange"


def program(spec: StackSpec) -> dict:
    tags = spec.labels()
    rg = resources.ResourceGroup("rg", resource_group_name=spec.slug, location=spec.region, tags=tags)
    cluster = containerservice.ManagedCluster(
        "aks", resource_name_=spec.slug, resource_group_name=rg.name, location=rg.location, dns_prefix=spec.slug,
        identity=containerservice.ManagedClusterIdentityArgs(type=containerservice.ResourceIdentityType.SYSTEM_ASSIGNED),
        agent_pool_profiles=[containerservice.ManagedClusterAgentPoolProfileArgs(
            name="system", mode=containerservice.AgentPoolMode.SYSTEM, vm_size=SYSTEM_VM, count=1, os_type="Linux",
            type=containerservice.AgentPoolType.VIRTUAL_MACHINE_SCALE_SETS, tags=tags)],
        oidc_issuer_profile=containerservice.ManagedClusterOIDCIssuerProfileArgs(enabled=True),
        security_profile=containerservice.ManagedClusterSecurityProfileArgs(
            workload_identity=containerservice.ManagedClusterSecurityProfileWorkloadIdentityArgs(enabled=True)),
        tags=tags, opts=pulumi.ResourceOptions(custom_timeouts=pulumi.CustomTimeouts(create="60m", delete="45m")),
    )
    pools = []
    for pool in spec.pools:
        spot = dict(scale_set_priority=containerservice.ScaleSetPriority.SPOT,
                    scale_set_eviction_policy=containerservice.ScaleSetEvictionPolicy.DELETE, spot_max_price=-1) if spec.preemptible else {}
        pools.append(containerservice.AgentPool(
            pool.name, agent_pool_name=pool.name.replace("-", "")[:12], resource_group_name=rg.name, resource_name_=cluster.name,
            mode=containerservice.AgentPoolMode.USER, vm_size=pool.instance_type, count=pool.nodes, os_type="Linux",
            # scales to zero once the keeper has deleted the RayCluster at the lease's end
            enable_auto_scaling=True, min_count=0, max_count=pool.nodes,
            node_taints=["nvidia.com/gpu=present:NoSchedule"], node_labels={"burst-role": "gpu", "burst-pool": pool.name},
            tags=tags, **spot, opts=pulumi.ResourceOptions(custom_timeouts=pulumi.CustomTimeouts(create="60m", delete="45m")),
        ))
    store = spec.require_store()  # the region's store (infra.store): the cluster is granted its blobs, never owns them
    if not store.startswith(("abfs://", "abfss://")) or "@" not in store or not spec.store_scope:
        raise ValueError(f"an AKS cluster's store is an abfs:// container with its account's resource id (spec.store_scope), not {store}")
    account_name = store.split("@", 1)[1].split(".", 1)[0]
    creds = containerservice.list_managed_cluster_user_credentials_output(resource_group_name=rg.name, resource_name=cluster.name)
    config = pulumi.Output.secret(creds.kubeconfigs[0].value.apply(lambda b64: base64.b64decode(b64).decode()))
    identity = storage_identity(spec, rg, cluster, tags)
    ray = kuberay.KubeRay(
        "ray", spec, config, cluster, pools,
        node_selector_for=lambda p: {"burst-pool": p.name},
        system_selector={"kubernetes.azure.com/mode": "system"},
        tolerations=[kuberay.GPU_TOLERATION] + ([kuberay.AKS_SPOT_TOLERATION] if spec.preemptible else []),
        env=[{"name": "AZURE_STORAGE_ACCOUNT_NAME", "value": account_name}], service_account=KSA,
        pod_labels={"azure.workload.identity/use": "true"},  # the webhook gives these pods the federated token
        storage_uri=store,
    )
    ksa = ray.service_account({"azure.workload.identity/client-id": identity.client_id})
    plugin = device_plugin(spec, tags, ray.object_opts)
    pulumi.export("kubeconfig", config)
    pulumi.export("ray_namespace", ray.namespace)
    pulumi.export("ray_head_service", ray.head_service)
    pulumi.export("storage_uri", store)
    pulumi.export("cluster_name", cluster.name)
    pulumi.export("resource_group", rg.name)
    return {"resource_group": rg, "cluster": cluster, "gpu_pools": pools, "ray": ray,
            "identity": identity, "ksa": ksa, "device_plugin": plugin}


def storage_identity(spec: StackSpec, rg, cluster, tags: dict) -> managedidentity.UserAssignedIdentity:
    """The Ray pods' Azure identity: trusted for their service account's tokens, allowed the store's blobs."""
    identity = managedidentity.UserAssignedIdentity("ray-identity", resource_name_=f"{spec.slug}-ray", resource_group_name=rg.name,
                                                   location=rg.location, tags=tags)
    managedidentity.FederatedIdentityCredential(
        "ray-federation", federated_identity_credential_resource_name="burst-ray", resource_group_name=rg.name,
        resource_name_=identity.name, issuer=cluster.oidc_issuer_profile.apply(lambda p: p.issuer_url if p else None),
        subject=f"system:serviceaccount:{RAY_NAMESPACE}:{KSA}", audiences=[WORKLOAD_IDENTITY_AUDIENCE])
    subscription = authorization.get_client_config_output().subscription_id
    authorization.RoleAssignment(
        "ray-blob-access", principal_id=identity.principal_id, principal_type=authorization.PrincipalType.SERVICE_PRINCIPAL,
        role_definition_id=subscription.apply(
            lambda s: f"/subscriptions/{s}/providers/Microsoft.Authorization/roleDefinitions/{BLOB_DATA_CONTRIBUTOR}"),
        scope=spec.store_container_scope)  # the store's container, not the whole account
    return identity


def device_plugin(spec: StackSpec, tags: dict, opts: pulumi.ResourceOptions) -> k8s.apps.v1.DaemonSet:
    """NVIDIA's device plugin on every GPU node: it advertises ``nvidia.com/gpu`` to the scheduler."""
    if not spec.device_plugin_image:
        raise ValueError("an AKS GPU stack needs spec.device_plugin_image (the NVIDIA device plugin to deploy)")
    labels = {"app": "nvidia-device-plugin", **tags}
    tolerations = [kuberay.GPU_TOLERATION, kuberay.AKS_SPOT_TOLERATION, {"key": "CriticalAddonsOnly", "operator": "Exists"}]
    pod = {
        "priorityClassName": "system-node-critical",
        "nodeSelector": {"burst-role": "gpu"},
        "tolerations": tolerations,
        "containers": [{
            "name": "nvidia-device-plugin", "image": spec.device_plugin_image,
            "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
        }],
        "volumes": [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
    }
    return k8s.apps.v1.DaemonSet(
        "nvidia-device-plugin",
        metadata={"name": "nvidia-device-plugin", "namespace": "kube-system", "labels": labels},
        spec={"selector": {"matchLabels": {"app": "nvidia-device-plugin"}}, "updateStrategy": {"type": "RollingUpdate"},
              "template": {"metadata": {"labels": labels}, "spec": pod}},
        opts=opts,
    )
