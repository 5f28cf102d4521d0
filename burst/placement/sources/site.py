"""Candidates on the user's own site (an on-prem Ray cluster, a Slurm site, a Kubernetes cluster):
the policy's ``onprem`` section, GPU counts up to its allocation, the scheduler's queue asked live."""

from __future__ import annotations

from typing import Optional

from ... import targets
from .. import estimate as est_mod
from .. import names
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
        if site is None or not targets.get(prov).serves(site) or ask.preemptible is True or (ask.region is not None and ask.region != site.name):
            continue
        if not policy.accelerator_allowed(site.accelerator) or (ask.accelerator and not names.matches(ask.accelerator, site.accelerator)):
            asked.skip("accelerator not allowed")
            continue
        if not profile.knows(site.accelerator):
            asked.skip("no speed for the accelerator in the workload's profile")
            continue
        cap = min(site.gpus, policy.max_gpus)
        counts = gpu_counts(cap, gpus)
        if gpus is None and cap not in counts:
            counts.append(cap)  # the whole on-prem allocation, even when it is not a power of two
        if gpus is not None and gpus > site.gpus:
            asked.skip("more GPUs than on-prem has")
            counts = []
        if ask.nodes is not None:
            kept = [n for n in counts if est_mod.onprem_nodes(profile, policy, n) == ask.nodes]
            if len(kept) < len(counts):
                asked.skip("another node count")
            counts = kept
        for n in counts:
            out.append(Candidate("onprem", prov, site.name, site.accelerator, n, False,
                                 estimate(prov, n, profile, policy, asked.epochs, ask.events, asked.batch, asked.scan, live=ask.live),
                                 nodes=est_mod.onprem_nodes(profile, policy, n)))
    return out


def estimate(provider: str, gpus: int, profile: Profile, policy: Policy, epochs: int, events: Optional[int] = None,
             batch: Optional[int] = None, scan: Optional[ScanShape] = None, live: bool = True) -> est_mod.Estimate:
    """The on-prem estimate, with the queue wait the site's scheduler gives now when it can be (and ``live``: may be) asked."""
    target = targets.get(provider)
    if not target.is_scheduler or not live:
        return est_mod.onprem(gpus, profile, policy, epochs, events, batch=batch, scan=scan)
    first = est_mod.onprem(gpus, profile, policy, epochs, events, batch=batch, scan=scan)
    wait = target.queue_estimate(policy.onprem, est_mod.onprem_nodes(profile, policy, gpus), first.training_h)
    return est_mod.onprem(gpus, profile, policy, epochs, events, queue_h=wait.hours, queue_note=wait.note, batch=batch, scan=scan)
