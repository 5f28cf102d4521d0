"""Policy files: the shipped examples are valid, and any malformed document is one clear error."""

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burst.placement import policy
from burst.errors import BurstError

POLICIES = sorted((Path(__file__).resolve().parents[3] / "policies").glob("*.yaml"))


def test_the_examples_users_copy_are_shipped_and_valid():
    names = {p.name for p in POLICIES}
    assert {"default.yaml", "cost-first.yaml", "deadline.yaml", "eu-only.yaml"} <= names
    for path in POLICIES:
        p = policy.load(path)
        assert p.deadline_hours() is None or p.deadline_hours() > 0


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ("objective: min_cost\nbudjet_usd: 10\n", "x.yaml:2: unknown field 'budjet_usd'"),
        ("onprem:\n  accelerator: V100\n  gpus: -1\n  usd_per_gpu_hour: 1\n", "x.yaml:3: onprem.gpus"),
        ("onprem:\n  gpus: 4\n  usd_per_gpu_hour: 1\n", "x.yaml:1: onprem"),
        ("preemptible: sometimes\n", "x.yaml:1: preemptible"),
        ("deadline: tomorrow-ish\n", "x.yaml:1: deadline"),
        ("providers: [gcp, aws]\n", "x.yaml:1: providers"),
        ("data:\n  location: s3://bucket\n", "x.yaml:2: data.location"),
        ("- just\n- a list\n", "x.yaml:1: a policy is a mapping"),
        ("objective: [unclosed\n", "x.yaml:2: not valid YAML"),
    ],
)
def test_errors_name_file_line_and_field(doc, fragment):
    with pytest.raises(BurstError) as err:
        policy.parse(doc, "x.yaml")
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_deadline_forms():
    assert policy.parse("deadline: 36").deadline_hours() == 36
    assert policy.parse("deadline: 2d").deadline_hours() == 48
    assert policy.parse("deadline: 90m").deadline_hours() == 1.5
    past = policy.parse("deadline: '2020-01-01T00:00:00Z'")
    assert past.deadline_hours() < 0  # well-formed; the plan reports it as passed


def test_schema_describes_every_field():
    """Editors show these descriptions as users type: every field, nested ones too, has one."""
    schema = policy.schema()
    defs = schema.get("$defs", {})
    undescribed, strict = [], []

    def walk(node: dict, path: str) -> None:
        if node.get("additionalProperties") is not False:
            strict.append(path or "<root>")
        for key, prop in node.get("properties", {}).items():
            if not prop.get("description", "").strip():
                undescribed.append(path + key)
            refs = [prop.get("$ref")] + [a.get("$ref") for a in prop.get("anyOf", [])]
            for ref in filter(None, refs):
                walk(defs[ref.rsplit("/", 1)[1]], f"{path}{key}.")

    walk(schema, "")
    assert undescribed == []
    assert strict == []  # unknown keys are errors at every level
    assert {"onprem.gpus", "burst_when.queue_wait_over_hours", "data.uplink_gbps"} <= {
        f"{k}.{sub}" for k in ("onprem", "burst_when", "data") for sub in defs[{"onprem": "OnPrem", "burst_when": "BurstWhen", "data": "DataLocation"}[k]]["properties"]}


KEYS = list(policy.Policy.model_fields) + ["bogus", "onprem.gpus"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 500), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=12), st.sampled_from(["min_cost", "min_time", "prefer", "48h", "V100", "europe-*", "gcp"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(KEYS + ["accelerator", "gpus", "usd_per_gpu_hour", "location"]), inner, max_size=4)),
                      max_leaves=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=6))
def test_random_documents_give_a_policy_or_a_clear_error(doc):
    text = yaml.safe_dump(doc)
    try:
        p = policy.parse(text, "r.yaml")
    except BurstError as exc:
        assert str(exc).startswith("r.yaml:") and "\n" not in str(exc)
    else:
        assert isinstance(p, policy.Policy)
        p.deadline_hours()


@pytest.mark.parametrize("doc, fragment", [
    ("stores:\n  named:\n    azure: gs://x\n", "p.yaml:2: stores.named: Value error, azure: 'gs://x' is not a bucket of azure's cloud (give a abfs:// or abfss:// URI)"),
    ("stores:\n  named:\n    gcp: /data\n", "gcp: '/data' is not a bucket of gcp's cloud (give a gs:// URI)"),
    ("stores:\n  named:\n    slurm: /x\n", "slurm: a store is named for `local` or a cloud provider"),
    ("stores:\n  named:\n    'local:eu': /x\n", "local:eu: a store is named for `local` or a cloud provider"),
    ("stores:\n  named:\n    'gcp:US central': gs://x\n", "gcp:US central: a region is lowercase letters, digits and dashes"),
    ("stores:\n  datasets_days: 0\n", "p.yaml:2: stores.datasets_days: Input should be greater than or equal to 1"),
    ("stores:\n  keep: 3\n", "unknown field 'stores.keep'; allowed here: named, checkpoints_days, datasets_days, notices_days"),
])
def test_a_store_that_cannot_be_is_one_line(doc, fragment):
    with pytest.raises(BurstError) as err:
        policy.parse(doc, "p.yaml")
    assert fragment in str(err.value)


def test_a_region_s_named_store_wins_over_its_provider_s():
    p = policy.parse("stores:\n  named:\n    gcp: gs://all\n    'gcp:europe-west4': gs://eu\n    local: /data/burst\n")
    assert p.stores.named_for("gcp", "europe-west4") == "gs://eu" and p.stores.named_for("gcp", "us-central1") == "gs://all"
    assert p.stores.named_for("gcp-tpu", "us-central1") is None and p.stores.named_for("local", None) == "/data/burst"
