"""Every placement field is honoured on every kind of target, pinned (``--provider X``) and planned.

The table below is built from ``PlacementRequest``'s own fields: each is a case here (a value that
the unrestricted choice on that target does not satisfy, and what the user then relies on: the
placement has it, or burst refuses in one line naming the flag), shapes the estimate
(``filters.ESTIMATE``) or says how to build the target (``request.HOW_TO_BUILD``). A new field with
no case fails the first test; a field one path drops fails the second on that path. The checks
read the placement itself (its region, its layout's nodes, its price), never the filters' own
predicates.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

import pytest

from burst.catalog import offers as catalog
from burst.errors import BurstError
from burst.placement import filters, planner, policy, profile
from burst.placement.request import HOW_TO_BUILD, PlacementRequest
from burst.values.placement import Placement

OFFERS = catalog.load()
PROFILE = profile.load("gan3d")
SITE = {"accelerator": "V100", "gpus": 8, "gpus_per_node": 4, "usd_per_gpu_hour": 2.0, "name": "lab"}
KINDS = ("local", "ray", "slurm", "kubernetes", "gcp", "azure", "gcp-tpu")


def _policy(providers: list[str], scheduler: str = "ray") -> policy.Policy:
    site = ", ".join(f"{k}: {v}" for k, v in {**SITE, "scheduler": scheduler}.items())
    address = ", ray_address: 'http://127.0.0.1:1'" if scheduler == "ray" else ""
    return policy.parse(f"providers: [{', '.join(providers)}]\nmax_gpus: 64\nonprem: {{{site}{address}}}\n")


def _site_nodes(p: Placement) -> int:
    return -(-p.count // SITE["gpus_per_node"])


def nodes_of(p: Placement) -> int:
    if p.layout is not None:
        return p.layout.nodes
    if p.provider == "local":
        return 1
    return p.nodes if p.nodes is not None else _site_nodes(p)


def per_node_of(p: Placement) -> Optional[int]:
    if p.layout is not None:
        sizes = {pool.gpus_per_node for pool in p.layout.pools}
        return sizes.pop() if len(sizes) == 1 and not p.layout.is_tpu else None
    return SITE["gpus_per_node"] if p.provider in ("ray", "slurm", "kubernetes") else None


def memory_of(p: Placement) -> Optional[float]:
    """One accelerator's memory by the catalog's rows: the layout's nodes, or every row of the site's accelerator."""
    if p.layout is not None:
        return min(pool.offer.accelerator_memory_gb for pool in p.layout.pools)
    rows = [o.accelerator_memory_gb for o in OFFERS if o.accelerator == p.accelerator]
    return min(rows) if rows else None


@dataclass
class Case:
    """A value for one field that the unrestricted choice ``base`` does not satisfy (None: the
    field cannot be satisfied on that kind of target), how a placement honours it, and the words
    a refusal names."""

    value: object
    honoured: Callable[[Placement], bool]
    words: str


def _other(values, current):
    """A value of ``values`` other than ``current`` (None if there is none)."""
    others = sorted({v for v in values if v != current}, key=str)
    return others[0] if others else None


def case_for(field: str, kind: str, base: Placement, seen: list[Placement]) -> Case:
    """What the test asks of ``field`` on ``kind``; ``seen``: the kind's unrestricted candidates."""
    cloud, local = kind in ("gcp", "azure", "gcp-tpu"), kind == "local"
    if field == "provider":
        return Case(kind, lambda p: p.provider == kind, "--provider")
    if field == "region":
        value = _other((c.region for c in seen), base.region) if cloud else ("us-central1" if local else "nowhere-1")
        return Case(value, lambda p: p.region == value, "--region")
    if field == "accelerator":
        value = _other((c.accelerator for c in seen), base.accelerator) if cloud else ("V100" if local else "A100")
        return Case(value, lambda p: p.accelerator == value, "--accelerator")
    if field == "gpus":
        if local:  # pinned, --gpus is the GPUs of this machine Ray offers; planned, this machine trains on CPUs
            return Case(1, lambda p: p.provider == "local" and p.gpus == 1, "--gpus")
        value = _other((c.count for c in seen), base.count) if cloud else (2 if base.count != 2 else 4)
        return Case(value, lambda p: p.count == value, "--gpus")
    if field == "preemptible":
        value = not base.preemptible if cloud else True
        return Case(value, lambda p: p.preemptible == value, "preemptible")
    if field == "gpus_per_node":
        value = _other((per_node_of(c) for c in seen if per_node_of(c) is not None), per_node_of(base)) if cloud else 3
        value = value if value is not None else 3  # a TPU slice has no GPUs per node: refused
        return Case(value, lambda p: per_node_of(p) == value, "--gpus-per-node")
    if field == "nodes":
        value = _other((nodes_of(c) for c in seen), nodes_of(base)) if cloud else (3 if kind == "slurm" else 1 if nodes_of(base) != 1 else 2)
        value = value if value is not None else 2
        return Case(value, lambda p: nodes_of(p) == value, "--nodes")
    if field == "max_price_per_hour":
        value = round(base.hourly_usd * 0.99, 6)
        return Case(value, lambda p: p.hourly_usd <= value, "--max-price-per-hour")
    if field == "avoid":
        value = (f"{kind}:{base.region}",) if cloud else (kind,)
        return Case(value, lambda p: p.provider not in value and f"{p.provider}:{p.region}" not in value, "lost a cluster")
    if field == "min_gpu_memory":
        value = (memory_of(base) or 8.0) + 1
        return Case(value, lambda p: (memory_of(p) or 0) >= value, "--min-gpu-memory")
    raise AssertionError(f"no case for the placement field {field!r}: give it one here, and a filter in burst/placement/filters.py")


