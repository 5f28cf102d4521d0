"""What a request and its policy ask of a candidate: one table, one predicate per rule, each with
the reason code its refusals carry.

The sources make every candidate their kind of target offers; the planner keeps those every
filter here keeps. A pinned target (``--provider X``) is the same plan with the ``provider``
filter on, so a flag means the same pinned or planned, and a pin that nothing survives is refused
with the words of the filter that refused it (``refusal``). A filter runs as early as what it reads
allows: ``shape`` filters before the layout is resolved or anything estimated (no scheduler is
asked about a candidate a flag drops), ``layout`` ones on the resolved node layout, ``price`` ones
on the estimate.

Every ``PlacementRequest`` field is a filter here, shapes the estimate (``ESTIMATE``) or says how
to build the chosen target (``request.HOW_TO_BUILD``); ``tests/burst/placement/test_filters.py``
holds each to it on every kind of target, pinned and planned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import names
from .candidate import Candidate
from .reasons import Code

Asked = Any  # ``sources.asked.Asked``, which applies this table (an import of it would be a circle)

#: the request fields that change what a candidate is estimated at, not which candidates there are
ESTIMATE = ("workload", "batch_per_replica", "epochs", "events", "scan", "staged_on", "live")
STAGES = ("shape", "layout", "price")


@dataclass(frozen=True)
class Filter:
    name: str                                     # the request field (or the policy's rule) it applies
    stage: str                                    # shape | layout | price: what it reads of a candidate
    code: Code
    excluded: str                                 # what ``burst plan`` counts the candidates it drops under
    applies: Callable[[Asked], bool]            # whether the request (or policy) asks anything of it
    keeps: Callable[[Candidate, Asked], bool]
    says: Callable[[Asked, list[Candidate]], str]  # why it refused these candidates (one provider's), one line


def _place(c: Candidate) -> str:
    return {"local": "this machine", "onprem": f"the on-prem site {c.region}"}.get(c.target, c.provider)


def _listed(values) -> str:
    return ", ".join(str(v) for v in sorted(set(values), key=lambda v: (str(type(v)), v)))


def gpu_memory_gb(c: Candidate, asked: Asked) -> Optional[float]:
    """The memory of one of the candidate's accelerators, by the catalog (the smallest its name
    has there, so a site's V100 is never taken for the larger one); None where it says nothing."""
    if c.target == "local":
        return None
    if c.layout is not None:
        figures = [p.offer.accelerator_memory_gb for p in c.layout.pools]
    else:
        figures = [o.accelerator_memory_gb for o in asked.offers
                   if o.accelerator == c.accelerator and (c.target != "cloud" or o.provider == c.provider)]
    return None if not figures or None in figures else min(figures)


def _gpus_kept(c: Candidate, asked: Asked) -> bool:
    if c.target == "local":  # this machine trains on its CPUs; pinned, --gpus offers its own GPUs to Ray
        return asked.cpu_scan or asked.ask.provider == c.provider
    return c.count == asked.gpus


def _gpus_said(asked: Asked, refused: list[Candidate]) -> str:
    c = refused[0]
    if c.target == "local":
        return f"--gpus {asked.gpus}: this machine trains on its CPUs; pin --provider {c.provider} to offer its GPUs to Ray"
    return f"--gpus {asked.gpus}: {_place(c)} offers {_listed(f'{x.accelerator} x{x.count}' for x in refused)}"


def _per_node(c: Candidate) -> Optional[int]:
    if c.target == "cloud" and (c.layout is None or not c.layout.is_tpu):
        sizes = {p.offer.accelerator_count for p in c.layout.pools} if c.layout is not None else set()
        return sizes.pop() if len(sizes) == 1 else None
    return None


def _per_node_kept(c: Candidate, asked: Asked) -> bool:
    want = asked.ask.gpus_per_node
    if c.target == "onprem":
        return asked.policy.onprem.gpus_per_node == want
    return _per_node(c) == want


