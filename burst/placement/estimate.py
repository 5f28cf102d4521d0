"""Time to result and cost of running a workload on one target.

time = provisioning + data staging + training + expected preemption loss
cost = hourly price x billed hours + storage + egress (on-prem: amortised price per GPU-hour)

Preemption: a synchronous job stops when any of its nodes is preempted, so interruptions come
at ``rate per node-hour x nodes``; each costs half a checkpoint interval of lost work plus the
time to get a node back. Losses stretch the run, which raises the exposure, hence the
``1 / (1 - f)`` form; when ``f >= 1`` preemptions outpace progress and the target is infeasible.
"""

from __future__ import annotations

import datetime
from functools import lru_cache
from typing import Optional


from .. import targets
from ..catalog import facts as facts_mod
from . import carbon
from ..errors import BurstError
from ..values.placement import Estimate, Layout
from .reasons import Code, Reason
from .policy import Policy
from .scan import ScanShape
from .profile import Profile

HOURS_PER_MONTH = 730.0


@lru_cache(maxsize=1)
def provider_facts() -> dict[str, facts_mod.CostModel]:
    """Each cloud's time and cost figures (the ``model`` of its facts file)."""
    return {p: f.model for p in targets.PROVIDERS if (f := facts_mod.load(p)).model is not None}


def _data_gb(profile: Profile, policy: Policy, events: Optional[int]) -> float:
    size = policy.data.size_gb if policy.data.size_gb is not None else profile.dataset_gb
    return size * ((events or profile.events) / profile.events)


def _staging(cloud: Optional[str], region: Optional[str], profile: Profile, policy: Policy, events: Optional[int]) -> tuple[float, float, str]:
    """(hours, egress USD, note) to bring the dataset to a cloud's region (``cloud`` None: on-prem or
    this machine). Priced by where the data goes: within a region free, between two regions of one
    cloud at its inter-region rate for the two continents, out of a cloud (to another cloud or the
    site) at its internet rate, out of the site at the site's own rate."""
    where = policy.data.location
    size = _data_gb(profile, policy, events)
    src_cloud, _, src_region = where.partition(":")
    hours = size * 8 / policy.data.uplink_gbps / 3600
    if not src_region:  # the data is on-prem or on this machine
        if cloud is None:
            return 0.0, 0.0, ""
        rate = policy.data.egress_usd_per_gb
        return hours, size * rate, f"copy {size:.0f} GB from on-prem to {cloud}:{region} at {policy.data.uplink_gbps:g} Gb/s (out of the site: {rate:g} $/GB)"
    facts = provider_facts()[src_cloud]
    if cloud == src_cloud:
        if region == src_region:
            return 0.0, 0.0, ""
        rate, how = facts.between_regions(src_region, region)
        return hours, size * rate, f"copy {size:.0f} GB from {where} to {region} (between {src_cloud} regions, {how})"
    dest = "this site" if cloud is None else f"{cloud}:{region}"
    return (hours, size * facts.egress_usd_per_gb,
            f"copy {size:.0f} GB out of {where} to {dest} (internet egress of {src_cloud}: {facts.egress_usd_per_gb:g} $/GB)")


def store_of(provider: str, region: str, policy: Policy) -> str:
    """The store a cloud cluster in ``region`` keeps its runs' files in: the policy's, else the region's own."""
    return policy.stores.named_for(provider, region) or targets.get(provider).region_store(region, policy.stores).uri


def already_staged(provider: str, region: str, policy: Policy, staged_on: tuple[tuple[str, float], ...],
                   now: Optional[float] = None) -> Optional[Reason]:
    """Why no copy is needed: the store this target uses holds the dataset (and burst's own store's
    lifecycle has not deleted it yet), or None."""
    import time

    store = store_of(provider, region, policy).rstrip("/")
    now = time.time() if now is None else now
    named = policy.stores.named_for(provider, region) is not None
    for where, when in staged_on:
        if where.rstrip("/") != store:
            continue
        if not named and now - when > policy.stores.datasets_days * 86400:
            continue  # the store's lifecycle has deleted it: staged again
        day = time.strftime("%Y-%m-%d", time.gmtime(when))
        return Reason(Code.NOTE, f"dataset already staged on {store} ({day}): no copy, 0 h and $0 of staging")
    return None


