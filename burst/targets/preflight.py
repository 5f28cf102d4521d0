"""Pre-flight: ask the provider, before anything is created, whether the layout can come up.

Quotas (a new project's GPU quota is 0), whether each zone offers the accelerator, whether the
TPU runtime image exists: each shortfall is one line naming the quota or the fact, what the
layout needs, what the provider allows, and where to fix it. Runs before ``burst up`` creates
anything, and alone with ``burst up --check``.

The provider APIs are read with plain authenticated HTTP (``google-auth``'s ``AuthorizedSession``,
``azure-identity`` for an ARM token): both are ``requests`` sessions, so the tests serve recorded
responses through ``Session.mount``, the seam ``requests`` documents for transports.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Optional

from ..errors import BurstError
from ..placement import facts

if TYPE_CHECKING:
    import requests

    from ..placement.layout import Layout

COMPUTE = "https://compute.googleapis.com/compute/v1"
TPU_API = "https://tpu.googleapis.com/v2"
ARM = "https://management.azure.com"
GCP_QUOTA_PAGE = "https://console.cloud.google.com/iam-admin/quotas?project={project}"
AZURE_QUOTA_PAGE = "https://portal.azure.com/#view/Microsoft_Azure_Capacity/QuotaMenuBlade/~/myQuotas"


def _get(session: "requests.Session", url: str, what: str) -> dict:
    import requests

    try:
        response = session.get(url, timeout=30)
    except requests.RequestException as exc:
        raise BurstError(f"pre-flight: could not ask {what} ({exc.__class__.__name__}: {str(exc)[:160]}); "
                         "check the network and try again", exit_code=1) from None
    except Exception as exc:  # noqa: BLE001 - credential refresh errors of google-auth / azure-identity
        raise BurstError(f"pre-flight: the credentials were refused while asking {what} ({str(exc).splitlines()[0][:200]}); "
                         "log in again (`gcloud auth application-default login` / `az login`)", exit_code=1) from None
    if response.status_code in (401, 403):
        raise BurstError(f"pre-flight: {what} answered {response.status_code} (not allowed): the account needs read access "
                         f"to quotas and machine types of the project/subscription", exit_code=1)
    if response.status_code == 404:
        raise BurstError(f"pre-flight: {what} answered 404: the project, subscription or location does not exist "
                         f"({url.split('?')[0]})", exit_code=1)
    if response.status_code >= 400:
        raise BurstError(f"pre-flight: {what} answered HTTP {response.status_code}: {response.text[:200]}", exit_code=1)
    return response.json()


# ---------------------------------------------------------------------- Google Cloud


def google_session() -> "requests.Session":
    """An authorised session with the application-default credentials (the stacks' credentials)."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    from google.auth.transport.requests import AuthorizedSession

    try:
        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except DefaultCredentialsError as exc:
        raise BurstError(f"pre-flight: no Google Cloud credentials ({str(exc).splitlines()[0][:160]}); "
                         "run `gcloud auth application-default login`", exit_code=1) from None
    return AuthorizedSession(credentials)


def _quota_line(metric: str, where: str, need: float, limit: float, usage: float, page: str) -> Optional[str]:
    if usage + need <= limit:
        return None
    return (f"quota {metric} in {where}: the layout needs {need:g}, the limit is {limit:g} with {usage:g} in use; "
            f"raise it at {page}")


def gke_problems(session: "requests.Session", project: str, lay: "Layout", preemptible: bool) -> list[str]:
    """Zone accelerator lists, the region's GPU (and N1 CPU) quota, and the project's global GPU quota."""
    from infra.spec import GKE_ACCELERATORS  # the GKE stack's own map (plain data, no Pulumi)

    problems = []
    gpu_type = GKE_ACCELERATORS.get(lay.accelerator, lay.accelerator)
    for zone in lay.zones:
        offered = {a["name"] for a in _get(session, f"{COMPUTE}/projects/{project}/zones/{zone}/acceleratorTypes",
                                           f"Compute Engine (accelerator types of {zone})").get("items", [])}
        if gpu_type not in offered:
            problems.append(f"zone {zone} does not offer {gpu_type} (it offers: {', '.join(sorted(offered)) or 'no GPUs'}); "
                            f"pick another --region or update burst's provider facts")
    page = GCP_QUOTA_PAGE.format(project=project)
    region = {q["metric"]: q for q in _get(session, f"{COMPUTE}/projects/{project}/regions/{lay.region}",
                                           f"Compute Engine (quotas of {lay.region})").get("quotas", [])}
    metrics = facts.load(lay.provider).quota_metrics(lay.accelerator)
    if metrics is not None:
        metric = metrics.spot if preemptible else metrics.on_demand
        q = region.get(metric, {"limit": 0, "usage": 0})
        problems.append(_quota_line(metric, lay.region, lay.count, q["limit"], q["usage"], page))
    n1_cpus = sum(p.nodes * (p.offer.vcpus or 0) for p in lay.pools if p.offer.instance_type.startswith("n1-"))
    if n1_cpus:  # N1 counts against CPUS; Spot VMs against PREEMPTIBLE_CPUS where the project has that quota
        metric = "PREEMPTIBLE_CPUS" if preemptible and region.get("PREEMPTIBLE_CPUS", {}).get("limit", 0) > 0 else "CPUS"
        q = region.get(metric, {"limit": 0, "usage": 0})
        problems.append(_quota_line(metric, lay.region, n1_cpus, q["limit"], q["usage"], page))
    project_quotas = {q["metric"]: q for q in _get(session, f"{COMPUTE}/projects/{project}", "Compute Engine (project quotas)").get("quotas", [])}
    q = project_quotas.get("GPUS_ALL_REGIONS")
    if q is not None:
        problems.append(_quota_line("GPUS_ALL_REGIONS", "all regions", lay.count, q["limit"], q["usage"], page))
    return [p for p in problems if p]


def tpu_problems(session: "requests.Session", project: str, lay: "Layout", runtime: str) -> list[str]:
    """The zone offers the slice, and the runtime image exists there (TPU quota is not readable
    from the TPU API; a shortfall shows when the slice is created)."""
    zone = lay.zones[0]
    slice_type = lay.accelerator.removeprefix("tpu-")
    base = f"{TPU_API}/projects/{project}/locations/{zone}"
    types = {t.get("type") for t in _get(session, f"{base}/acceleratorTypes", f"Cloud TPU (slices of {zone})").get("acceleratorTypes", [])}
    problems = []
    if slice_type not in types:
        problems.append(f"zone {zone} does not offer TPU {slice_type} (it offers: {', '.join(sorted(t for t in types if t)) or 'none'})")
    versions = {v.get("version") for v in _get(session, f"{base}/runtimeVersions", f"Cloud TPU (runtime versions of {zone})").get("runtimeVersions", [])}
    if runtime not in versions:
        close = sorted(v for v in versions if v and v.startswith("tpu-vm-tf-"))[-4:]
        problems.append(f"TPU runtime {runtime} is not offered in {zone} (TensorFlow runtimes there: {', '.join(close) or 'none'}); "
                        f"fix the runtimes table in {facts.FACTS_DIR / 'gcp-tpu.yaml'}")
    return problems


# ---------------------------------------------------------------------- Azure


def azure_subscription() -> str:
    if os.environ.get("ARM_SUBSCRIPTION_ID"):
        return os.environ["ARM_SUBSCRIPTION_ID"]
    from .pulumi_stack import azure_subscriptions

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
    skus = _get(session, f"{base}/skus?api-version=2021-07-01&$filter=location eq '{lay.region}'", f"Azure (VM sizes in {lay.region})")
    by_name = {s["name"]: s for s in skus.get("value", []) if s.get("resourceType") == "virtualMachines"}
    problems = []
    for pool in lay.pools:
        sku = by_name.get(pool.offer.instance_type)
        if sku is None:
            problems.append(f"{pool.offer.instance_type} is not offered in {lay.region}; pick another --region")
        elif any(r.get("reasonCode") == "NotAvailableForSubscription" for r in sku.get("restrictions", [])):
            problems.append(f"{pool.offer.instance_type} is restricted for this subscription in {lay.region}; "
                            f"request access at {AZURE_QUOTA_PAGE}")
    usage = {u["name"]["value"]: u for u in _get(session, f"{base}/locations/{lay.region}/usages?api-version=2023-09-01",
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
        problems.append(_quota_line(f"{name} (vCPUs)", lay.region, need, u["limit"], u["currentValue"], AZURE_QUOTA_PAGE))
    return [p for p in problems if p]


def run(check: Callable[[], list[str]], provider: str, report_ok: Callable[[str], None]) -> None:
    """Raise one ``BurstError`` listing every shortfall; else report that the pre-flight passed."""
    problems = check()
    if problems:
        raise BurstError(f"pre-flight for {provider} found {len(problems)} problem{'s' if len(problems) > 1 else ''}, nothing was created: "
                         + " | ".join(problems), exit_code=1)
    report_ok(f"pre-flight: quotas, zones and images of {provider} hold the layout")