FIELDS = [f.name for f in dataclasses.fields(PlacementRequest)]
FILTERED = [f for f in FIELDS if f not in filters.ESTIMATE and f not in HOW_TO_BUILD]


def test_every_placement_field_is_filtered_shapes_the_estimate_or_builds_the_target():
    assert sorted(FILTERED) == sorted(filters.request_fields()), "a placement field with no filter, or a filter of no field"
    base = Placement("gcp", "us-central1", "V100", 8, False, 1.0)
    for field in FILTERED:  # each has a case (the message of the AssertionError says where to add one)
        case_for(field, "gcp", base, [base])


def _base(kind: str, pol: policy.Policy) -> tuple[Placement, list[Placement]]:
    plan = planner.plan(pol, PROFILE, OFFERS, PlacementRequest(live=False))
    assert plan.choice is not None, plan.why
    return planner.from_candidate(plan.choice, pol), [planner.from_candidate(c, pol) for c in plan.candidates]


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_is_honoured_pinned_and_planned(kind):
    pol = _policy([kind], scheduler=kind if kind in ("slurm", "kubernetes") else "ray")
    base, seen = _base(kind, pol)
    failures = []
    for field in FILTERED:
        case = case_for(field, kind, base, seen)
        if field != "provider":
            assert not case.honoured(base), f"{field}={case.value!r} does not tell anything on {kind}: the unrestricted choice has it"
        ask = PlacementRequest(live=False, **{field: case.value})
        for how in ("pinned", "planned"):
            try:
                if how == "pinned":
                    got = planner.pin(pol, PROFILE, OFFERS, ask.but(provider=kind))
                else:
                    plan = planner.plan(pol, PROFILE, OFFERS, ask if field != "provider" else ask.but(provider=None))
                    if field == "provider":  # planned over every provider, asking for this one
                        plan = planner.plan(_policy(list(KINDS)), PROFILE, OFFERS, ask)
                    if plan.choice is None:
                        raise BurstError(plan.why)
                    got = planner.from_candidate(plan.choice, pol)
            except BurstError as refused:
                if how == "pinned" and case.words not in str(refused):
                    failures.append(f"{how} {kind} {field}={case.value!r}: refused without naming it: {refused}")
                continue
            if not case.honoured(got):
                failures.append(f"{how} {kind} {field}={case.value!r}: placed {got.describe()} at ${got.hourly_usd:.4f}/h")
    assert failures == []


def test_a_pin_that_misses_only_the_budget_goes_ahead_with_a_note():
    pol = policy.parse("providers: [gcp]\nbudget_usd: 0.01\n")
    placed = planner.pin(pol, PROFILE, OFFERS, PlacementRequest(provider="gcp", accelerator="V100", gpus=8))
    assert placed.accelerator == "V100" and placed.count == 8
    assert any("over budget" in note for note in placed.notes)
    with pytest.raises(BurstError, match="no feasible target"):
        planner.choose(pol, PROFILE, OFFERS, PlacementRequest(accelerator="V100", gpus=8))  # planned: nothing to choose


def test_gpu_memory_narrows_a_plan_and_refuses_a_pin_that_cannot_have_it():
    """The issue's case: a pinned 16 GB T4 asked for 60 GB is refused, naming the flag, as it is
    planned; planned, only accelerators with 60 GB or more remain, by the catalog's column."""
    from typer.testing import CliRunner

    from burst.cli import app

    pinned = CliRunner().invoke(app, ["up", "--dry-run", "--provider", "gcp", "--accelerator", "T4", "--gpus", "1", "--min-gpu-memory", "60"])
    assert pinned.exit_code == 2 and "--min-gpu-memory 60: T4 on gcp has 16 GB" in pinned.output, pinned.output
    plan = planner.plan(policy.parse("providers: [gcp, azure, gcp-tpu]\n"), PROFILE, OFFERS, PlacementRequest(min_gpu_memory=60))
    kept = {(c.accelerator if not c.accelerator.startswith("tpu-") else c.accelerator.rsplit("-", 1)[0]) for c in plan.candidates}
    assert kept == {"A100-80GB", "H100", "tpu-v5p"} and plan.excluded["under --min-gpu-memory"] > 0
    bad = CliRunner().invoke(app, ["plan", "--min-gpu-memory", "-1"])
    assert bad.exit_code == 2 and "--min-gpu-memory must be a number of GB above 0" in bad.output