def _per_node_said(asked: Asked, refused: list[Candidate]) -> str:
    c, want = refused[0], asked.ask.gpus_per_node
    if c.target == "local":
        return f"--gpus-per-node {want} does not apply to --provider {c.provider} (this machine)"
    if c.target == "onprem":
        return f"--gpus-per-node {want}: {_place(c)} has nodes of {asked.policy.onprem.gpus_per_node} GPUs (onprem.gpus_per_node)"
    if c.layout is not None and c.layout.is_tpu:
        return f"--gpus-per-node {want} does not apply to TPU slices ({c.provider}); --gpus counts a slice's chips"
    return f"--gpus-per-node {want}: {c.accelerator} on {c.provider} comes in nodes of {_listed(n for x in refused if (n := _per_node(x)))} GPUs"


def _avoided(c: Candidate, asked: Asked) -> bool:
    avoid = asked.ask.avoid
    return c.provider in avoid or f"{c.provider}:{c.region}" in avoid


def over_price(hourly_usd: float, cap: Optional[float]) -> Optional[str]:
    """Why a cluster of ``hourly_usd`` is over the price cap, or None."""
    return None if cap is None or hourly_usd <= cap else f"${hourly_usd:,.2f}/h is over --max-price-per-hour {cap:g}"


def _memory_said(asked: Asked, refused: list[Candidate]) -> str:
    want = asked.ask.min_gpu_memory
    known = sorted({m for c in refused if (m := gpu_memory_gb(c, asked)) is not None})
    c = refused[0]
    if not known:
        return f"--min-gpu-memory {want:g}: the GPU memory of {_place(c)}'s {c.accelerator} is unknown (the catalog has no figure)"
    return f"--min-gpu-memory {want:g}: {c.accelerator} on {_place(c)} has {_listed(f'{m:g}' for m in known)} GB"


def _spot_said(asked: Asked, refused: list[Candidate]) -> str:
    c, spot = refused[0], asked.ask.preemptible
    if c.target != "cloud":
        where = f"--provider {c.provider} (this machine)" if c.target == "local" else _place(c)
        return f"--preemptible does not apply to {where}"
    return (f"--preemptible: {c.accelerator} x{c.count} on {c.provider} has no spot/preemptible offer; use --on-demand" if spot
            else f"--on-demand: {c.accelerator} x{c.count} on {c.provider} is sold as spot only; use --preemptible")


def _region_said(asked: Asked, refused: list[Candidate]) -> str:
    c, region = refused[0], asked.ask.region
    if c.target == "local":
        return f"--region does not apply to --provider {c.provider} (this machine)"
    if c.target == "onprem":
        return f"--region {region}: the on-prem site is {c.region}, not {region}"
    return f"--region {region}: {c.accelerator} on {c.provider} is offered in {_listed(x.region for x in refused)}, not in {region}"


def _accelerator_said(asked: Asked, refused: list[Candidate]) -> str:
    c, acc = refused[0], asked.ask.accelerator
    if c.target == "local":
        return f"--accelerator does not apply to --provider {c.provider} (this machine)"
    if c.target == "onprem":
        return f"--accelerator {acc}: the on-prem site {c.region} has {c.accelerator}, not {acc}"
    return f"--accelerator {acc}: provider {c.provider} has no accelerator {acc!r}; it has: {_listed(x.accelerator for x in refused)}"


def _nodes_said(asked: Asked, refused: list[Candidate]) -> str:
    c = refused[0]
    if c.target == "local":
        return f"--nodes {asked.ask.nodes}: this machine is one node"
    return f"--nodes {asked.ask.nodes}: {_place(c)} lays these out over {_listed(x.nodes for x in refused)} node(s)"


def _policy_region_said(asked: Asked, refused: list[Candidate]) -> str:
    return f"region {refused[0].region} is not allowed by the policy (regions: {', '.join(asked.policy.regions)})"


def _policy_accelerator_said(asked: Asked, refused: list[Candidate]) -> str:
    return f"accelerator {refused[0].accelerator} is not allowed by the policy (accelerators: {', '.join(asked.policy.accelerators or [])})"


