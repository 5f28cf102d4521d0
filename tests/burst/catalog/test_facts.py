"""Provider facts files: every row sourced and dated, checked on load with file and line."""

import pytest

from burst.errors import BurstError
from burst.catalog import facts


@pytest.mark.parametrize("provider", ["gcp", "gcp-tpu", "azure"])
def test_shipped_facts_load_and_every_row_names_its_source_and_date(provider):
    known = facts.load(provider)
    rows = [*known.zones, *known.spot_only, *known.retired, *known.drivers, *known.quotas, *known.quota_families, *known.runtimes]
    assert rows and all(r.source and r.checked.year >= 2025 for r in rows)


@pytest.mark.parametrize("text, fragment", [
    ("provider: gcp\nzones:\n  - {accelerator: V100, region: r, zones: [a], checked: 2026-11-23}\n", "f.yaml:3: zones.0.source: Field required"),
    ("provider: gcp\nzonez: []\n", "f.yaml:2: zonez: Extra inputs are not permitted"),
    ("provider: gcp\ndrivers:\n  - {accelerator: V100, gke_driver: NEWEST, why: x, source: docs, checked: 2026-11-23}\n", "f.yaml:3: drivers.0.gke_driver"),
    ("provider: gcp\nzones:\n  - {accelerator: V100, region: r, zones: [], source: docs, checked: 2026-11-23}\n", "zones.0.zones"),
    ("- just a list\n", "f.yaml:1: a facts file is a mapping"),
])
def test_a_bad_facts_file_is_one_line_with_its_line(text, fragment):
    with pytest.raises(BurstError) as err:
        facts.parse(text, "f.yaml")
    assert fragment in str(err.value)


def test_providers_without_a_facts_file_have_no_facts():
    assert facts.load("local").zones == () and facts.load("local").zones_for("V100", "r") is None
