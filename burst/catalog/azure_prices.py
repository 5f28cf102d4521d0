"""Azure's public price list: the Retail Prices API, which needs no account
(https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices).

One query per region and VM size, ``$filter=serviceName eq 'Virtual Machines' and priceType eq
'Consumption' and armRegionName eq R and armSkuName eq S``, pages joined through ``NextPageLink``.
An answer lists a VM size's meters: Linux and Windows (the product name has `` Windows`` or
`` Win``), pay-as-you-go, Spot (sku name ending `` Spot``) and Low Priority. The Linux
pay-as-you-go meter is the on-demand price, its Spot meter the spot price (SkyPilot's
``fetch_azure.py`` reads the same meters). ``burst catalog refresh`` asks it for the providers
whose facts name it (``price_list: azure-retail-prices``).
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Callable, Mapping, Optional

from ..errors import BurstError
from . import price_fetch

AZURE_PRICES_URL = "https://prices.azure.com/api/retail/prices"
AZURE_API_VERSION = "2023-01-01-preview"
#: tests point the refresh at a local server answering with recorded responses
URL_ENV = "BURST_AZURE_PRICES_URL"
MAX_PAGES = 50  # one VM size in one region is one page; a loop of NextPageLinks is an error, not a hang

def query_url(region: str, instance_type: str, base: Optional[str] = None) -> str:
    """The Retail Prices API query for one VM size in one region."""
    filters = " and ".join(["serviceName eq 'Virtual Machines'", "priceType eq 'Consumption'",
                            f"armRegionName eq '{region}'", f"armSkuName eq '{instance_type}'"])
    base = base or os.environ.get(URL_ENV) or AZURE_PRICES_URL
    return f"{base}?{urllib.parse.urlencode({'api-version': AZURE_API_VERSION, '$filter': filters})}"


def fetch_json(url: str) -> dict:
    """GET one page of the Retail Prices API."""
    return price_fetch.fetch_json(url, hint="the Retail Prices API needs no account")


def items(region: str, instance_type: str) -> list[dict]:
    """Every meter the API lists for a VM size in a region, all pages."""
    url: Optional[str] = query_url(region, instance_type)
    found: list[dict] = []
    for _ in range(MAX_PAGES):
        if not url:
            return found
        page = fetch_json(url)
        if not isinstance(page, dict) or not isinstance(page.get("Items", []), list):
            raise BurstError(f"the Retail Prices API's answer for {instance_type} in {region} has no Items list; the catalog is unchanged")
        found += [i for i in page.get("Items", []) if isinstance(i, dict)]
        url = page.get("NextPageLink")
    raise BurstError(f"the Retail Prices API kept paging past {MAX_PAGES} pages for {instance_type} in {region}; the catalog is unchanged")


def _linux_hourly(item: dict, region: str, instance_type: str) -> bool:
    product = str(item.get("productName", ""))
    return (item.get("armRegionName") == region and item.get("armSkuName") == instance_type
            and item.get("type", "Consumption") == "Consumption" and item.get("currencyCode", "USD") == "USD"
            and item.get("unitOfMeasure") == "1 Hour" and " Win" not in product and "Cloud Services" not in product
            and not str(item.get("skuName", "")).endswith(" Low Priority")
            and isinstance(item.get("retailPrice"), (int, float)) and item["retailPrice"] > 0)


def prices(meters: list[dict], region: str, instance_type: str) -> Optional[tuple[float, Optional[float]]]:
    """(on-demand, spot or None) per hour from a VM size's meters; None when no Linux pay-as-you-go
    meter is listed. Where a meter appears with several prices, the newest (``effectiveStartDate``)
    holds; a spot price equal to the on-demand one is the API's placeholder for no spot offer."""
    kept = [m for m in meters if _linux_hourly(m, region, instance_type)]

    def newest(spot: bool) -> Optional[float]:
        rows = [m for m in kept if str(m.get("skuName", "")).endswith(" Spot") == spot]
        return float(max(rows, key=lambda m: str(m.get("effectiveStartDate", "")))["retailPrice"]) if rows else None

    od, spot = newest(False), newest(True)
    if od is None:
        return None
    if spot is not None and spot >= od:
        spot = None
    return od, spot


class AzureRetailPrices:
    """The price list ``burst catalog refresh`` reads for Azure's catalog rows."""

    needs_account = False
    unlisted = "no Linux pay-as-you-go price listed"

    def source(self, today: str) -> str:
        return f"Azure Retail Prices API (prices.azure.com, api-version {AZURE_API_VERSION}), read {today}"

    def reader(self) -> Callable[[Mapping[str, str]], Optional[tuple[float, Optional[float]]]]:
        """(on-demand, spot or None) per hour of a catalog row's VM size in its region; None when unlisted."""
        return lambda row: prices(items(row["region"], row["instance_type"]), row["region"], row["instance_type"])
