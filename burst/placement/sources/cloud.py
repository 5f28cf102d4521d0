"""Candidates in the clouds: the catalog's offers grouped by provider, region and accelerator, each
resolved into node layouts for every GPU count (a TPU slice is one), spot and on-demand. Which of
them a request keeps is the filters' word (``filters.FILTERS``), asked before a layout is resolved."""

from __future__ import annotations

from ... import targets
from ...catalog import facts
from .. import estimate as est_mod
from ..candidate import Candidate
from ...values.placement import Offer
from ..layout import MixedInterconnect, resolve
from ...errors import BurstError
from .asked import Asked, gpu_counts


def candidates(asked: Asked, providers: list[str]) -> list[Candidate]:
    policy, profile, ask, gpus, scan = asked.policy, asked.profile, asked.ask, asked.gpus, asked.scan
    shapes: dict[tuple[str, str, str], list[Offer]] = {}
    for o in asked.offers:
        if o.provider in providers:
            shapes.setdefault((o.provider, o.region, o.accelerator), []).append(o)
    out = []
    for (prov, reg, acc), group in sorted(shapes.items()):
        tpu = group[0].is_tpu
        for spot in asked.spot_choices:  # spot and on-demand may differ in shapes (some are sold as spot only)
            for n in [group[0].accelerator_count] if tpu else gpu_counts(policy.max_gpus, gpus):
                if not asked.admits(Candidate("cloud", prov, reg, acc, n, spot, None), "shape"):
                    continue
                if not profile.knows(acc):
                    asked.skip("no speed for the accelerator in the workload's profile", prov,
                               f"the {profile.workload} profile has no speed for {acc}; `burst calibrate` a run on it first")
                    continue
                hosts_driven = targets.get(prov).tpu_hosts_driven if tpu else None
                if tpu and hosts_driven is not None and facts.tpu_hosts(acc) > hosts_driven:
                    asked.skip(f"a TPU slice of more than {hosts_driven} host(s): the {prov} target trains on no more", prov)
                    continue
                if tpu and scan is not None:
                    asked.skip("a scan needs a Ray cluster of GPUs (a TPU VM trains one job per slice)", prov)
                    continue
                try:
                    lay = resolve(group, prov, acc, None if tpu else n, region=reg, preemptible=spot,
                                  max_gpus_per_zone=policy.max_gpus_per_zone, gpus_per_node=None if tpu else ask.gpus_per_node)
                except MixedInterconnect as exc:
                    asked.skip("would mix InfiniBand and Ethernet-only nodes", prov, str(exc))
                    continue
                except BurstError as exc:
                    asked.skip("no node shape for the count", prov, str(exc))
                    continue
                if spot and not lay.has_spot:
                    asked.skip("no spot offer", prov, f"{lay.describe()} in {lay.region} has no spot/preemptible offer; use --on-demand")
                    continue
                c = Candidate("cloud", prov, reg, acc, lay.count, spot, None, layout=lay, nodes=lay.nodes)
                if not asked.admits(c, "layout"):
                    continue
                c.estimate = est_mod.cloud(lay, spot, profile, policy, asked.epochs, ask.events, asked.batch, scan, staged_on=ask.staged_on)
                out.append(c)
    return out
