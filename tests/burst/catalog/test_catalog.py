"""The packaged price catalog and the checks every catalog (packaged or user-supplied) must pass."""

import pytest

from burst.catalog import offers as catalog
from burst.errors import BurstError

REQUIRED = {
    "gcp": ["T4", "L4", "V100", "A100-40GB", "A100-80GB", "H100"],
    "gcp-tpu": ["tpu-v2-8", "tpu-v3-8", "tpu-v4-8", "tpu-v5litepod-8", "tpu-v5p-8", "tpu-v6e-8"],
    "azure": ["T4", "A100-80GB", "H100"],  # Azure's V100 sizes (NCv3) were retired on 2025-09-30
}
EU = ("europe-", "westeurope", "northeurope")
US = ("us-", "eastus", "westus")


@pytest.fixture(scope="module")
def offers():
    return catalog.load(catalog.DEFAULT_PATH)  # the packaged one, whatever a refresh wrote to this machine


@pytest.mark.parametrize("provider", sorted(REQUIRED))
def test_every_required_accelerator_is_offered_in_an_eu_and_a_us_region(offers, provider):
    for acc in REQUIRED[provider]:
        regions = {o.region for o in offers if o.provider == provider and o.accelerator == acc}
        assert any(r.startswith(US) for r in regions), (acc, regions)
        if acc == "tpu-v4-8":  # exists only in us-central2; the catalog header says so
            assert regions == {"us-central2"}
        else:
            assert any(r.startswith(EU) for r in regions), (acc, regions)


def test_every_row_is_sane_and_sourced(offers):
    for o in offers:
        assert o.price_od > 0 and o.price_od != 700.0
        assert o.price_spot is None or 0 < o.price_spot <= o.price_od, o
        assert o.source and o.fetched_at, o
        assert o.quality in ("catalog", "corrected", "derived", "estimate")


def test_anomalies_are_resolved(offers):
    def per_gpu(region, acc, itype):
        o = next(o for o in offers if o.region == region and o.accelerator == acc and o.instance_type == itype)
        return o.price_od

    # EU is never cheaper than the US for the same GCP shape (the catalog's A100-40GB/H200 anomaly)
    for itype, acc in (("a2-highgpu-1g", "A100-40GB"), ("a2-ultragpu-1g", "A100-80GB"), ("a3-highgpu-8g", "H100")):
        assert per_gpu("europe-west4", acc, itype) > per_gpu("us-central1", acc, itype)
    # a3-highgpu-8g at the public list price (8 x 9.79655 + 9.46006 = 87.83 $/h), not the cheap SKU
    assert per_gpu("us-central1", "H100", "a3-highgpu-8g") == pytest.approx(87.83, abs=0.01)
    # a2-ultragpu-1g at the public ~5.07 $/h
    assert per_gpu("us-central1", "A100-80GB", "a2-ultragpu-1g") == pytest.approx(5.07, abs=0.01)
    nd = next(o for o in offers if o.instance_type == "Standard_ND96isr_H100_v5")
    assert nd.accelerator_count == 8 and nd.price_spot is None
    assert all(o.quality == "estimate" for o in offers if o.region == "westeurope")


HEADER = ",".join(catalog.COLUMNS)
GOOD = "gcp,us-central1,us-central1-a,n1-standard-8,V100,1,8,30,2.86,1.18,node,catalog,src,2026-11-22,"


@pytest.mark.parametrize(
    "row, fragment",
    [
        ("gcp,us-central1,us-central1-a,n1-standard-8,V100,1,8,30,2.86,3.5,node,catalog,src,2026-11-22,", "above the on-demand"),
        ("gcp-tpu,us-central2,us-central2-b,tpu-v6e-8,tpu-v6e-8,8,,,700.0,,tpu-slice,catalog,src,2026-11-22,", "placeholder"),
        ("gcp,us-central1,us-central1-a,n1-standard-8,V100,1,8,30,abc,,node,catalog,src,2026-11-22,", "not a number"),
        ("aws,us-east-1,,p3.2xlarge,V100,1,8,61,3.06,,node,catalog,src,2026-11-22,", "not one of"),
        ("gcp,us-central1,us-central1-a,n1-standard-8,V100,1,8,30,2.86,,node,catalog,,2026-11-22,", "source is empty"),
        # provider facts: a retired size, a zone without the accelerator, a region the facts do not list
        ("azure,eastus,,Standard_NC6s_v3,V100,1,6,112,3.06,0.39,node,catalog,src,2026-11-22,", "retired on 2025-09-30"),
        ("gcp,europe-west4,europe-west4-a,a3-highgpu-8g,H100,8,208,1872,87.83,,node,catalog,src,2026-11-22,",
         "zone europe-west4-a does not offer H100 (zones that do: europe-west4-b, europe-west4-c)"),
        ("gcp-tpu,europe-west4,europe-west4-b,tpu-v3-32,tpu-v3-32,16,,,32.0,10.56,tpu-slice,catalog,src,2026-11-22,",
         "zone europe-west4-b does not offer tpu-v3-32 (zones that do: europe-west4-a)"),
    ],
)
def test_a_bad_row_is_named_by_file_and_line(tmp_path, row, fragment):
    path = tmp_path / "c.csv"
    path.write_text(f"# comment\n{HEADER}\n{GOOD}\n{row}\n")
    with pytest.raises(BurstError) as err:
        catalog.load(path)
    assert f"{path}:4" in str(err.value) and fragment in str(err.value)


def test_missing_columns_and_missing_file(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("provider,region\ngcp,us-central1\n")
    with pytest.raises(BurstError, match="missing column"):
        catalog.load(path)
    with pytest.raises(BurstError, match="cannot read catalog"):
        catalog.load(tmp_path / "nope.csv")


def test_offers_carry_the_zones_that_offer_them_and_spot_only_shapes(offers):
    h100 = [o for o in offers if o.accelerator == "H100" and o.provider == "gcp"]
    assert {o.zones for o in h100 if o.region == "europe-west4"} == {("europe-west4-b", "europe-west4-c")}
    assert {o.instance_type for o in h100 if not o.on_demand} == {"a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g"}
    small = next(o for o in h100 if o.instance_type == "a3-highgpu-1g")
    with pytest.raises(BurstError, match="not sold on demand"):
        small.price(preemptible=False)
    assert not [o for o in offers if o.instance_type.startswith("Standard_NC") and o.instance_type.endswith("s_v3")]
