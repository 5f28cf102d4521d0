"""`burst catalog refresh --provider gcp|gcp-tpu` against a local server answering as Google's
Cloud Billing Catalog API does (``GET /v1/services/{service}/skus``, pages joined by
``nextPageToken``, SKUs in the documented shape: description, category, serviceRegions,
pricingInfo[].pricingExpression.tieredRates[].unitPrice{units, nanos}).

No network reaches Google from here, so the answers are built, not recorded. The us-central1
unit prices of n1 hosts, T4, V100, A2 hosts, A100 and the TPU devices and chips are Google's list
prices (the ones SkyPilot's catalog was built from): the refresh must then give back the packaged
rows' own prices, which checks the bundling of GPU, vCPU and memory SKUs. Prices marked TEST are
test values, not Google's.
"""

import csv
import json
import urllib.parse

import pytest
from typer.testing import CliRunner

from burst.cli import app
from burst.catalog import offers as catalog
from burst.catalog import gcp_prices
from tests.support.http_stub import Answering, serve

US = ["us-central1", "us-east1"]
EU = ["europe-west4"]


def _sku(description, group, usage, price, regions, family="Compute"):
    units, nanos = int(price), round((price - int(price)) * 1e9)
    return {"name": f"services/x/skus/{abs(hash(description + usage)) % 10**8}", "skuId": "X", "description": description,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": family, "resourceGroup": group, "usageType": usage},
            "serviceRegions": regions,
            "pricingInfo": [{"pricingExpression": {"usageUnit": "h", "tieredRates": [
                {"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos}}]}}]}


COMPUTE = [
    # listed first and cheaper: a reader that kept commitments or custom shapes would take them
    _sku("Commitment v1: Nvidia Tesla T4 GPU in Americas for 1 Year", "GPU", "Commit1Yr", 0.01, US),
    _sku("Custom Instance Core running in Americas", "N1Standard", "OnDemand", 0.001, US),
    _sku("Reserved Nvidia Tesla T4 GPU running in Americas", "GPU", "OnDemand", 0.02, US),
    _sku("N1 Predefined Instance Core running in Americas", "N1Standard", "OnDemand", 0.031611, US),
    _sku("N1 Predefined Instance Ram running in Americas", "N1Standard", "OnDemand", 0.004237, US),
    _sku("Spot Preemptible N1 Predefined Instance Core running in Americas", "N1Standard", "Preemptible", 0.00698, US),  # TEST
    _sku("Spot Preemptible N1 Predefined Instance Ram running in Americas", "N1Standard", "Preemptible", 0.00094, US),  # TEST
    _sku("Nvidia Tesla T4 GPU running in Americas", "GPU", "OnDemand", 0.35, US),
    _sku("Spot Preemptible Nvidia Tesla T4 GPU running in Americas", "GPU", "Preemptible", 0.14, US),  # TEST
    _sku("Nvidia Tesla V100 GPU running in Americas", "GPU", "OnDemand", 2.48, US),
    _sku("A2 Instance Core running in Americas", "CPU", "OnDemand", 0.031611, US),
    _sku("A2 Instance Ram running in Americas", "RAM", "OnDemand", 0.004237, US),
    _sku("Nvidia Tesla A100 80GB GPU running in Americas", "GPU", "OnDemand", 3.0, US),  # TEST; must not price an A100-40GB
    _sku("Nvidia Tesla A100 GPU running in Americas", "GPU", "OnDemand", 2.933908, US),
    _sku("G2 Instance Core running in Americas", "CPU", "OnDemand", 0.025, US),  # TEST
    _sku("G2 Instance Ram running in Americas", "RAM", "OnDemand", 0.003, US),  # TEST
    _sku("Nvidia L4 GPU running in Americas", "GPU", "OnDemand", 0.56, US),  # TEST
    # Europe: a T4 node priced afresh (TEST values); no A100, V100 or L4 SKU in europe-west4 here
    _sku("N1 Predefined Instance Core running in EMEA", "N1Standard", "OnDemand", 0.034806, EU),
    _sku("N1 Predefined Instance Ram running in EMEA", "N1Standard", "OnDemand", 0.004664, EU),
    _sku("Nvidia Tesla T4 GPU running in EMEA", "GPU", "OnDemand", 0.40, EU),
    # TPU v5p, v5e, v6e are Compute Engine SKUs, priced per chip
    _sku("TpuV5p chip running in us-central1", "TPU", "OnDemand", 4.2, ["us-central1"]),
    _sku("Preemptible TpuV5p chip running in us-central1", "TPU", "OnDemand", 0.836, ["us-central1"]),
    _sku("TpuV5e chip running in us-central1", "TPU", "OnDemand", 1.2, ["us-central1"]),
    _sku("TpuV6e chip running in us-central1", "TPU", "OnDemand", 2.7, ["us-central1"]),
    _sku("Storage PD Capacity", "SSD", "OnDemand", 0.17, US, family="Storage"),
]
TPU = [
    _sku("Tpu-v2 device running in us-central1", "TPU", "OnDemand", 4.5, ["us-central1"]),
    _sku("Preemptible Tpu-v2 device running in us-central1", "TPU", "OnDemand", 1.35, ["us-central1"]),
    _sku("Tpu-v2 Pod running in us-central1", "TPU", "OnDemand", 9.0, ["us-central1"]),  # TEST: a pod SKU dearer than the device's
    _sku("Tpu-v3 device running in us-central1", "TPU", "OnDemand", 8.0, ["us-central1"]),
    _sku("Preemptible Tpu-v3 device running in us-central1", "TPU", "OnDemand", 2.04, ["us-central1"]),
]


class _Billing(Answering):
    auth: list = []
    fail_with = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        type(self).auth.append(query.get("key") or self.headers.get("Authorization"))
        if self.fail_with or not type(self).auth[-1]:
            status = self.fail_with or 403
            self.reply(status, json.dumps({"error": {"code": status, "message": "The caller does not have permission",
                                                     "status": "PERMISSION_DENIED"}}).encode())
            return
        skus = {gcp_prices.COMPUTE_SERVICE: COMPUTE, gcp_prices.TPU_SERVICE: TPU}[url.path.split("/")[-2]]
        assert query["currencyCode"] == "USD"
        start = int(query.get("pageToken", "0"))
        page = skus[start:start + 4]  # four a page: every list takes several
        self.reply(200, json.dumps({"skus": page, "nextPageToken": str(start + 4) if start + 4 < len(skus) else ""}).encode())


@pytest.fixture
def billing(monkeypatch, tmp_path):
    server = serve(_Billing)
    _Billing.auth, _Billing.fail_with = [], 0
    monkeypatch.setenv(gcp_prices.URL_ENV, f"http://127.0.0.1:{server.server_address[1]}/v1")
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(gcp_prices.KEY_ENV, raising=False)
    yield _Billing
    server.shutdown()


def _gcloud(tmp_path, monkeypatch, script: str) -> None:
    """A stand-in gcloud ahead of the cloud guard's on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "gcloud").write_text("#!/bin/sh\n" + script)
    (bin_dir / "gcloud").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")


def _rows(path) -> dict:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return {(r["provider"], r["region"], r["instance_type"], r["accelerator"], r["accelerator_count"]): r for r in csv.DictReader(lines)}


def _node(row, gpu, core, ram) -> float:
    return round(int(row["accelerator_count"]) * gpu + float(row["vcpus"]) * core + float(row["memory_gib"]) * ram, 5)


def test_gke_rows_are_renewed_from_google_s_skus_bundled_into_nodes(billing, monkeypatch):
    monkeypatch.setenv(gcp_prices.KEY_ENV, "AIza-test-key")
    before = _rows(catalog.DEFAULT_PATH)
    result = CliRunner().invoke(app, ["catalog", "refresh", "--provider", "gcp"])
    assert result.exit_code == 0, result.output
    assert set(billing.auth) == {"AIza-test-key"} and len(billing.auth) == 7 + 2  # every page of both services, the key on each
    after = _rows(catalog.refreshed_path())
    renewed = 0
    for key, row in after.items():
        provider, region, shape, accel, _ = key
        old = before[key]
        if provider != "gcp" or (region == "europe-west4" and accel != "T4") or accel == "H100" or old["quality"] == "corrected":
            assert row == old, key  # not GKE, no SKU for all its parts, or corrected by hand: kept as it was
            continue
        renewed += 1
        assert row["quality"] == "catalog" and row["source"].startswith("Google Cloud Billing Catalog API") and row["fetched_at"] == row["source"][-10:]
        if region == "us-central1" and accel in ("T4", "V100", "A100-40GB"):
            # Google's list prices bundled as nodes give back the packaged (SkyPilot-derived) prices
            assert float(row["price_od"]) == pytest.approx(float(old["price_od"]), abs=1e-4), key
    assert renewed == 4 * 3 + 3 + 3  # us-central1 T4, V100, L4 and A100-40GB shapes; europe-west4 T4 (A100-80GB is corrected)
    t4 = after[("gcp", "us-central1", "n1-standard-8", "T4", "1")]
    assert float(t4["price_spot"]) == _node(t4, 0.14, 0.00698, 0.00094)  # the Preemptible SKUs of the same parts
    l4 = after[("gcp", "us-central1", "g2-standard-24", "L4", "2")]
    assert float(l4["price_od"]) == _node(l4, 0.56, 0.025, 0.003) and l4["price_spot"] == ""  # no spot SKU: no spot price
    a100_80 = after[("gcp", "us-central1", "a2-ultragpu-1g", "A100-80GB", "1")]
    assert a100_80["price_od"] == "5.07" and a100_80["quality"] == "corrected"  # corrected by hand: never overwritten, and the list's
    listed = _node(a100_80, 3.0, 0.031611, 0.004237)  # answer (its own GPU SKU, not the 40 GB one) is said beside it
    assert "kept: a2-ultragpu-1g + 1 A100-80GB in us-central1: corrected by hand (GPU OD: catalog 1.8462 too low" in result.output
    assert f"the price list says on-demand {listed:g}, the row keeps 5.07" in result.output
    eu = after[("gcp", "europe-west4", "n1-standard-8", "T4", "1")]
    assert float(eu["price_od"]) == _node(eu, 0.40, 0.034806, 0.004664)
    assert "n1-standard-8 + 1 T4 in europe-west4: on-demand 0.7858 -> " in result.output
    assert "kept: a2-highgpu-1g + 1 A100-40GB in europe-west4: no SKU prices all its parts in this region" in result.output
    assert "kept: n1-standard-8 + 1 V100 in europe-west4" in result.output  # the same machine type with another GPU: said apart
    assert "gcp: 18 row(s) renewed from its price list" in result.output


def test_tpu_slices_are_renewed_per_device_pod_or_chip_with_a_gcloud_token(billing, tmp_path, monkeypatch):
    _gcloud(tmp_path, monkeypatch, 'echo "ya29.test-token"\n')
    before = _rows(catalog.DEFAULT_PATH)
    # the pod SKU here (TEST) is dearer than the device's: pod slices' prices double, a change reviewed before it is written
    refused = CliRunner().invoke(app, ["catalog", "refresh", "--provider", "gcp-tpu"])
    assert refused.exit_code == 2 and not catalog.refreshed_path().exists()
    assert "tpu-v2-32 in us-central1: on-demand 18 -> 36, spot 5.4 -> - (was read 2026-11-26) [moved 100%]" in refused.output
    assert refused.stderr.strip().splitlines()[-1].startswith("error: 4 price(s) moved by more than 25% (the most: tpu-v2-32 in us-central1, 100%); "
                                                              "nothing was written")
    result = CliRunner().invoke(app, ["catalog", "refresh", "--provider", "gcp-tpu", "--accept"])
    assert result.exit_code == 0, result.output
    assert set(billing.auth) == {"Bearer ya29.test-token"}
    after = _rows(catalog.refreshed_path())

    def key(shape, region="us-central1"):
        return next(k for k in after if k[:4] == ("gcp-tpu", region, shape, shape))

    def row(shape, region="us-central1"):
        return after[key(shape, region)]

    # single devices and per-chip generations: Google's list prices give back the packaged rows
    for shape in ("tpu-v2-8", "tpu-v3-8", "tpu-v5litepod-8", "tpu-v6e-8", "tpu-v5p-8"):
        old = before[key(shape)]
        assert float(row(shape)["price_od"]) == float(old["price_od"]), shape
        assert row(shape)["source"].startswith("Google Cloud Billing Catalog API")
    assert row("tpu-v5p-8")["price_spot"] == "3.344" and row("tpu-v3-8")["price_spot"] == "2.04"  # Preemptible SKUs
    assert row("tpu-v6e-8")["price_spot"] == ""
    # a pod slice is priced from the pod SKU (per 8 cores), not the device's
    assert float(row("tpu-v2-32")["price_od"]) == 32 * 9.0 / 8
    assert row("tpu-v2-32")["price_spot"] == ""  # no preemptible pod SKU listed
    # per-chip sizes scale with the slice
    assert float(row("tpu-v6e-16")["price_od"]) == 16 * 2.7 and float(row("tpu-v5p-128")["price_od"]) == 128 * 4.2 / 2
    # nothing listed for europe-west4 or us-central2: kept, said
    assert row("tpu-v3-32", "europe-west4") == before[key("tpu-v3-32", "europe-west4")]
    assert "kept: tpu-v4-8 in us-central2: no SKU prices all its parts" in result.output
    assert all(r == before[k] for k, r in after.items() if k[0] != "gcp-tpu")


def test_no_credentials_or_refused_ones_are_one_line_and_nothing_is_written(billing, tmp_path, monkeypatch):
    # gcloud with no account answers as the real one does: an error on stderr, exit 1
    _gcloud(tmp_path, monkeypatch, 'echo "ERROR: (gcloud.auth.print-access-token) You do not currently have an active account selected." >&2\nexit 1\n')
    result = CliRunner().invoke(app, ["catalog", "refresh", "--provider", "gcp"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "needs your credentials: run `gcloud auth login`" in result.stderr and "You do not currently have an active account" in result.stderr
    assert billing.auth == []  # nothing was asked without credentials
    monkeypatch.setenv(gcp_prices.KEY_ENV, "revoked")
    billing.fail_with = 403
    refused = CliRunner().invoke(app, ["catalog", "refresh", "--provider", "gcp-tpu"])
    assert refused.exit_code == 2 and "refused the credentials (HTTP 403" in refused.stderr and "the catalog is unchanged" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert not catalog.refreshed_path().exists() and catalog.default_path() == catalog.DEFAULT_PATH


def test_a_refresh_never_undoes_the_catalog_s_own_corrections(billing, monkeypatch):
    """Finding 13 of issue 64: Google lists a non-standard H100 SKU first (the one SkyPilot's
    fetcher took, 4.20076 $/GPU-h in us-central1, the catalog header says); before, a refresh took
    it, cut a3-highgpu-8g's price almost in half (87.83 -> 48.11 $/h with these host SKUs), marked the row `catalog` and said
    nothing. Now the corrected rows are kept, and what the list says is shown beside them."""
    import sys

    here = sys.modules[__name__]
    monkeypatch.setattr(here, "COMPUTE", COMPUTE + [
        _sku("Nvidia H100 80GB GPU running in Americas", "GPU", "OnDemand", 4.20076, US),
        _sku("A3 Instance Core running in Americas", "CPU", "OnDemand", 0.031611, US),  # TEST
        _sku("A3 Instance Ram running in Americas", "RAM", "OnDemand", 0.004237, US),  # TEST
    ])
    monkeypatch.setenv(gcp_prices.KEY_ENV, "AIza-test-key")
    before = _rows(catalog.DEFAULT_PATH)
    result = CliRunner().invoke(app, ["catalog", "refresh", "--provider", "gcp"])
    assert result.exit_code == 0, result.output
    after = _rows(catalog.refreshed_path())
    a3 = ("gcp", "us-central1", "a3-highgpu-8g", "H100", "8")
    assert after[a3] == before[a3] and after[a3]["price_od"] == "87.83248"
    listed = _node(before[a3], 4.20076, 0.031611, 0.004237)
    assert listed < 50  # what the refresh would have written
    assert f"kept: a3-highgpu-8g + 8 H100 in us-central1: corrected by hand (GPU OD: catalog 4.20076 too low; us-east4 standard SKU " \
           f"(a3-highgpu-8g = 87.83/h list)); the price list says on-demand {listed:g}, the row keeps 87.8325" in result.output
