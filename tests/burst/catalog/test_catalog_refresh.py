"""`burst catalog refresh` against a local HTTP server answering as Azure's Retail Prices API does.

No network reaches prices.azure.com from here, so the answers are built in the API's documented
shape (field names and meter naming as in Microsoft's sample response and SkyPilot's
``fetch_azure.py``): per VM size, Linux and Windows pay-as-you-go meters, a Spot meter, a Low
Priority meter, and an answer split over two pages by ``NextPageLink``. The eastus prices are
those of SkyPilot's v6 Azure snapshot (itself read from this API); the westeurope prices are TEST
VALUES, not Azure's: the packaged catalog's westeurope rows stay estimates until a refresh on a
machine that can reach the API.
"""

import csv
import json
import urllib.parse

import pytest
from typer.testing import CliRunner

from burst.cli import app
from burst.catalog import offers as catalog
from burst.catalog import azure_prices
from tests.support.http_stub import Answering, serve

# (region, VM size) -> (Linux on-demand, Spot or None); eastus: SkyPilot v6; westeurope: test values
LINUX = {
    ("eastus", "Standard_NC4as_T4_v3"): (0.526, 0.0627),
    ("eastus", "Standard_NC64as_T4_v3"): (4.352, 0.51876),
    ("eastus", "Standard_NC24ads_A100_v4"): (3.673, 0.44443),
    ("eastus", "Standard_NC48ads_A100_v4"): (7.346, 0.88887),
    ("eastus", "Standard_NC96ads_A100_v4"): (14.692, 1.77773),
    ("eastus", "Standard_ND96amsr_A100_v4"): (32.77, 3.6047),
    ("eastus", "Standard_ND96asr_v4"): (27.197, 2.99167),
    ("eastus", "Standard_NC40ads_H100_v5"): (6.98, None),
    ("eastus", "Standard_ND96isr_H100_v5"): (98.32, 98.32),  # the API's spot = on-demand placeholder
    ("westeurope", "Standard_NC4as_T4_v3"): (0.601, 0.0711),
    ("westeurope", "Standard_NC64as_T4_v3"): (4.97, 0.59),
    ("westeurope", "Standard_NC24ads_A100_v4"): (4.05, 0.49),
    ("westeurope", "Standard_NC48ads_A100_v4"): (8.1, 0.98),
    ("westeurope", "Standard_NC96ads_A100_v4"): (16.2, 1.96),
    ("westeurope", "Standard_ND96amsr_A100_v4"): (36.1, 3.97),
    ("westeurope", "Standard_ND96asr_v4"): (29.9, 3.3),
    ("westeurope", "Standard_NC40ads_H100_v5"): (7.7, None),
    # westeurope Standard_ND96isr_H100_v5: no meter at all (the row is kept)
}


def _meters(region: str, size: str) -> list[dict]:
    if (region, size) not in LINUX:
        return []
    od, spot = LINUX[(region, size)]
    sku = size.removeprefix("Standard_").replace("_", " ")
    series = f"Virtual Machines {size.split('_')[1]} Series"

    def meter(sku_name, product, price, start="2024-05-01T00:00:00Z"):
        return {"currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price, "armRegionName": region,
                "location": region, "effectiveStartDate": start, "meterName": sku_name, "productName": product, "skuName": sku_name,
                "serviceName": "Virtual Machines", "serviceFamily": "Compute", "unitOfMeasure": "1 Hour", "type": "Consumption",
                "isPrimaryMeterRegion": True, "armSkuName": size}

    newer = "2025-06-01T00:00:00Z"  # the meters to leave out are the newest: a reader that kept them would pick them
    out = [meter(sku, series, od), meter(sku, series, round(od * 0.8, 4), start="2021-01-01T00:00:00Z"),  # an older price: superseded
           meter(sku, f"{series} Windows", round(od * 1.5, 4), newer), meter(f"{sku} Low Priority", series, round(od * 0.2, 4), newer),
           meter(f"{sku} Spot", f"{series} Windows", round(od * 0.4, 4), newer)]
    if spot is not None:
        out.append(meter(f"{sku} Spot", series, spot))
    return out


class _Api(Answering):
    fail_with = 0
    queries: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.fail_with:
            self.send_error(self.fail_with)
            return
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        terms = dict(t.split(" eq ") for t in query["$filter"][0].split(" and "))
        region, size = terms["armRegionName"].strip("'"), terms["armSkuName"].strip("'")
        assert terms["serviceName"] == "'Virtual Machines'" and terms["priceType"] == "'Consumption'"
        type(self).queries.append((region, size))
        meters = _meters(region, size)
        skip = int(query.get("$skip", ["0"])[0])
        page, rest = meters[skip:skip + 3], meters[skip + 3:]  # three meters a page: every answer takes two
        nxt = f"{self.server.base}?{urllib.parse.urlencode({'api-version': query['api-version'][0], '$filter': query['$filter'][0], '$skip': skip + 3})}" if rest else None
        body = json.dumps({"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail", "Items": page,
                           "NextPageLink": nxt, "Count": len(page)}).encode()
        self.reply(200, body)


@pytest.fixture
def api(monkeypatch, tmp_path):
    server = serve(_Api)
    server.base = f"http://127.0.0.1:{server.server_address[1]}/api/retail/prices"
    _Api.fail_with, _Api.queries = 0, []
    monkeypatch.setenv(azure_prices.URL_ENV, server.base)
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    yield _Api
    server.shutdown()


