"""Where a request runs: the plan's choice under the policy, or the target it pins, as one
placement with its store, image and bundle; the one path from a placement request to a target
that ``burst.api`` and a managed run's controller both take."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from .. import targets
from ..errors import BurstError
from ..placement.request import PlacementRequest
from ..targets.base import QUIET, Reporter
from ..values import command_values


def load_policy(policy):
    """A loaded policy from a path (None: the default policy file) or an already loaded one."""
    from ..placement import policy as policy_mod

    return policy if isinstance(policy, policy_mod.Policy) else policy_mod.load(Path(policy) if policy else None)


def place(ask: PlacementRequest, policy, report: Reporter = QUIET):
    """(placement, policy) for a request: the plan's choice or the pinned target, in the store the
    policy names for it, with its image or bundle. Every start goes through it: ``burst.api``'s
    verbs and a managed run's move to its next target alike."""
    command_values.image(ask.image)  # before anything is planned or said
    placement, pol = _placed(ask, policy, report)
    if ask.image is not None:
        if not targets.get(placement.provider).runs_images:
            raise BurstError(f"--image applies to the cloud Kubernetes targets; {placement.provider} does not run container images")
        placement = dataclasses.replace(placement, image=ask.image)
    if ask.bundle is not None:
        if not targets.get(placement.provider).takes_bundle:
            raise BurstError(f"--bundle applies to on-prem targets (slurm, ray); {placement.provider} installs burst another way")
        from ..pack import check_bundle

        placement = dataclasses.replace(placement, bundle=str(check_bundle(ask.bundle)))
    return placement, pol


def _placed(ask: PlacementRequest, policy, report: Reporter):
    from ..catalog import offers as catalog_mod
    from ..placement import planner, profile

    ask.checked()
    provider = ask.provider
    # This machine needs no policy unless one is given; every other target is placed under one.
    pol = load_policy(policy) if policy is not None or provider is None or targets.get(provider).kind != "local" else None
    prof = profile.load(ask.workload_name)
    offers = catalog_mod.load()
    if provider is None:
        if ask.storage is not None:
            raise BurstError("--storage needs --provider (a store belongs to one cloud); or name a store per target in the policy's stores.named")
        chosen = planner.choose(pol, prof, offers, ask.narrowing())
        report.say(f"plan: {chosen.describe()}")
        if targets.get(chosen.provider).kind == "local" and ask.cpus is not None:
            chosen = planner.pin(pol, prof, offers, ask.but(provider=chosen.provider))
        return in_store(chosen, pol), pol
    placement = planner.pin(pol, prof, offers, ask)
    if ask.accelerator is None and placement.estimate is not None and placement.layout is not None:
        report.say(f"plan: {placement.describe()}")
    for note in placement.notes:
        report.say(f"note: {note}; going ahead as asked")
    return in_store(placement, pol, ask.storage), pol


def in_store(placement, pol, asked: Optional[str] = None):
    """The placement with the store the policy names for its target (``--storage`` wins); the
    store's lifecycle goes with it to the targets that make their region's own store."""
    if pol is None:
        return placement
    target = targets.get(placement.provider)
    if asked is not None and target.kind == "cloud":
        placement = dataclasses.replace(placement, storage=asked)
    named = None
    if target.takes_storage or target.kind == "cloud":
        named = pol.stores.named_for(placement.provider, placement.region if target.kind == "cloud" else None)
    return dataclasses.replace(placement, storage=placement.storage or named, stores=pol.stores)
