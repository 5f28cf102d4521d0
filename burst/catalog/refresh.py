"""``burst catalog refresh``: renew a provider's catalog rows from its public price list.

A provider's facts name its price list (``price_list`` in ``data/facts/<provider>.yaml``, one of
``PRICE_LISTS``: Azure's Retail Prices API, which needs no account; Google's Cloud Billing Catalog
for the GKE and TPU rows, which needs the user's credentials and is read only when named with
``--provider``). A renewed row carries the price
list's name, the date it was read, and quality ``catalog``; a row the list does not price stays as
it was and is said. A row corrected by hand (quality ``corrected``: the catalog header says why,
often a price list whose first matching SKU is not the standard one) is never overwritten; what
the list says for it is shown beside it. A price that moves by more than ``LARGE_CHANGE`` is a
change to review: ``burst catalog refresh`` writes nothing until it is accepted (``--accept``).
Nothing is written unless every query was answered.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Protocol

from . import facts
from ..errors import BurstError
from .azure_prices import AzureRetailPrices
from .gcp_prices import GoogleCloudBilling

#: a renewed price this far from the row's (either way, as a fraction) is reviewed before it is written
LARGE_CHANGE = 0.25
CORRECTED = "corrected"


class PriceList(Protocol):
    """A provider's public price list."""

    needs_account: bool  # asked only when named (`--provider`): reading it needs the user's credentials
    unlisted: str        # what is said of a row the list does not price

    def source(self, today: str) -> str:
        """What a renewed catalog row names as its source."""

    def reader(self) -> Callable[[Mapping[str, str]], Optional[tuple[float, Optional[float]]]]:
        """A lookup for one refresh: a catalog row (its columns by name) -> (on-demand, spot or
        None) per hour of that node shape in that region; None when the list does not price it."""


#: the price lists burst reads, by the name a provider's facts give (GKE nodes and TPU slices alike
#: are priced from Google's SKUs)
PRICE_LISTS: dict[str, PriceList] = {"azure-retail-prices": AzureRetailPrices(), "google-cloud-billing": GoogleCloudBilling()}


def price_list_of(provider: str) -> Optional[PriceList]:
    """The public price list ``provider``'s catalog rows are renewed from, or None."""
    name = facts.load(provider).price_list
    if name is not None and name not in PRICE_LISTS:
        raise BurstError(f"{facts.FACTS_DIR / (provider + '.yaml')}: price_list {name!r} is none burst reads ({', '.join(PRICE_LISTS)})")
    return PRICE_LISTS[name] if name is not None else None


@dataclass(frozen=True)
class Change:
    """One catalog row the refresh renewed: what it said and what the price list says now."""

    region: str
    instance_type: str  # with its GPUs where its name does not say them (one GCP machine type carries several models)
    old_od: float
    new_od: float
    old_spot: Optional[float]
    new_spot: Optional[float]
    old_date: str

    @property
    def largest_move(self) -> float:
        """The larger relative move of its two prices (a spot price that appears or goes counts as none)."""
        moves = [abs(self.new_od - self.old_od) / self.old_od]
        if self.old_spot and self.new_spot:
            moves.append(abs(self.new_spot - self.old_spot) / self.old_spot)
        return max(moves)

    @property
    def large(self) -> bool:
        return self.largest_move > LARGE_CHANGE

    def describe(self) -> str:
        def money(v: Optional[float]) -> str:
            return "-" if v is None else f"{v:g}"

        same = self.old_od == self.new_od and self.old_spot == self.new_spot
        return (f"{self.instance_type} in {self.region}: on-demand {money(self.old_od)} -> {money(self.new_od)}, "
                f"spot {money(self.old_spot)} -> {money(self.new_spot)}" + (" (unchanged; dated afresh)" if same else "")
                + f" (was read {self.old_date})")


def shape_label(row: dict) -> str:
    """A row's node shape as said: its machine type, and its GPUs where the type's name does not say them."""
    accelerator = row["accelerator"]
    return row["instance_type"] if accelerator in row["instance_type"] else f"{row['instance_type']} + {row['accelerator_count']} {accelerator}"


def renewable() -> tuple[str, ...]:
    """Providers whose rows are renewed from a public price list."""
    return tuple(p for p in facts.providers() if price_list_of(p) is not None)


def renewed_by_default() -> tuple[str, ...]:
    """Providers a plain ``burst catalog refresh`` renews: those whose price list needs no account."""
    return tuple(p for p in renewable() if not price_list_of(p).needs_account)


def refresh(text: str, provider: str, today: str) -> tuple[str, list[Change], list[str]]:
    """The catalog ``text`` with ``provider``'s rows renewed from its price list: (new text, rows
    renewed, rows the list does not price). Comment lines and every other row are kept as they are."""
    price_list = price_list_of(provider)
    if price_list is None:
        raise BurstError(f"{provider} has no public price list burst can read (those that have: {', '.join(renewable())}); "
                         f"its rows are renewed by hand, as the catalog header says")
    lines = text.splitlines(keepends=True)
    header_at = next((i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")), None)
    if header_at is None:
        raise BurstError("the catalog has no header row; refresh a catalog `burst catalog` can read")
    reader = csv.DictReader(io.StringIO("".join(lines[header_at:])))
    columns = reader.fieldnames or []
    rows = list(reader)
    mine = [row for row in rows if row.get("provider") == provider]
    def shape(row: dict) -> tuple[str, ...]:  # one GCP machine type carries several GPU models
        return row["region"], row["instance_type"], row["accelerator"], row["accelerator_count"]

    lookup, answers = price_list.reader(), {}
    for row in mine:
        if shape(row) not in answers:
            answers[shape(row)] = lookup(row)
    source = price_list.source(today)
    changes, missing = [], []
    for row in mine:
        found = answers[shape(row)]
        if found is None:
            missing.append(f"{shape_label(row)} in {row['region']}: {price_list.unlisted}; row kept as read {row['fetched_at']}")
            continue
        od, spot = found
        if row.get("quality") == CORRECTED:  # the list's answer is what the correction was made against: said, never written
            missing.append(f"{shape_label(row)} in {row['region']}: corrected by hand ({row.get('note') or 'see the catalog header'}); "
                           f"the price list says on-demand {od:g}, the row keeps {float(row['price_od']):g}")
            continue
        old_spot = float(row["price_spot"]) if row["price_spot"] else None
        changes.append(Change(row["region"], shape_label(row), float(row["price_od"]), od, old_spot, spot, row["fetched_at"]))
        row.update(price_od=f"{od:g}", price_spot="" if spot is None else f"{spot:g}", quality="catalog", source=source, fetched_at=today)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return "".join(lines[:header_at]) + out.getvalue(), changes, missing