#: Fewest steps an epoch a layout may leave. Below it the epoch's fixed costs (a checkpoint every
#: worker writes, a validation, the stop check every 5 steps) outweigh its steps, and a GAN trained
#: on a handful of huge global batches an epoch is not the model the preset was tuned for.
MIN_STEPS_PER_EPOCH = 10


def data_shape(profile: Profile, accelerator: str, devices: int, batch: int, events: Optional[int]) -> Optional[Reason]:
    """Why ``devices`` of ``accelerator`` at ``batch`` per replica cannot train on ``events``
    (default: the profile's dataset), or None when the global batch fits at least
    ``MIN_STEPS_PER_EPOCH`` times. The job would fail at its start with a global batch above the
    events; the plan says so before anything is created."""
    replicas = profile.replicas(accelerator, devices)
    global_batch = replicas * batch
    events = events or profile.events
    steps = events // global_batch
    if steps >= MIN_STEPS_PER_EPOCH:
        return None
    shape = f"{replicas:,} replicas x {batch} events per replica = a global batch of {global_batch:,}"
    if steps < 1:
        said = f"{shape}, above the {events:,} training events: the job could not fill one step"
    else:
        said = f"{shape} leaves {steps} step{'s' if steps > 1 else ''} an epoch of {events:,} events (at least {MIN_STEPS_PER_EPOCH} needed)"
    most = max(1, events // (MIN_STEPS_PER_EPOCH * batch * max(1, replicas // max(1, devices))))
    return Reason(Code.DATA_TOO_SMALL, f"{said}; use at most {most:,} devices at this batch, a smaller --batch-per-replica, or more events")
def _check_shape(est: Estimate, profile: Profile, accelerator: str, devices: int, batch: int, events: Optional[int]) -> None:
    """Mark ``est`` infeasible, with the reason, when its layout cannot be filled from the events."""
    reason = data_shape(profile, accelerator, devices, batch, events)
    if reason is not None:
        est.feasible = False
        est.notes.append(reason)


def cloud(layout: Layout, preemptible: bool, profile: Profile, policy: Policy, epochs: int, events: Optional[int] = None,
          batch: Optional[int] = None, scan: Optional[ScanShape] = None, staged_on: tuple[tuple[str, float], ...] = ()) -> Estimate:
    """``scan``: the layout holds a scan's trials side by side (``epoch_s`` is then one trial's epoch).
    ``staged_on``: stores already holding the run's dataset (a store among them costs no staging)."""
    facts = provider_facts()[layout.provider]
    batch = batch or profile.default_batch()
    precision = profile.precision(layout.accelerator, policy.precision)[0]
    if scan is None:
        epoch_s = profile.epoch_seconds(layout.accelerator, layout.count, layout.nodes, batch, events, precision)
        training_h = epochs * epoch_s / 3600
    else:
        per_trial = scan.devices_per_trial
        trial_nodes = -(-per_trial // max(1, layout.count // layout.nodes))
        epoch_s = profile.epoch_seconds(layout.accelerator, per_trial, trial_nodes, batch, events, precision)
        training_h = scan.wall_epochs(epochs, layout.count // per_trial) * epoch_s / 3600
    est = Estimate(epoch_s=epoch_s, provision_h=facts.provision_minutes / 60, training_h=training_h, batch=batch)
    _check_shape(est, profile, layout.accelerator, scan.devices_per_trial if scan is not None else layout.count, batch, events)
    if scan is not None:
        est.notes.append(scan.note(epochs))
    staged = already_staged(layout.provider, layout.region, policy, staged_on) if staged_on else None
    if staged is not None:
        est.notes.append(staged)
    else:
        est.staging_h, est.egress_usd, note = _staging(targets.get(layout.provider).vendor, layout.region, profile, policy, events)
        if note:
            est.notes.append(note)
    est.egress_usd += profile.checkpoint_gb * facts.egress_usd_per_gb  # the final checkpoint comes home
    if preemptible:
        rate = policy.preemption_rate_per_hour.get(layout.provider, facts.preemption_rate_per_hour) * layout.nodes
        loss_h = (profile.checkpoint_every_epochs * epoch_s / 2) / 3600 + facts.restart_minutes / 60
        f = rate * loss_h
        if f >= 1:
            est.feasible = False
            est.notes.append(Reason(Code.PREEMPTIONS_OUTPACE, f"preemptions ({rate:.2f}/h over {layout.nodes} nodes) would outpace progress"))
            est.preemption_h = float("inf")
        else:
            total = est.training_h / (1 - f)
            if facts.max_preemptible_hours and total > facts.max_preemptible_hours:
                total += int(total // facts.max_preemptible_hours) * loss_h  # forced stops at the lifetime cap
            est.preemption_h = total - est.training_h
            est.notes.append(f"expected preemption loss {est.preemption_h * 60:.0f} min at {rate:.2f} interruptions/h")
    est.hourly_usd = layout.hourly_usd(preemptible)
    billed_h = est.staging_h + est.training_h + est.preemption_h + facts.teardown_minutes / 60
    est.compute_usd = est.hourly_usd * billed_h
    stored_gb = _data_gb(profile, policy, events) + 2 * profile.checkpoint_gb
    est.storage_usd = stored_gb * facts.storage_usd_per_gb_month / HOURS_PER_MONTH * est.hours
    if layout.quality != "catalog":
        est.notes.append(f"price is {layout.quality} (see the catalog header)")
    stale = _stale_price(layout, policy.max_price_age_days)
    if stale:
        est.notes.append(stale)
    _speed_note(est, profile, layout.accelerator)
    _precision_note(est, profile, layout.accelerator, policy.precision)
    est.energy_kwh = profile.watts(layout.accelerator) * layout.count / 1000 * facts.pue * (est.training_h + est.preemption_h)
    grid = carbon.intensity(layout.provider, layout.region)
    if grid is None:
        est.notes.append(f"no grid carbon figure for {layout.provider} {layout.region}: emissions unknown")
    else:
        est.grid_g_per_kwh = grid[0]
    return est


def _stale_price(layout: Layout, max_days: int, today: Optional[datetime.date] = None) -> Optional[str]:
    """A note when the oldest price row the layout uses was read more than ``max_days`` ago."""
    today = today or datetime.date.today()
    read = []
    for pool in layout.pools:
        try:
            read.append((datetime.date.fromisoformat(pool.offer.fetched_at[:10]), pool.offer))
        except ValueError:
            return f"price of {pool.offer.instance_type} in {pool.offer.region} has no readable date ({pool.offer.fetched_at!r}): its age is unknown"
    if not read:
        return None
    when, offer = min(read, key=lambda r: r[0])
    age = (today - when).days
    if age <= max_days:
        return None
    fix = "`burst catalog refresh`" if facts_mod.load(offer.provider).price_list is not None else "a renewed catalog (--catalog)"
    return f"price of {offer.instance_type} in {offer.region} was read {when} ({age} days ago; the policy allows {max_days}): renew it with {fix}"


def _speed_note(est: Estimate, profile: Profile, accelerator: str) -> None:
    basis = profile.basis(accelerator)
    if basis.startswith("measured here"):
        est.notes.append(f"{accelerator} speed {basis}")
    elif not profile.measured_accelerator(accelerator):
        # the bandwidth ratios' spread, unless the profile states its own
        est.notes.append(f"{accelerator} speed is derived, not measured ({basis})" if "±" in basis
                         else f"{accelerator} speed is derived, not measured (±30 %)")


def _precision_note(est: Estimate, profile: Profile, accelerator: str, asked: str) -> None:
    """Which precision the estimate assumes, and the speed-up it counted for it (and from where)."""
    est.precision, speedup, basis = profile.precision(accelerator, asked)
    if est.precision != "float32":
        est.notes.append(f"computes in {est.precision}" + (f" ({asked})" if asked == "auto" else "")
                         + (f": x{speedup:g} on the per-event time ({basis})" if speedup != 1.0 else f": {basis}"))


def onprem_nodes(profile: Profile, policy: Policy, count: int) -> int:
    """Nodes ``count`` devices of the site span: CPU nodes are the devices; GPUs fill nodes of
    gpus_per_node (0: GPUs not scheduled per node, one node)."""
    site = policy.onprem
    if profile.accelerators[profile.family(site.accelerator)].kind == "cpu-node":
        return count
    return -(-count // site.gpus_per_node) if site.gpus_per_node else 1


def onprem(gpus: int, profile: Profile, policy: Policy, epochs: int, events: Optional[int] = None,
           queue_h: Optional[float] = None, queue_note: str = "", batch: Optional[int] = None, scan: Optional[ScanShape] = None) -> Estimate:
    """On the policy's site; ``queue_h``: the scheduler's live wait (None: the policy's figure)."""
    site = policy.onprem
    if site is None:
        raise BurstError("the policy has no onprem section")
    batch = batch or profile.default_batch()
    precision = profile.precision(site.accelerator, policy.precision)[0]
    if scan is None:
        epoch_s = profile.epoch_seconds(site.accelerator, gpus, onprem_nodes(profile, policy, gpus), batch, events, precision)
        training_h = epochs * epoch_s / 3600
    else:
        per_trial = scan.devices_per_trial
        epoch_s = profile.epoch_seconds(site.accelerator, per_trial, onprem_nodes(profile, policy, per_trial), batch, events, precision)
        training_h = scan.wall_epochs(epochs, gpus // per_trial) * epoch_s / 3600
    live = queue_h is not None
    est = Estimate(epoch_s=epoch_s, queue_h=queue_h if live else site.queue_wait_hours, training_h=training_h,
                   queue_source=site.scheduler if live else "policy", batch=batch)
    _check_shape(est, profile, site.accelerator, scan.devices_per_trial if scan is not None else gpus, batch, events)
    if scan is not None:
        est.notes.append(scan.note(epochs))
    est.staging_h, est.egress_usd, note = _staging(None, None, profile, policy, events)
    if note:
        est.notes.append(note)
    watts = profile.watts(site.accelerator)
    est.hourly_usd = site.hourly_usd_per_device(watts) * gpus
    est.price_basis = site.price_basis(watts)
    est.compute_usd = est.hourly_usd * est.training_h
    est.energy_kwh = watts * gpus / 1000 * site.pue * est.training_h
    est.grid_g_per_kwh = site.grid_gco2_per_kwh
    if site.usd_per_gpu_hour is None:
        est.notes.append(f"on-prem price {est.price_basis}")
    _speed_note(est, profile, site.accelerator)
    _precision_note(est, profile, site.accelerator, policy.precision)
    if live:
        est.notes.append(f"on-prem queue wait {est.queue_h:.2f} h, asked from the scheduler now" + (f" ({queue_note})" if queue_note else ""))
    elif site.queue_wait_hours or queue_note:
        est.notes.append(f"on-prem queue wait {site.queue_wait_hours:g} h from the policy" + (f" ({queue_note})" if queue_note else ""))
    return est


def local(events_per_s: float, basis: str, profile: Profile, policy: Policy, epochs: int, events: Optional[int] = None,
          scan: Optional[ScanShape] = None) -> Estimate:
    """This machine; a scan's trials share its cores, so they take their trial-epochs one after the other's time."""
    epoch_s = (events or profile.events) / events_per_s
    est = Estimate(epoch_s=epoch_s, training_h=(scan.trial_epochs(epochs) if scan else epochs) * epoch_s / 3600, batch=profile.default_batch())
    if scan is not None:
        est.notes.append(scan.note(epochs))
    est.staging_h, est.egress_usd, note = _staging(None, None, profile, policy, events)
    if note:
        est.notes.append(note)
    est.hourly_usd = policy.local.hourly_usd()
    est.price_basis = policy.local.price_basis()
    est.compute_usd = est.hourly_usd * est.training_h
    est.energy_kwh = policy.local.watts / 1000 * est.training_h
    est.grid_g_per_kwh = policy.local.grid_gco2_per_kwh
    est.notes.append(f"this machine: {events_per_s:.2f} events/s, {basis}; {est.price_basis}")
    return est
