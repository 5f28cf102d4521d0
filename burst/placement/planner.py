"""Placement: every candidate target, estimated, checked against the policy, ranked; the choice.

Candidates a filter refuses (``filters.FILTERS``: the request's flags, the policy's scope, the price
cap) are dropped and only counted; candidates inside the scope that miss the deadline or the budget
are kept, infeasible, with the reason, so ``burst plan`` can show the nearest miss when nothing
fits. Pinning a target (``pin``) is the same plan with the provider's filter on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from . import names
from ..values import command_values
from .. import targets
from ..errors import BurstError
from ..values.placement import Offer, Placement
from .candidate import Candidate
from .reasons import BLOCKING, BUDGET_OR_DEADLINE, DEADLINE, Code, Reason, code_of, having
from .request import HOW_TO_BUILD, PlacementRequest
from .scan import ScanShape
from .policy import LocalMachine, Policy
from .profile import Profile
from .sources import SOURCES, Asked


@dataclass
class Plan:
    candidates: list[Candidate]
    choice: Optional[Candidate]
    nearest: Optional[Candidate]
    why: str
    excluded: dict[str, int]
    epochs: int
    deadline_h: Optional[float]
    budget_usd: Optional[float]
    max_kgco2e: Optional[float] = None
    scan: Optional[str] = None  # the scan's shape and ASHA assumption, when the plan is for one
    refusal: Optional[str] = None  # a pinned provider none of whose candidates a filter kept: the filter's words

    def to_dict(self) -> dict:
        return {"choice": self.choice.to_dict() if self.choice else None,
                "nearest": self.nearest.to_dict() if self.nearest and not self.choice else None,
                "why": self.why, "epochs": self.epochs, "deadline_hours": self.deadline_h, "budget_usd": self.budget_usd,
                "max_kgco2e": self.max_kgco2e, "scan": self.scan,
                "excluded": self.excluded, "candidates": [c.to_dict() for c in self.candidates]}


_QUALITY = ("catalog", "corrected", "derived", "estimate")


def _epochs(policy: Policy, profile: Profile, asked: Optional[int]) -> int:
    """Epochs to plan for: the command line's, else the policy's, else the workload profile's."""
    return asked or policy.epochs or profile.epochs


def candidates(policy: Policy, profile: Profile, offers: list[Offer], ask: PlacementRequest = PlacementRequest()) -> tuple[list[Candidate], dict[str, int]]:
    """Every target the policy (and the command line's narrowing, ``ask``) allows, with its estimate.

    What each request field and policy rule keeps is one filter of ``filters.FILTERS``: a pinned
    ``ask.provider`` is one more of them, so pinned and planned read every flag the same."""
    out, asked = _candidates(policy, profile, offers, ask)
    return out, asked.excluded


