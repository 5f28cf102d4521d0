"""A store in one cloud region: the bucket (GCS) or container (Azure Blob) that every cluster of a
project in that region keeps its checkpoints, staged datasets and results in.

A stack of its own, made once per project and region and never destroyed by ``burst down``: the
clusters' stacks only grant their nodes' identity access to it, so a lost spot cluster takes
nothing of its runs with it. Lifecycle rules (the policy's ``stores``) delete checkpoints, staged
datasets and capacity notices after so many days; a run's published results (``runs/``) are kept.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from .spec import safe_name

# What lives where on a store (burst.runtime.job.RunFiles and burst.client.datasets write these).
CHECKPOINT_PREFIXES = ("ray-train/", "tpu-checkpoints/", "resume/")
DATASET_PREFIXES = ("datasets/", "data/")
NOTICE_PREFIXES = ("notices/",)
AZURE_CONTAINER = "burst"
GCS, BLOB = "gcs", "blob"  # the storage services a store can be in


@dataclass(frozen=True)
class StoreSpec:
    """One region's store: ``service`` ``gcs`` (Google Cloud Storage) or ``blob`` (Azure Blob Storage);
    ``project`` the GCP project or the Azure subscription."""

    service: str
    region: str
    project: str
    checkpoints_days: int = 30
    datasets_days: int = 90
    notices_days: int = 7

    @property
    def stack_name(self) -> str:
        return safe_name(f"store-{self.service}-{self.region}", 60)

    @property
    def _tag(self) -> str:
        """A short hash of project and region: bucket and account names are global, so two projects never clash."""
        return hashlib.sha256(f"{self.service}/{self.project}/{self.region}".encode()).hexdigest()[:10]

    @property
    def bucket(self) -> str:
        """The GCS bucket name (3-63 characters, lowercase, digits, dashes)."""
        return safe_name(f"burst-{self.region}-{self._tag}", 63)

    @property
    def account(self) -> str:
        """The Azure storage account name (3-24 lowercase letters and digits)."""
        return f"burst{self._tag}"[:24]

    @property
    def resource_group(self) -> str:
        return safe_name(f"burst-store-{self.region}", 90)

    @property
    def uri(self) -> str:
        if self.service == GCS:
            return f"gs://{self.bucket}"
        return f"abfs://{AZURE_CONTAINER}@{self.account}.dfs.core.windows.net"

    @property
    def scope(self) -> str:
        """The Azure storage account's resource id (what a cluster's identity is granted access on)."""
        return (f"/subscriptions/{self.project}/resourceGroups/{self.resource_group}"
                f"/providers/Microsoft.Storage/storageAccounts/{self.account}")

    @property
    def config(self) -> dict[str, str]:
        """The stack's Pulumi configuration: where, and the lifecycle its rules were made with (kept
        in the stack, so that the next `up`, from any machine sharing the backend, reads them back)."""
        where = {"gcp:project": self.project, "gcp:region": self.region} if self.service == GCS else {"azure-native:location": self.region}
        return {**where, **{f"burst:{rule}Days": str(days) for rule, _, days in self.rules()}}

    def with_rules_of(self, config: dict[str, str]) -> "StoreSpec":
        """This store with the lifecycle days a made stack's configuration holds (those it lacks: as they are)."""
        days = {f"{rule}_days": int(config[f"burst:{rule}Days"]) for rule, _, _ in self.rules()
                if str(config.get(f"burst:{rule}Days", "")).isdigit()}
        return replace(self, **days)

    def labels(self) -> dict[str, str]:
        """Labels/tags on the store: no lease or expiry (a sweeper of expired leases must never take it)."""
        return {"burst-store": safe_name(self.region, 63)}

    def rules(self) -> list[tuple[str, tuple[str, ...], int]]:
        """(name, prefixes, days) of every lifecycle rule."""
        return [("checkpoints", CHECKPOINT_PREFIXES, self.checkpoints_days), ("datasets", DATASET_PREFIXES, self.datasets_days),
                ("notices", NOTICE_PREFIXES, self.notices_days)]


def gcs_program(spec: StoreSpec) -> dict:
    """The region's bucket: uniform access, no public access, lifecycle by prefix, never force-destroyed."""
    import pulumi
    import pulumi_gcp as gcp

    rules = [gcp.storage.BucketLifecycleRuleArgs(action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                                                 condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=days, matches_prefixes=list(prefixes)))
             for _, prefixes, days in spec.rules()]
    bucket = gcp.storage.Bucket(
        "store", name=spec.bucket, project=spec.project, location=spec.region.upper(), force_destroy=False,
        uniform_bucket_level_access=True, public_access_prevention="enforced", lifecycle_rules=rules, labels=spec.labels(),
        opts=pulumi.ResourceOptions(retain_on_delete=True),  # runs' results outlive even a destroyed store stack
    )
    pulumi.export("storage_uri", spec.uri)
    pulumi.export("bucket", bucket.name)
    return {"bucket": bucket}


def azure_program(spec: StoreSpec) -> dict:
    """The region's storage account and container, with a lifecycle management policy by prefix."""
    import pulumi
    from pulumi_azure_native import resources, storage

    tags = spec.labels()
    keep = pulumi.ResourceOptions(retain_on_delete=True)
    rg = resources.ResourceGroup("store-rg", resource_group_name=spec.resource_group, location=spec.region, tags=tags, opts=keep)
    account = storage.StorageAccount(
        "store", account_name=spec.account, resource_group_name=rg.name, location=rg.location,
        kind=storage.Kind.STORAGE_V2, sku=storage.SkuArgs(name=storage.SkuName.STANDARD_LRS),
        allow_blob_public_access=False, minimum_tls_version=storage.MinimumTlsVersion.TLS1_2, tags=tags, opts=keep,
    )
    container = storage.BlobContainer("store-container", account_name=account.name, resource_group_name=rg.name,
                                      container_name=AZURE_CONTAINER, metadata=tags, opts=keep)
    storage.ManagementPolicy(
        "store-lifecycle", account_name=account.name, resource_group_name=rg.name, management_policy_name="default",
        policy=storage.ManagementPolicySchemaArgs(rules=[
            storage.ManagementPolicyRuleArgs(
                name=f"burst-{name}", type="Lifecycle", enabled=True,
                definition=storage.ManagementPolicyDefinitionArgs(
                    actions=storage.ManagementPolicyActionArgs(base_blob=storage.ManagementPolicyBaseBlobArgs(
                        delete=storage.DateAfterModificationArgs(days_after_modification_greater_than=days))),
                    # Azure's prefixes start with the container's name
                    filters=storage.ManagementPolicyFilterArgs(blob_types=["blockBlob"],
                                                               prefix_match=[f"{AZURE_CONTAINER}/{p}" for p in prefixes])))
            for name, prefixes, days in spec.rules()]),
    )
    pulumi.export("storage_uri", spec.uri)
    pulumi.export("scope", account.id)
    return {"resource_group": rg, "account": account, "container": container}