def _rows(path) -> dict:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return {(r["provider"], r["region"], r["instance_type"]): r for r in csv.DictReader(lines)}


def test_refresh_renews_every_azure_row_from_the_linux_meters_and_the_plan_reads_it(api, tmp_path):
    before = _rows(catalog.DEFAULT_PATH)
    result = CliRunner().invoke(app, ["catalog", "refresh"])
    assert result.exit_code == 0, result.output
    written = catalog.refreshed_path()
    assert written.exists() and catalog.default_path() == written
    after = _rows(written)
    assert len(api.queries) == 2 * 17 + 1 and len(set(api.queries)) == 18  # each region and size once: two pages, one for the size not listed
    for key, row in after.items():
        provider, region, size = key
        if provider != "azure":
            assert row == before[key]  # GCP and TPU rows are not touched
            continue
        if (region, size) not in LINUX:
            assert row == before[key]  # nothing listed: kept as it was
            continue
        od, spot = LINUX[(region, size)]
        assert float(row["price_od"]) == od  # the newest Linux pay-as-you-go meter: not Windows, not the superseded price
        assert row["price_spot"] == ("" if spot is None or spot == od else f"{spot:g}")  # Linux Spot; not Low Priority
        assert row["quality"] == "catalog" and row["source"].startswith("Azure Retail Prices API") and row["fetched_at"] == row["source"][-10:]
    assert "Standard_NC4as_T4_v3 in westeurope: on-demand 0.526 -> 0.601, spot 0.0627 -> 0.0711" in result.output
    assert "kept: Standard_ND96isr_H100_v5 in westeurope: no Linux pay-as-you-go price listed" in result.output
    assert written.read_text().startswith("# Rows refreshed by `burst catalog refresh` (azure) on ")
    # Google's list needs credentials: a plain refresh leaves it alone and says how to ask for it
    assert "not renewed: gcp, gcp-tpu (their price list needs your credentials: `burst catalog refresh --provider gcp`)" in result.output

    # `burst plan` reads the refreshed catalog with no --catalog: westeurope is priced, not estimated
    policy = tmp_path / "eu.yaml"
    policy.write_text("providers: [azure]\nregions: [westeurope]\npreemptible: never\n")  # no deadline: one T4 is a feasible choice
    plan = CliRunner().invoke(app, ["plan", "--policy", str(policy), "--accelerator", "T4", "--gpus", "1", "--json"])
    assert plan.exit_code == 0, plan.output
    choice = json.loads(plan.stdout)["choice"]
    assert choice["layout"]["pools"][0]["instance_type"] == "Standard_NC4as_T4_v3" and choice["hourly_usd"] == 0.601
    assert not any("price is estimate" in n for n in choice["reasons"])

    # a second refresh starts from the refreshed file and keeps one header line
    again = CliRunner().invoke(app, ["catalog", "refresh"])
    assert again.exit_code == 0 and written.read_text().count("# Rows refreshed by") == 1


@pytest.mark.parametrize("status", [500, 429])
def test_an_api_that_fails_is_one_line_and_nothing_is_written(api, status):
    api.fail_with = status
    result = CliRunner().invoke(app, ["catalog", "refresh"])
    assert result.exit_code == 2
    assert f"answered HTTP {status}" in result.stderr and "the catalog is unchanged" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not catalog.refreshed_path().exists() and catalog.default_path() == catalog.DEFAULT_PATH


def test_an_unreachable_api_and_another_provider_are_one_line_each(monkeypatch, tmp_path):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(azure_prices.URL_ENV, "http://127.0.0.1:9/api/retail/prices")  # discard port: nothing listens
    result = CliRunner().invoke(app, ["catalog", "refresh"])
    assert result.exit_code == 2 and "could not reach 127.0.0.1:9" in result.stderr and "check the network" in result.stderr
    broken = tmp_path / "broken.csv"
    broken.write_text(catalog.DEFAULT_PATH.read_text().replace(",0.526,0.0627,", ",cheap,0.0627,", 1))
    damaged = CliRunner().invoke(app, ["catalog", "refresh", "--catalog", str(broken)])
    assert damaged.exit_code == 2 and "column price_od is 'cheap', not a number" in damaged.stderr
    assert len(damaged.stderr.strip().splitlines()) == 1
    other = CliRunner().invoke(app, ["catalog", "refresh", "--provider", "slurm"])
    assert other.exit_code == 2 and "slurm has no public price list burst can read (those that have: azure, gcp, gcp-tpu)" in other.stderr
    assert not (tmp_path / "home" / "catalog.csv").exists()


def test_a_plan_says_when_its_price_row_is_older_than_the_policy_allows(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    policy = tmp_path / "p.yaml"
    policy.write_text("providers: [azure]\nmax_price_age_days: 1\n")
    plan = CliRunner().invoke(app, ["plan", "--policy", str(policy), "--accelerator", "T4", "--gpus", "1", "--json"])
    assert plan.exit_code == 0, plan.output
    reasons = json.loads(plan.stdout)["choice"]["reasons"]
    # the packaged rows were read on 2026-11-22, more than a day before any day this runs
    assert any("was read 2026-11-22" in r and "the policy allows 1): renew it with `burst catalog refresh`" in r for r in reasons), reasons
    policy.write_text("providers: [azure]\nmax_price_age_days: 3650\n")
    fresh = CliRunner().invoke(app, ["plan", "--policy", str(policy), "--accelerator", "T4", "--gpus", "1", "--json"])
    assert not any("was read" in r for r in json.loads(fresh.stdout)["choice"]["reasons"])
