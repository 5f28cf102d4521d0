"""Azure, for the AKS target (``kuberay.AksTarget``): the subscriptions `az login` recorded, an ARM
token, and the pre-flight questions asked of Azure Resource Manager before anything is created."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BurstError
from . import preflight
from ..catalog import facts

if TYPE_CHECKING:
    import requests

    from ..values.placement import Layout

ARM = "https://management.azure.com"
AZURE_QUOTA_PAGE = "https://portal.azure.com/#view/Microsoft_Azure_Capacity/QuotaMenuBlade/~/myQuotas"


def azure_subscriptions() -> list[dict]:
    """The subscriptions `az login` recorded (``AZURE_CONFIG_DIR``/azureProfile.json); [] when none."""
    profile = Path(os.environ.get("AZURE_CONFIG_DIR", Path.home() / ".azure")) / "azureProfile.json"
    try:
        return json.loads(profile.read_text(encoding="utf-8-sig")).get("subscriptions") or []
    except (OSError, ValueError):
        return []


def azure_subscription() -> str:
    if os.environ.get("ARM_SUBSCRIPTION_ID"):
        return os.environ["ARM_SUBSCRIPTION_ID"]
    default = next((s["id"] for s in azure_subscriptions() if s.get("isDefault")), None)
    if default is None:
        raise BurstError("pre-flight: no Azure subscription: set ARM_SUBSCRIPTION_ID or run `az account set --subscription ID`", exit_code=1)
    return default


def azure_session() -> "requests.Session":
    """A session carrying an ARM token from azure-identity's default chain (CLI login or service principal)."""
    import requests

    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise BurstError("pre-flight: azure-identity is not installed: pip install 'burst[azure]'", exit_code=1) from None
    try:
        token = DefaultAzureCredential().get_token("https://management.azure.com/.default").token
    except Exception as exc:  # noqa: BLE001 - azure-identity raises its own error types per credential
        raise BurstError(f"pre-flight: no Azure token ({str(exc).splitlines()[0][:160]}); run `az login`", exit_code=1) from None
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    return session


def aks_problems(session: "requests.Session", subscription: str, lay: "Layout", preemptible: bool) -> list[str]:
    """The VM size is sold in the region to this subscription, and its vCPU quota family (or the
    Spot pool, lowPriorityCores) and the regional total hold the layout."""
    base = f"{ARM}/subscriptions/{subscription}/providers/Microsoft.Compute"
    skus = preflight.get_json(session, f"{base}/skus?api-version=2021-07-01&$filter=location eq '{lay.region}'", f"Azure (VM sizes in {lay.region})")
    by_name = {s["name"]: s for s in skus.get("value", []) if s.get("resourceType") == "virtualMachines"}
    problems = []
    for pool in lay.pools:
        sku = by_name.get(pool.offer.instance_type)
        if sku is None:
            problems.append(f"{pool.offer.instance_type} is not offered in {lay.region}; pick another --region")
        elif any(r.get("reasonCode") == "NotAvailableForSubscription" for r in sku.get("restrictions", [])):
            problems.append(f"{pool.offer.instance_type} is restricted for this subscription in {lay.region}; "
                            f"request access at {AZURE_QUOTA_PAGE}")
    usage = {u["name"]["value"]: u for u in preflight.get_json(session, f"{base}/locations/{lay.region}/usages?api-version=2023-09-01",
                                                    f"Azure (vCPU quotas in {lay.region})").get("value", [])}
    known = facts.load(lay.provider)
    needs: dict[str, float] = {}
    for pool in lay.pools:
        family = known.quota_family(pool.offer.instance_type)
        vcpus = pool.nodes * (family.vcpus if family else (pool.offer.vcpus or 0))
        if preemptible:
            needs["lowPriorityCores"] = needs.get("lowPriorityCores", 0) + vcpus
        else:
            needs["cores"] = needs.get("cores", 0) + vcpus
            if family:
                needs[family.family] = needs.get(family.family, 0) + vcpus
    for name, need in needs.items():
        u = usage.get(name, {"limit": 0, "currentValue": 0})
        problems.append(preflight.quota_line(f"{name} (vCPUs)", lay.region, need, u["limit"], u["currentValue"], AZURE_QUOTA_PAGE))
    return [p for p in problems if p]


def storage_account_id(session: "requests.Session", subscription: str, uri: str) -> str:
    """The resource id of the storage account of an ``abfs://container@account.dfs.core.windows.net`` store."""
    account = uri.split("@", 1)[1].split(".", 1)[0] if "@" in uri else ""
    if not account:
        raise BurstError(f"store {uri}: an Azure store is abfs://CONTAINER@ACCOUNT.dfs.core.windows.net", exit_code=1)
    url = f"https://management.azure.com/subscriptions/{subscription}/providers/Microsoft.Storage/storageAccounts?api-version=2023-01-01"
    found = [a["id"] for a in preflight.get_json(session, url, "Azure (storage accounts)").get("value", []) if a.get("name") == account]
    if not found:
        raise BurstError(f"store {uri}: no storage account {account!r} in subscription {subscription}; "
                         f"name a store of this subscription in the policy's stores.named, or remove it to let burst make one", exit_code=1)
    return found[0]