def _candidates(policy: Policy, profile: Profile, offers: list[Offer], ask: PlacementRequest) -> tuple[list[Candidate], Asked]:
    """What every kind of target can run for ``ask`` (``sources``, through the filters), after what
    applies to all of them: the scan's GPUs, known accelerator names, the providers and spot choices
    the policy allows; then the filters that read the estimate."""
    gpus, scan = ask.gpus, ask.scan
    cpu_scan = scan is not None and scan.gpus_per_trial is None and gpus is None
    if scan is not None:
        if gpus is not None and gpus % scan.devices_per_trial:
            raise BurstError(f"--gpus {gpus} is not a whole number of trials of {scan.devices_per_trial} GPU(s)")
        if gpus is not None:
            scan = ScanShape(scan.trials, scan.gpus_per_trial, gpus // scan.devices_per_trial, scan.grace_period, scan.reduction_factor)
        gpus = scan.gpus
    if ask.accelerator:
        names.check_known(ask.accelerator, [o.accelerator for o in offers] + ([policy.onprem.accelerator] if policy.onprem else []))
    if ask.provider is not None and ask.provider not in policy.providers:
        raise BurstError(f"provider {ask.provider!r} is not allowed by the policy (providers: {', '.join(policy.providers)})")
    providers = [p for p in policy.providers if ask.provider is None or p == ask.provider]
    spot_choices = {"never": [False], "prefer": [True, False], "only": [True]}[policy.preemptible]
    if ask.preemptible is not None and ask.preemptible not in spot_choices:
        raise BurstError(f"--{'preemptible' if ask.preemptible else 'on-demand'} conflicts with the policy's preemptible: {policy.preemptible}")
    asked = Asked(policy, profile, offers, ask, _epochs(policy, profile, ask.epochs), ask.batch_per_replica or profile.default_batch(),
                  gpus, scan, cpu_scan, spot_choices)
    kinds = {p: targets.get(p).kind for p in providers}
    out: list[Candidate] = []
    for kind, source in SOURCES.items():  # this machine, the site, the clouds
        out += source(asked, [p for p in providers if kinds[p] == kind])
    return [c for c in out if asked.admits(c, "price")], asked


def _check(c: Candidate, deadline_h: Optional[float], budget: Optional[float], max_kg: Optional[float] = None) -> None:
    e = c.estimate
    c.reasons = list(e.notes)
    c.feasible = e.feasible
    ratios = [0.0]
    if not e.feasible:
        ratios.append(float("inf"))
    if deadline_h is not None:
        if deadline_h <= 0:
            c.feasible = False
            c.reasons.insert(0, Reason(Code.DEADLINE_PASSED, "the deadline has passed"))
            ratios.append(float("inf"))
        elif e.hours > deadline_h:
            c.feasible = False
            c.reasons.insert(0, Reason(Code.MISSES_DEADLINE, f"misses the deadline: {e.hours:.1f} h > {deadline_h:.1f} h"))
        ratios.append(e.hours / deadline_h if deadline_h > 0 else float("inf"))
    if budget is not None:
        if e.cost_usd > budget:
            c.feasible = False
            c.reasons.insert(0, Reason(Code.OVER_BUDGET, f"over budget: ${e.cost_usd:,.2f} > ${budget:,.2f}"))
        ratios.append(e.cost_usd / budget)
    if max_kg is not None:
        if e.kgco2e is None:
            c.feasible = False
            c.reasons.insert(0, Reason(Code.EMISSIONS_UNKNOWN, "emissions unknown under a kgCO2e cap"))
            ratios.append(float("inf"))
        else:
            if e.kgco2e > max_kg:
                c.feasible = False
                c.reasons.insert(0, Reason(Code.OVER_EMISSIONS, f"over the emissions cap: {e.kgco2e:,.1f} kgCO2e > {max_kg:,.1f}"))
            ratios.append(e.kgco2e / max_kg)
    c.violation = max(ratios)


def _too_slow(cands: list[Candidate], max_slowdown: float, onprem_first: bool) -> None:
    """No free lunch: an option more than ``max_slowdown`` times slower than the fastest feasible one is out.

    The on-prem site is exempt when the policy says to stay on-prem until a burst condition holds
    (``burst_when``): that preference is the policy's own, and the deadline already bounds it."""
    feasible = [c.estimate.hours for c in cands if c.feasible]
    if not feasible:
        return
    fastest = min(feasible)
    for c in cands:
        if onprem_first and c.target == "onprem":
            continue
        if c.feasible and c.estimate.hours > max_slowdown * fastest:
            c.feasible = False
            c.reasons.insert(0, Reason(Code.TOO_SLOW, f"too slow: {c.estimate.hours / fastest:,.0f}x the fastest feasible option "
                                                      f"({c.estimate.hours:,.1f} h vs {fastest:,.2f} h; the policy's max_slowdown is {max_slowdown:g})"))
            c.violation = max(c.violation, c.estimate.hours / (max_slowdown * fastest))


def _kg(c: Candidate) -> float:
    kg = c.estimate.kgco2e
    return float("inf") if kg is None else kg


def plan(policy: Policy, profile: Profile, offers: list[Offer], ask: PlacementRequest = PlacementRequest()) -> Plan:
    """Rank every candidate by the objective under the constraints and pick one."""
    deadline_h = policy.deadline_hours()
    budget = policy.budget_usd
    cands, asked = _candidates(policy, profile, offers, ask)
    excluded = asked.excluded
    epochs = _epochs(policy, profile, ask.epochs)
    for c in cands:
        _check(c, deadline_h, budget, policy.max_kgco2e)
    _too_slow(cands, policy.max_slowdown, policy.burst_when is not None)

    objective = {"min_cost": lambda c: (c.estimate.cost_usd, c.estimate.hours),
                 "min_time": lambda c: (c.estimate.hours, c.estimate.cost_usd),
                 "min_carbon": lambda c: (_kg(c), c.estimate.hours)}[policy.objective]
    prefer_spot = policy.preemptible == "prefer"

    # On-prem first when the policy says when to burst and no burst condition holds.
    onprem_first = False
    why = ""
    bursting = False                    # a burst condition holds: the site only if nothing else is feasible
    if policy.burst_when is not None and (ask.provider is None or targets.get(ask.provider).kind == "onprem"):
        site = [c for c in cands if c.target == "onprem"]
        best_site = min(site, key=lambda c: (not c.feasible, objective(c))) if site else None
        bw = policy.burst_when
        triggers = []
        if best_site is None:
            triggers.append("no on-prem capacity in the policy")
        else:
            if bw.queue_wait_over_hours is not None and best_site.estimate.queue_h > bw.queue_wait_over_hours:
                triggers.append(f"on-prem queue wait {best_site.estimate.queue_h:g} h is over {bw.queue_wait_over_hours:g} h")
            if bw.deadline_missed and having(best_site.reasons, DEADLINE):
                triggers.append("on-prem cannot meet the deadline")
            if bw.over_budget and having(best_site.reasons, frozenset({Code.OVER_BUDGET})):
                triggers.append("on-prem would exceed the budget")
        if not triggers and best_site is not None and best_site.feasible:
            onprem_first = True
            why = "on-prem first: it meets the deadline and budget and no burst condition holds"
        else:
            bursting = True
            why = "bursting: " + "; ".join(triggers or ["on-prem is not feasible"])

    def key(c: Candidate):
        return (not c.feasible,
                0 if (not onprem_first or c.target == "onprem") and not (bursting and c.target == "onprem") else 1,
                0 if (not prefer_spot or c.preemptible or c.target != "cloud") else 1,
                objective(c),
                _QUALITY.index(c.layout.quality) if c.layout else 0)

    cands.sort(key=key)
    choice = cands[0] if cands and cands[0].feasible else None
    if choice is not None and policy.tolerance > 0:
        # Near-ties on the objective are decided by the other measure: 8 on-prem GPUs for 1 %
        # more than 1 GPU, but 8x sooner, is the better choice.
        tier = key(choice)[:3]
        best = objective(choice)[0]
        close = [c for c in cands if c.feasible and key(c)[:3] == tier and objective(c)[0] <= best * (1 + policy.tolerance)]
        choice = min(close, key=lambda c: (objective(c)[1], objective(c)[0]))
        cands.remove(choice)
        cands.insert(0, choice)
    nearest = None
    if choice is None:
        if cands:
            nearest = min(cands, key=lambda c: (c.violation, objective(c)))
            why = (why + "; " if why else "") + f"nothing is feasible; nearest: {nearest.provider} {nearest.accelerator} x{nearest.count} ({'; '.join(nearest.reasons[:1])})"
        else:
            why = (why + "; " if why else "") + "no candidate is allowed by the policy and the flags" + (
                f": {asked.refusal(ask.provider)}" if ask.provider is not None else "") + (
                f" (excluded: {', '.join(f'{k} {v}' for k, v in excluded.items())})" if excluded else "")
    else:
        obj = {"min_cost": "cheapest", "min_time": "fastest", "min_carbon": "lowest-emission"}[policy.objective]
        if not why:
            why = f"{obj} feasible option"
        elif not onprem_first and choice.target == "onprem":
            why += "; no target to burst to is feasible, so the on-prem site after all"
        elif not onprem_first:
            why += f"; {obj} feasible option"
        if prefer_spot and choice.preemptible:
            why += " (preemptible preferred)"
    slow = [c for c in cands if c.reasons and code_of(c.reasons[0]) is Code.TOO_SLOW]
    if choice is not None and slow:
        why += f"; {len(slow)} slower option(s) left out by max_slowdown {policy.max_slowdown:g}"
    scan = ask.scan
    return Plan(cands, choice, nearest, why, excluded, epochs, deadline_h, budget, policy.max_kgco2e,
                scan=scan.note(epochs) if scan is not None else None,
                refusal=asked.refusal(ask.provider) if ask.provider is not None and not cands else None)


# --------------------------------------------------------------------------- the hand-off to a target


def from_candidate(c: Candidate, policy: Optional[Policy], notes: tuple[str, ...] = ()) -> Placement:
    hourly = c.layout.hourly_usd(c.preemptible) if c.layout else c.estimate.hourly_usd
    return Placement(provider=c.provider, region=c.region, accelerator=c.accelerator, count=c.count, preemptible=c.preemptible,
                     hourly_usd=hourly, layout=c.layout, gpus=c.count if c.target == "onprem" else None,
                     nodes=c.nodes if c.target == "onprem" and targets.get(c.provider).is_scheduler else None,
                     site=policy.onprem if policy is not None and c.target == "onprem" else None, estimate=c.estimate, notes=notes)


def choose(policy: Policy, profile: Profile, offers: list[Offer], ask: PlacementRequest = PlacementRequest()) -> Placement:
    """The plan's choice as a placement; one line saying why when nothing is feasible."""
    p = plan(policy, profile, offers, ask)
    if p.choice is None:
        raise BurstError(f"the plan finds no feasible target: {p.why}; see `burst plan`")
    return from_candidate(p.choice, policy)


def pin(policy: Optional[Policy], profile: Profile, offers: list[Offer], ask: PlacementRequest) -> Placement:
    """The placement on ``ask.provider``: the plan restricted to that target, every other flag read
    as the plan reads it (``filters.FILTERS``), then built as the how-to-build flags say.

    A pin no candidate survives is refused with the words of the filter that refused it; one whose
    best candidate merely misses the deadline or budget goes ahead, with a note (the budget guard
    still stops the run before the budget is spent)."""
    provider = ask.provider
    if provider is None:
        raise BurstError("pinning a placement needs a provider")
    target = targets.get(provider)
    _builds_there(target, ask, policy)
    if policy is None:  # this machine with no policy: nothing asked burst to price its time
        policy = Policy(providers=[provider], local=LocalMachine(usd_per_hour=0.0))
    p = plan(policy, profile, offers, ask.but(**{name: None for name in HOW_TO_BUILD}))
    if p.refusal is not None:
        raise BurstError(p.refusal)
    notes: tuple[str, ...] = ()
    chosen = p.choice
    if chosen is None:
        goes = [c for c in p.candidates if not set(map(code_of, c.reasons)) & (BLOCKING - BUDGET_OR_DEADLINE)]
        if not goes:
            raise BurstError(f"--provider {provider}: {p.why}")
        chosen = min(goes, key=lambda c: c.violation)
        notes = tuple(having(chosen.reasons, BUDGET_OR_DEADLINE))
    placement = from_candidate(chosen, policy, notes)
    if target.kind == "local":
        return dataclasses.replace(placement, count=ask.cpus or placement.count, gpus=ask.gpus, storage=ask.storage)
    if target.kind == "onprem":
        site = placement.site
        if ask.partition is not None:
            site = site.model_copy(update={"partition": command_values.slurm_name(ask.partition, "--partition")})
        if ask.context is not None or ask.namespace is not None:
            site = site.model_copy(update={k: v for k, v in (("context", ask.context), ("namespace", ask.namespace)) if v is not None})
        return dataclasses.replace(placement, site=site)
    return placement


def _builds_there(target, ask: PlacementRequest, policy: Optional[Policy]) -> None:
    """One line when a how-to-build flag (or the policy) does not fit the pinned target."""
    provider, storage = ask.provider, ask.storage
    if (ask.context is not None or ask.namespace is not None) and not target.takes_context:
        raise BurstError(f"--context and --namespace choose where in a Kubernetes cluster burst did not create; {provider} is not one")
    if storage is not None and not target.takes_storage:
        if target.kind != "cloud":
            raise BurstError(f"--storage applies to this machine and the clouds; {provider} clusters keep their files on the site's storage")
        if storage.split("://", 1)[0] not in target.store_schemes or "://" not in storage:
            raise BurstError(f"--storage {storage}: a {provider} cluster's store is a bucket of its cloud "
                             f"({' or '.join(s + '://' for s in target.store_schemes)})")
    if target.kind == "local":
        return
    if policy is None:
        raise BurstError(f"--provider {provider} needs a policy; pass --policy FILE")
    if ask.partition is not None and not target.is_scheduler:
        raise BurstError(f"--partition applies to on-prem schedulers; {provider} places its own nodes")
    if ask.cpus is not None:
        raise BurstError(f"--cpus applies to --provider local; {provider} clusters have the CPUs of their nodes")
    if target.kind == "onprem":
        site = policy.onprem
        if site is None:
            raise BurstError(f"--provider {provider} needs a policy with an onprem section (ray_address, accelerator, gpus); pass --policy FILE")
        if not target.serves(site):
            raise BurstError(f"the policy's on-prem site {site.name} runs jobs with {site.scheduler}, not {provider}; "
                             f"set onprem.scheduler: {provider} in the policy, or use --provider {site.scheduler}")
