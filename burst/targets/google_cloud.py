"""Google Cloud, for the targets that run there (GKE through ``kuberay.GkeTarget``, TPU VMs through
``tpu_vm.TpuVmTarget``): the project and credentials every stack needs, and the pre-flight
questions asked of Compute Engine and Cloud TPU before anything is created."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..errors import BurstError
from . import preflight
from ..catalog import facts
from .pulumi_stack import PulumiTarget

if TYPE_CHECKING:
    import requests

    from ..values.placement import Layout

COMPUTE = "https://compute.googleapis.com/compute/v1"
TPU_API = "https://tpu.googleapis.com/v2"
GCP_QUOTA_PAGE = "https://console.cloud.google.com/iam-admin/quotas?project={project}"


class GoogleCloudStack(PulumiTarget):
    """What every Google Cloud target shares: the project, the stack's config, the credentials."""

    def preflight_session(self):
        return google_session()  # looked up when called: the tests serve recorded responses through it

    vendor = "gcp"
    store_schemes = ("gs",)

    def stack_config(self, spec_fields: dict) -> dict[str, str]:
        return {"gcp:project": spec_fields["project"] or "", "gcp:region": spec_fields["region"]}

    def project(self) -> Optional[str]:
        return gcp_project()

    def missing_credentials(self) -> list[str]:
        return missing_gcp_credentials()


def gcp_project() -> Optional[str]:
    for var in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "GCLOUD_PROJECT"):
        if os.environ.get(var):
            return os.environ[var]
    return None


def missing_gcp_credentials() -> list[str]:
    """Application-default credentials and a project, which every Google Cloud stack needs."""
    problems = []
    adc = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    default = Path(os.environ.get("CLOUDSDK_CONFIG", Path.home() / ".config" / "gcloud")) / "application_default_credentials.json"
    if adc and not Path(adc).is_file():
        problems.append(f"GOOGLE_APPLICATION_CREDENTIALS points to {adc}, which does not exist")
    elif not adc and not default.is_file():
        problems.append("no Google Cloud application-default credentials: run `gcloud auth application-default login` "
                        "or set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file")
    if gcp_project() is None:
        problems.append("no Google Cloud project: set GOOGLE_CLOUD_PROJECT to your project id")
    return problems


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


def gke_problems(session: "requests.Session", project: str, lay: "Layout", preemptible: bool) -> list[str]:
    """Zone accelerator lists, the region's GPU (and N1 CPU) quota, and the project's global GPU quota."""
    from infra.spec import GKE_ACCELERATORS  # the GKE stack's own map (plain data, no Pulumi)

    problems = []
    gpu_type = GKE_ACCELERATORS.get(lay.accelerator, lay.accelerator)
    for zone in lay.zones:
        offered = {a["name"] for a in preflight.get_json(session, f"{COMPUTE}/projects/{project}/zones/{zone}/acceleratorTypes",
                                           f"Compute Engine (accelerator types of {zone})").get("items", [])}
        if gpu_type not in offered:
            problems.append(f"zone {zone} does not offer {gpu_type} (it offers: {', '.join(sorted(offered)) or 'no GPUs'}); "
                            f"pick another --region or update burst's provider facts")
    page = GCP_QUOTA_PAGE.format(project=project)
    region = {q["metric"]: q for q in preflight.get_json(session, f"{COMPUTE}/projects/{project}/regions/{lay.region}",
                                           f"Compute Engine (quotas of {lay.region})").get("quotas", [])}
    metrics = facts.load(lay.provider).quota_metrics(lay.accelerator)
    if metrics is not None:
        metric = metrics.spot if preemptible else metrics.on_demand
        q = region.get(metric, {"limit": 0, "usage": 0})
        problems.append(preflight.quota_line(metric, lay.region, lay.count, q["limit"], q["usage"], page))
    n1_cpus = sum(p.nodes * (p.offer.vcpus or 0) for p in lay.pools if p.offer.instance_type.startswith("n1-"))
    if n1_cpus:  # N1 counts against CPUS; Spot VMs against PREEMPTIBLE_CPUS where the project has that quota
        metric = "PREEMPTIBLE_CPUS" if preemptible and region.get("PREEMPTIBLE_CPUS", {}).get("limit", 0) > 0 else "CPUS"
        q = region.get(metric, {"limit": 0, "usage": 0})
        problems.append(preflight.quota_line(metric, lay.region, n1_cpus, q["limit"], q["usage"], page))
    project_quotas = {q["metric"]: q for q in preflight.get_json(session, f"{COMPUTE}/projects/{project}", "Compute Engine (project quotas)").get("quotas", [])}
    q = project_quotas.get("GPUS_ALL_REGIONS")
    if q is not None:
        problems.append(preflight.quota_line("GPUS_ALL_REGIONS", "all regions", lay.count, q["limit"], q["usage"], page))
    return [p for p in problems if p]


def tpu_problems(session: "requests.Session", project: str, lay: "Layout", runtime: str) -> list[str]:
    """The zone offers the slice, and the runtime image exists there (TPU quota is not readable
    from the TPU API; a shortfall shows when the slice is created)."""
    zone = lay.zones[0]
    slice_type = lay.accelerator.removeprefix("tpu-")
    base = f"{TPU_API}/projects/{project}/locations/{zone}"
    types = {t.get("type") for t in preflight.get_json(session, f"{base}/acceleratorTypes", f"Cloud TPU (slices of {zone})").get("acceleratorTypes", [])}
    problems = []
    if slice_type not in types:
        problems.append(f"zone {zone} does not offer TPU {slice_type} (it offers: {', '.join(sorted(t for t in types if t)) or 'none'})")
    versions = {v.get("version") for v in preflight.get_json(session, f"{base}/runtimeVersions", f"Cloud TPU (runtime versions of {zone})").get("runtimeVersions", [])}
    if runtime not in versions:
        close = sorted(v for v in versions if v and v.startswith("tpu-vm-tf-"))[-4:]
        problems.append(f"TPU runtime {runtime} is not offered in {zone} (TensorFlow runtimes there: {', '.join(close) or 'none'}); "
                        f"fix the runtimes table in {facts.FACTS_DIR / 'gcp-tpu.yaml'}")
    return problems
