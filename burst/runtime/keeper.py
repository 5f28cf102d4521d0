"""This machine's keeper: the cluster keeper (``infra.keeper``, the one that runs inside KubeRay,
TPU and Slurm clusters) for a local Ray cluster, started beside its head as one of its own
processes. At the lease's end it first posts a ``stop`` notice on the cluster's storage and waits
for the workers' checkpoint (as on a walltime or a spot notice), then stops the cluster's own Ray
processes (sparing itself until they are gone); after its idle time with no job, likewise. A
`burst down` stops it with the rest of the cluster.

Run as ``python -m burst.runtime.keeper --end local --cluster-id ID --temp-dir DIR [--expires T]
[--idle-minutes M] [--dashboard URL --token-file F] [--notices ROOT]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from infra import keeper

NOTICE_WAIT_S = float(os.environ.get("BURST_KEEPER_NOTICE_S", "60"))  # the workers' time to checkpoint at the lease's end


def end_local(cluster_id: str, temp_dir: Optional[str]) -> None:
    """Stop this machine's Ray processes of the cluster (the keeper is one of them: spared, it ends
    after), then the scratch its killed runs left."""
    from . import scratch
    from .ray_head import stop_processes

    left = stop_processes(cluster_id, temp_dir, spare=os.getpid())
    if left:
        raise RuntimeError(f"processes {left} did not stop")
    scratch.sweep()


def stop_notice(root: str) -> None:
    """A ``stop`` notice on the cluster's storage: the workers checkpoint where they are and stop."""
    from . import notice

    try:
        posted = notice.write(root, "stop", "the cluster's lease ended (its keeper)")
        checkpointed = notice.wait_taken(root, posted, NOTICE_WAIT_S)
        keeper.say("the workers checkpointed on the lease's notice" if checkpointed else f"no checkpoint within {NOTICE_WAIT_S:g} s of the notice")
    except Exception as exc:  # noqa: BLE001 - the lease ends regardless
        keeper.say(f"the stop notice could not be posted ({exc})")


def head_alive(cluster_id: str, temp_dir: Optional[str]) -> bool:
    """True while any other process of the local cluster runs (a `burst down` leaves the keeper nothing to keep)."""
    from .ray_head import cluster_processes

    return any(p.pid != os.getpid() for p in cluster_processes(cluster_id, temp_dir))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m burst.runtime.keeper", description="end this local cluster at its lease's end or when idle")
    parser.add_argument("--end", choices=["local"], default="local")
    parser.add_argument("--cluster-id", required=True)
    parser.add_argument("--temp-dir")
    parser.add_argument("--expires", type=float)
    parser.add_argument("--idle-minutes", type=float)
    parser.add_argument("--dashboard")
    parser.add_argument("--token-file")
    parser.add_argument("--notices")
    args = parser.parse_args(argv)
    keeper.run(lambda: end_local(args.cluster_id, args.temp_dir), args, keeper.token_of(args),
               on_lease_end=(lambda: stop_notice(args.notices)) if args.notices else (lambda: None),
               alive=lambda: head_alive(args.cluster_id, args.temp_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
