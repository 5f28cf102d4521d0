"""Candidates in the clouds: the catalog's offers grouped by provider, region and accelerator, each
resolved into node layouts for every GPU count (a TPU slice is one), spot and on-demand."""

from __future__ import annotations

from ... import targets
from ...catalog import facts
from .. import estimate as est_mod
from .. import names
from ..candidate import Candidate
from ...values.placement import Offer
from ..layout import MixedInterconnect, resolve
from ...errors import BurstError
from .asked import Asked, gpu_counts


def candidates(asked: Asked, providers: list[str]) -> list[Candidate]:
    policy, profile, ask, gpus, scan = asked.policy, asked.profile, asked.ask, asked.gpus, asked.scan
    shapes: dict[tuple[str, str, str], list[Offer]] = {}
    for o in asked.offers:
        if o.provider not in providers or (ask.region is not None and o.region != ask.region):
            continue
        if not policy.region_allowed(o.region):
            asked.skip("region not allowed")
            continue
        if not policy.accelerator_allowed(o.accelerator) or (ask.accelerator and not names.matches(ask.accelerator, o.accelerator)):
            asked.skip("accelerator not allowed")
            continue
        shapes.setdefault((o.provider, o.region, o.accelerator), []).append(o)
    out = []
    for (prov, reg, acc), group in sorted(shapes.items()):
        if not profile.knows(acc):
            asked.skip("no speed for the accelerator in the workload's profile")
            continue
        tpu = group[0].is_tpu
        hosts_driven = targets.get(prov).tpu_hosts_driven if tpu else None
        if tpu and hosts_driven is not None and facts.tpu_hosts(acc) > hosts_driven:
            asked.skip(f"a TPU slice of more than {hosts_driven} host(s): the {prov} target trains on no more")
            continue
        if tpu and scan is not None:
            asked.skip("a scan needs a Ray cluster of GPUs (a TPU VM trains one job per slice)")
            continue
        if tpu and group[0].accelerator_count > policy.max_gpus:
            asked.skip("over max_gpus")
            continue
        if tpu and gpus is not None and group[0].accelerator_count != gpus:  # for a TPU, --gpus counts chips
            asked.skip("TPU slice of another chip count")
            continue
        for spot in asked.spot_choices:  # spot and on-demand may differ in shapes (some are sold as spot only)
            layouts = []
            for n in [None] if tpu else gpu_counts(policy.max_gpus, gpus):
                try:
                    layouts.append(resolve(group, prov, acc, n, region=reg, preemptible=spot, max_gpus_per_zone=policy.max_gpus_per_zone,
                                           gpus_per_node=None if tpu else ask.gpus_per_node))
                except MixedInterconnect:
                    asked.skip("would mix InfiniBand and Ethernet-only nodes")
                except BurstError:
                    asked.skip("no node shape for the count")
            for lay in layouts:
                if ask.nodes is not None and lay.nodes != ask.nodes:
                    asked.skip("another node count")
                    continue
                if spot and not lay.has_spot:
                    asked.skip("no spot offer")
                    continue
                e = est_mod.cloud(lay, spot, profile, policy, asked.epochs, ask.events, asked.batch, scan, staged_on=ask.staged_on)
                out.append(Candidate("cloud", prov, reg, acc, lay.count, spot, e, layout=lay, nodes=lay.nodes))
    return out