def _price_said(asked: Asked, refused: list[Candidate]) -> str:
    cheapest = min(refused, key=lambda c: c.estimate.hourly_usd)
    return f"the cheapest {cheapest.provider} option, {cheapest.layout_text}, {over_price(cheapest.estimate.hourly_usd, asked.ask.max_price_per_hour)}"


#: in order: a refusal names the filter the candidates that got furthest failed, so the request's
#: own flags come before the policy's rules (a region the flags ask for and the policy forbids
#: is refused by the policy) and the price, which needs the estimate, comes last
FILTERS: tuple[Filter, ...] = (
    Filter("provider", "shape", Code.OTHER_TARGET, "another provider",
           lambda a: a.ask.provider is not None, lambda c, a: c.provider == a.ask.provider,
           lambda a, r: f"--provider {a.ask.provider}: no such candidate"),
    Filter("accelerator", "shape", Code.OTHER_TARGET, "another accelerator",
           lambda a: a.ask.accelerator is not None, lambda c, a: names.matches(a.ask.accelerator, c.accelerator), _accelerator_said),
    Filter("gpus", "shape", Code.OTHER_TARGET, "another device count",
           lambda a: a.gpus is not None, _gpus_kept, _gpus_said),
    Filter("region", "shape", Code.OTHER_TARGET, "another region",
           lambda a: a.ask.region is not None, lambda c, a: c.region == a.ask.region, _region_said),
    Filter("preemptible", "shape", Code.OTHER_TARGET, "other capacity (spot or on-demand)",
           lambda a: a.ask.preemptible is not None, lambda c, a: c.preemptible == a.ask.preemptible, _spot_said),
    Filter("min_gpu_memory", "shape", Code.TOO_LITTLE_MEMORY, "under --min-gpu-memory",
           lambda a: a.ask.min_gpu_memory is not None,
           lambda c, a: (m := gpu_memory_gb(c, a)) is not None and m >= a.ask.min_gpu_memory, _memory_said),
    Filter("avoid", "shape", Code.LOST_THERE, "lost a cluster there",
           lambda a: bool(a.ask.avoid), lambda c, a: not _avoided(c, a),
           lambda a, r: f"a managed run already lost a cluster on {r[0].provider} ({', '.join(a.ask.avoid)})"),
    Filter("policy.regions", "shape", Code.NOT_IN_POLICY, "region not allowed",
           lambda a: True, lambda c, a: c.target != "cloud" or a.policy.region_allowed(c.region), _policy_region_said),
    Filter("policy.accelerators", "shape", Code.NOT_IN_POLICY, "accelerator not allowed",
           lambda a: True, lambda c, a: c.target == "local" or a.policy.accelerator_allowed(c.accelerator), _policy_accelerator_said),
    Filter("policy.max_gpus", "shape", Code.NOT_IN_POLICY, "over max_gpus",
           lambda a: True, lambda c, a: c.target == "local" or c.count <= a.policy.max_gpus,
           lambda a, r: f"{r[0].count} {r[0].accelerator} is over the policy's max_gpus {a.policy.max_gpus}"),
    Filter("gpus_per_node", "layout", Code.OTHER_TARGET, "another node shape",
           lambda a: a.ask.gpus_per_node is not None, _per_node_kept, _per_node_said),
    Filter("nodes", "layout", Code.OTHER_TARGET, "another node count",
           lambda a: a.ask.nodes is not None, lambda c, a: c.nodes == a.ask.nodes, _nodes_said),
    Filter("max_price_per_hour", "price", Code.OVER_PRICE_CAP, "over --max-price-per-hour",
           lambda a: a.ask.max_price_per_hour is not None,
           lambda c, a: over_price(c.estimate.hourly_usd, a.ask.max_price_per_hour) is None, _price_said),
)

#: where a source's own "cannot be made" (no node shape for the count, more GPUs than the site has)
#: ranks among the filters: after every shape filter, which it got past
SOURCE_RANK = next(i for i, f in enumerate(FILTERS) if f.stage != "shape") - 0.5


def request_fields() -> set[str]:
    """The request fields the table filters on."""
    return {f.name for f in FILTERS if not f.name.startswith("policy.")}
