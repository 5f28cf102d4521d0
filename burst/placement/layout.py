"""Turn "N accelerators of type A" into node pools: the fewest nodes, each as full as it can be.

128 V100 become 16 nodes x 8 (the measured optimum of the 3DGAN cloud study: one worker per node
owning all its GPUs). A remainder that does not fill a node goes into one extra pool. A TPU
request names a slice; the slice is the whole layout.

Zones come from the provider facts: each pool sits in a zone that offers its accelerator, and a
request above the provider's per-zone limit is spread over several zones of the region (one
pool per zone), so that one zone's stock-out or quota cannot sink the whole cluster. An
on-demand layout never uses a shape that is sold as spot only.
"""

from __future__ import annotations

from typing import Iterable, Optional

from ..catalog import facts
from ..values.placement import Layout, Offer, Pool, spread, zones_of
from .names import canonical
from ..errors import BurstError


class MixedInterconnect(BurstError):
    """A layout that would put InfiniBand and Ethernet-only nodes in one synchronous job."""


def normalise_accelerator(offers: list[Offer], name: str) -> str:
    """``v3-8`` and ``tpu-v3-8`` name the same TPU slice; GPU names are case-insensitive."""
    if offers and all(o.is_tpu for o in offers) and not name.startswith("tpu-"):
        return f"tpu-{name}"
    return name


def resolve(offers: Iterable[Offer], provider: str, accelerator: str, gpus: Optional[int] = None,
            region: Optional[str] = None, gpus_per_node: Optional[int] = None, preemptible: Optional[bool] = None,
            max_gpus_per_zone: Optional[int] = None) -> Layout:
    """The layout for ``gpus`` accelerators (TPU: one slice) of one provider and region.

    ``preemptible=False`` leaves out shapes not sold on demand; ``max_gpus_per_zone`` (default:
    the provider facts') spreads a larger request over zones.
    """
    mine = [o for o in offers if o.provider == provider]
    if not mine:
        raise BurstError(f"the catalog has no offers for provider {provider!r}")
    accelerator = normalise_accelerator(mine, canonical(accelerator))
    names = {o.accelerator.lower(): o.accelerator for o in mine}
    if accelerator.lower() not in names:
        if mine[0].is_tpu and gpus is not None:
            family = accelerator
            sizes = sorted({int(o.accelerator.rsplit("-", 1)[1]) for o in mine if o.accelerator.rsplit("-", 1)[0] == family})
            if sizes:
                if gpus not in sizes:
                    raise BurstError(f"{family.removeprefix('tpu-')} slices come in sizes {', '.join(map(str, sizes))}, not {gpus}; pick one with --accelerator {family.removeprefix('tpu-')}-{sizes[0]}")
                accelerator = f"{family}-{gpus}"
        if accelerator.lower() not in names:
            raise BurstError(f"provider {provider} has no accelerator {accelerator!r}; it has: {', '.join(sorted(names.values()))}")
    accelerator = names[accelerator.lower()]
    mine = [o for o in mine if o.accelerator == accelerator]
    regions = sorted({o.region for o in mine})
    if region is None:
        region = regions[0]
    if region not in regions:
        raise BurstError(f"{accelerator} on {provider} is offered in {', '.join(regions)}, not in {region}")
    shapes = sorted((o for o in mine if o.region == region), key=lambda o: o.accelerator_count)
    if preemptible is False:
        spot_only = [o.instance_type for o in shapes if not o.on_demand]
        shapes = [o for o in shapes if o.on_demand]
        if not shapes:
            raise BurstError(f"{accelerator} in {region} is sold as spot only ({', '.join(spot_only)}); use --preemptible")
    else:
        spot_only = []

    if shapes[0].is_tpu:
        slice_size = shapes[0].accelerator_count
        if gpus is not None and gpus not in (1, slice_size, int(accelerator.rsplit("-", 1)[1])):
            raise BurstError(f"{accelerator} is one slice of {slice_size} chips; a TPU request names a slice size, not {gpus}")
        return Layout(provider, region, accelerator, (Pool(shapes[0], 1, zones_of(shapes[0])[0]),))

    if gpus is None:
        raise BurstError("say how many accelerators with --gpus N")
    if gpus < 1:
        raise BurstError(f"--gpus must be at least 1, got {gpus}")
    by_count = {o.accelerator_count: o for o in shapes}
    largest = max(by_count)
    if gpus_per_node is not None:
        if gpus_per_node not in by_count:
            raise BurstError(f"{accelerator} nodes on {provider} hold {', '.join(map(str, sorted(by_count)))} GPUs, not {gpus_per_node}"
                             + (f" on demand ({', '.join(spot_only)} are spot only)" if spot_only else ""))
        largest = gpus_per_node
    full, rest = divmod(gpus, largest)
    pools = [(by_count[largest], full)] if full else []
    if rest:
        if rest in by_count:
            pools.append((by_count[rest], 1))
        else:  # one extra pool of the smallest node that divides the remainder
            small = next(c for c in sorted(by_count) if rest % c == 0) if any(rest % c == 0 for c in by_count) else None
            if small is None:
                raise BurstError(f"{gpus} {accelerator} cannot be laid out on {provider} nodes of {', '.join(map(str, sorted(by_count)))} GPUs"
                                 + (f" on demand ({', '.join(spot_only)} are spot only; ask for a multiple of {largest} or use --preemptible)"
                                    if spot_only else ""))
            pools.append((by_count[small], rest // small))
    known = facts.load(provider)
    fast = sorted({o.instance_type for o, _ in pools if known.has_infiniband(o.instance_type)})
    slow = sorted({o.instance_type for o, _ in pools} - set(fast))
    if fast and slow:  # every all-reduce would wait on the Ethernet-only nodes
        raise MixedInterconnect(f"{gpus} {accelerator} on {provider} would mix InfiniBand nodes ({', '.join(fast)}) with Ethernet-only "
                                f"nodes ({', '.join(slow)}) in one synchronous job; ask for a multiple of {largest} GPUs, or one node "
                                f"shape with --gpus-per-node {', '.join(str(c) for c in sorted(by_count) if gpus % c == 0)}")
    if max_gpus_per_zone is None:
        max_gpus_per_zone = known.max_gpus_per_zone
    return Layout(provider, region, accelerator, spread(pools, gpus, max_gpus_per_zone), max_gpus_per_zone)
