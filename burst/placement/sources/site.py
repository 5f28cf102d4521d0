"""Candidates on the user's own site (an on-prem Ray cluster, a Slurm site, a Kubernetes cluster):
the policy's ``onprem`` section, GPU counts up to its allocation, the scheduler's queue asked live
for the counts the filters keep (``filters.FILTERS``)."""

from __future__ import annotations

from typing import Optional

from ... import targets
from .. import estimate as est_mod
from ..candidate import Candidate
from ..policy import Policy
from ..profile import Profile
from ..scan import ScanShape
from .asked import Asked, gpu_counts


def candidates(asked: Asked, providers: list[str]) -> list[Candidate]:
    policy, profile, ask, gpus = asked.policy, asked.profile, asked.ask, asked.gpus
    site = policy.onprem
    out = []
    for prov in providers:
        target = targets.get(prov)
        if site is None or not target.serves(site):
            continue
        cap = min(site.gpus, policy.max_gpus)
        counts = gpu_counts(cap, gpus)
        if gpus is None and cap not in counts:
            counts.append(cap)  # the whole on-prem allocation, even when it is not a power of two
        for n in counts:
            natural = est_mod.onprem_nodes(profile, policy, n)
            # a scheduler allocates the nodes asked for (--nodes), when they hold the devices
            nodes = ask.nodes if target.is_scheduler and ask.nodes is not None and ask.nodes >= natural else natural
            if n > site.gpus:
                asked.skip("more GPUs than on-prem has", prov, f"--gpus {n}: the on-prem site {site.name} offers {site.gpus} GPUs to one run")
                continue
            c = Candidate("onprem", prov, site.name, site.accelerator, n, False, None, nodes=nodes)
            if not asked.admits(c, "shape"):
                continue
            if not profile.knows(site.accelerator):
                asked.skip("no speed for the accelerator in the workload's profile", prov,
                           f"the {profile.workload} profile has no speed for the on-prem site's {site.accelerator}")
                continue
            if not asked.admits(c, "layout"):
                continue
            c.estimate = estimate(prov, n, profile, policy, asked.epochs, ask.events, asked.batch, asked.scan, live=ask.live, nodes=nodes)
            out.append(c)
    return out


def estimate(provider: str, gpus: int, profile: Profile, policy: Policy, epochs: int, events: Optional[int] = None,
             batch: Optional[int] = None, scan: Optional[ScanShape] = None, live: bool = True, nodes: Optional[int] = None) -> est_mod.Estimate:
    """The on-prem estimate, with the queue wait the site's scheduler gives now when it can be (and ``live``: may be) asked
    (for ``nodes``, by default the nodes the devices span)."""
    target = targets.get(provider)
    if not target.is_scheduler or not live:
        return est_mod.onprem(gpus, profile, policy, epochs, events, batch=batch, scan=scan)
    first = est_mod.onprem(gpus, profile, policy, epochs, events, batch=batch, scan=scan)
    wait = target.queue_estimate(policy.onprem, nodes or est_mod.onprem_nodes(profile, policy, gpus), first.training_h)
    return est_mod.onprem(gpus, profile, policy, epochs, events, queue_h=wait.hours, queue_note=wait.note, batch=batch, scan=scan)
