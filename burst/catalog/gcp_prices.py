"""Google's public price list: the Cloud Billing Catalog API
(https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list), read with the user's
credentials (an API key in ``BURST_GCP_API_KEY``, else ``gcloud auth print-access-token``).

Google prices parts, not shapes: a GKE GPU node is its GPUs (one SKU per GPU model, "Nvidia
Tesla T4 GPU running in Americas"), its vCPUs and its memory (one SKU each per machine series,
"N1 Predefined Instance Core", "A2 Instance Ram"); a Cloud TPU slice is priced per device
(v2/v3: 8 TensorCores, with separate "Pod" SKUs above 8 cores; v4: pod SKUs only) or per chip
(v5p, v5e, v6e, listed among Compute Engine's SKUs). Spot GPUs and hosts are the same SKUs with
usage type ``Preemptible``; preemptible TPUs have "Preemptible" in their description. These
rules are SkyPilot's ``sky/catalog/data_fetchers/fetch_gcp.py``, which builds its public GCP
catalog (the one burst's rows were first copied from) from the same API.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.parse
from typing import Callable, Mapping, Optional

from ..errors import BurstError
from . import price_fetch

BILLING_URL = "https://cloudbilling.googleapis.com/v1"
#: tests point the refresh at a local server answering with recorded responses
URL_ENV = "BURST_GCP_BILLING_URL"
KEY_ENV = "BURST_GCP_API_KEY"
COMPUTE_SERVICE = "6F81-5844-456A"  # Compute Engine: GPUs, hosts, TPU v5 and v6e
TPU_SERVICE = "E000-3F24-B8AA"      # Cloud TPU: v2, v3, v4
MAX_PAGES = 200                     # Compute Engine lists a few thousand SKUs, 5,000 a page
NEEDS = (f"Google's Cloud Billing Catalog API needs your credentials: run `gcloud auth login`, or set {KEY_ENV} "
         "to an API key of a project with the Cloud Billing API enabled; the catalog is unchanged")

#: machine series -> the words its vCPU and memory SKUs carry
SERIES = {"n1": "N1 Predefined Instance", "g2": "G2 Instance", "a2": "A2 Instance", "a3": "A3 Instance"}
#: burst's accelerator name -> the words its GPU SKU carries ("A100 GPU" is not in "A100 80GB GPU")
GPU_WORDS = {"T4": "T4 GPU", "V100": "V100 GPU", "L4": "L4 GPU", "A100-40GB": "A100 GPU", "A100-80GB": "A100 80GB GPU",
             "H100": "H100 80GB GPU"}

#: generations priced per chip (in Compute Engine's SKUs): the size units one chip SKU covers
CORES_PER_CHIP_SKU = {"v5p": 2, "v5litepod": 1, "v6e": 1}

Price = Optional[tuple[float, Optional[float]]]


def credentials() -> tuple[dict[str, str], dict[str, str]]:
    """(query parameters, headers) that authenticate a Cloud Billing request; one line when there are none."""
    key = os.environ.get(KEY_ENV, "").strip()
    if key:
        return {"key": key}, {}
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise BurstError(NEEDS.replace("run `gcloud auth login`", "install the Google Cloud CLI and run `gcloud auth login`"))
    try:
        done = subprocess.run([gcloud, "auth", "print-access-token"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BurstError(f"{NEEDS} (gcloud: {exc})") from None
    token = done.stdout.strip()
    if done.returncode != 0 or not token:
        said = next((line.strip() for line in done.stderr.splitlines() if line.strip()), f"exit {done.returncode}")
        raise BurstError(f"{NEEDS} (gcloud said: {said})")
    return {}, {"Authorization": f"Bearer {token}"}


def skus(service: str, auth: tuple[dict[str, str], dict[str, str]]) -> list[dict]:
    """Every on-demand and preemptible compute SKU of a service, all pages (commitments,
    custom, premium, reserved and sole-tenant SKUs left out, as SkyPilot's fetcher does)."""
    base = os.environ.get(URL_ENV) or BILLING_URL
    params, headers = auth
    found: list[dict] = []
    token = ""
    for _ in range(MAX_PAGES):
        query = {"currencyCode": "USD", "pageSize": "5000", **params, **({"pageToken": token} if token else {})}
        page = price_fetch.fetch_json(f"{base}/services/{service}/skus?{urllib.parse.urlencode(query)}", headers=headers,
                                      hint="`gcloud auth login` again, or a key whose project has the Cloud Billing API enabled")
        if not isinstance(page, dict) or not isinstance(page.get("skus", []), list):
            raise BurstError(f"the Cloud Billing Catalog's answer for service {service} has no skus list; the catalog is unchanged")
        found += [s for s in page.get("skus", []) if _kept(s)]
        token = page.get("nextPageToken") or ""
        if not token:
            return found
    raise BurstError(f"the Cloud Billing Catalog kept paging past {MAX_PAGES} pages for service {service}; the catalog is unchanged")


def _kept(sku: object) -> bool:
    if not isinstance(sku, dict) or not isinstance(sku.get("category"), dict):
        return False
    category, words = sku["category"], str(sku.get("description", "")).lower()
    return (category.get("resourceFamily") == "Compute" and category.get("usageType") in ("OnDemand", "Preemptible")
            and not any(w in words for w in ("custom", "premium", "reserved", "sole tenancy", "commitment")))


def unit_price(sku: dict) -> Optional[float]:
    """The SKU's price per unit (hour, or GiB-hour for memory) in USD: its first tier, as SkyPilot reads it."""
    try:
        price = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"]
        return int(price.get("units", 0) or 0) + int(price.get("nanos", 0) or 0) / 1e9
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _find(found: list[dict], region: str, spot: bool, test: Callable[[dict, str], bool]) -> Optional[float]:
    usage = "Preemptible" if spot else "OnDemand"
    for sku in found:
        if region in sku.get("serviceRegions", ()) and sku["category"].get("usageType") == usage and test(sku, sku.get("description", "")):
            return unit_price(sku)
    return None


def node_price(found: list[dict], row: Mapping[str, str], spot: bool) -> Optional[float]:
    """A GKE node's hourly price: its GPUs + vCPUs + memory, from the Compute Engine SKUs."""
    series = SERIES.get(row["instance_type"].split("-")[0])
    words = GPU_WORDS.get(row["accelerator"])
    if series is None or words is None or not row.get("vcpus") or not row.get("memory_gib"):
        return None
    region = row["region"]

    def host(part: str):
        def test(sku: dict, text: str) -> bool:
            group = sku["category"].get("resourceGroup")
            return (series.lower() in text.lower()
                    and (group == ("CPU" if part == "Core" else "RAM") or (group == "N1Standard" and part in text)))
        return test

    gpu = _find(found, region, spot, lambda sku, text: sku["category"].get("resourceGroup") == "GPU" and words in text)
    core = _find(found, region, spot, host("Core"))
    ram = _find(found, region, spot, host("Ram"))
    if gpu is None or core is None or ram is None:
        return None
    return round(int(row["accelerator_count"]) * gpu + float(row["vcpus"]) * core + float(row["memory_gib"]) * ram, 5)


def slice_price(found: list[dict], row: Mapping[str, str], spot: bool) -> Optional[float]:
    """A Cloud TPU slice's hourly price from its generation's device, pod or chip SKU."""
    _, version, size = row["instance_type"].split("-", 2)
    cores = int(size)  # chips for v5e and v6e
    words = {"v5p": "TpuV5p", "v5litepod": "TpuV5e", "v6e": "TpuV6e"}.get(version, f"Tpu-{version}")
    pod = version not in CORES_PER_CHIP_SKU and (cores > 8 or version == "v4")
    for sku in found:
        text = str(sku.get("description", ""))
        if (row["region"] in sku.get("serviceRegions", ()) and words in text and ("Preemptible" in text) == spot
                and ("Pod" in text) == pod):
            price = unit_price(sku)
            if price is None:
                return None
            return round(cores * price / CORES_PER_CHIP_SKU.get(version, 8), 5)  # v2, v3, v4: a SKU unit is 8 cores
    return None


class GoogleCloudBilling:
    """The price list ``burst catalog refresh --provider gcp|gcp-tpu`` reads (with your credentials)."""

    needs_account = True
    unlisted = "no SKU prices all its parts in this region (GPU, vCPU and memory, or the TPU device)"

    def source(self, today: str) -> str:
        return f"Google Cloud Billing Catalog API (cloudbilling.googleapis.com v1, SKUs bundled as SkyPilot's fetch_gcp.py does), read {today}"

    def reader(self) -> Callable[[Mapping[str, str]], Price]:
        """A lookup that reads the SKU lists once, on the first row it prices."""
        cache: dict[str, list[dict]] = {}

        def load() -> list[dict]:
            if not cache:
                auth = credentials()
                cache["all"] = skus(COMPUTE_SERVICE, auth) + skus(TPU_SERVICE, auth)
            return cache["all"]

        def lookup(row: Mapping[str, str]) -> Price:
            found = load()
            price = slice_price if row.get("unit") == "tpu-slice" else node_price
            od = price(found, row, spot=False)
            if od is None:
                return None
            spot = price(found, row, spot=True)
            return od, (spot if spot is not None and spot < od else None)

        return lookup
