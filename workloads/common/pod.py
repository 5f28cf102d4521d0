"""A TPU pod slice's input, as both sides read it: the shards' names and which host reads which.

Every host of a pod slice runs its own input pipeline (built by the one client on host 0, run in
the host's own TPU runtime) and reads its own shards from its own disk: host ``h`` (its TPU worker
number, its pipeline's ``input_pipeline_id``) the shards ``h, h + hosts, ...`` of the sorted names.
"""

from __future__ import annotations

POD_SHARD = "shard-{index:05d}-of-{count:05d}.tfrecords"


def shard_names(hosts: int, per_host: int = 1) -> list[str]:
    """The names of a pod input of ``hosts x per_host`` shards, in order."""
    count = hosts * per_host
    return [POD_SHARD.format(index=i, count=count) for i in range(count)]


def host_shards(names: list[str], hosts: int, host: int) -> list[str]:
    """The shards host ``host`` reads."""
    if not 0 <= host < hosts:
        raise ValueError(f"host {host} is not one of the slice's {hosts}")
    return sorted(names)[host::hosts]
