"""The on-prem target: an existing Ray cluster the group already runs, named in the policy.

burst does not start or stop it; ``up`` checks that its dashboard answers and records a handle,
``down`` forgets the handle. Its storage URI must be a path (or bucket) that both the cluster and
this machine can read, so results can be collected.
"""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from typing import Optional

from typing import TYPE_CHECKING

from ..home import state
from ..errors import BurstError
from ..home.state import ClusterHandle
from ..client.jobs import JobRuntime
from .base import QUIET, Lease, Reporter, Target
from ..runtime.ray_head import auth_headers, is_alive  # the same Ray dashboard check as a local cluster

if TYPE_CHECKING:
    from ..values.placement import Placement


def cluster_resources(handle: ClusterHandle, timeout: float = 10.0) -> dict:
    """Nodes, CPUs and GPUs of the live nodes, from the dashboard's node summary."""
    import json

    req = urllib.request.Request(handle.dashboard_url + "/nodes?view=summary", headers=auth_headers(handle))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            nodes = json.loads(resp.read())["data"]["summary"]
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        raise BurstError(f"cannot read the resources of the Ray cluster at {handle.dashboard_url} ({exc})", exit_code=1) from None
    alive = [n["raylet"] for n in nodes if n.get("raylet", {}).get("state") == "ALIVE"]
    total = lambda key: int(sum(n.get("resourcesTotal", {}).get(key, 0) for n in alive))  # noqa: E731
    return {"nodes": len(alive), "cpus": total("CPU"), "gpus": total("GPU")}


def up(name: str, address: Optional[str], gpus: int, accelerator: str, hourly_usd: float,
       storage_uri: Optional[str] = None, token_path: Optional[str] = None,
       python: Optional[str] = None) -> tuple[ClusterHandle, bool]:
    if not address:
        raise BurstError("the policy's onprem section has no ray_address; add the dashboard URL of your Ray cluster, e.g. http://ray-head:8265")
    if not address.startswith(("http://", "https://")):
        raise BurstError(f"onprem.ray_address {address!r} must be the dashboard URL (http://host:8265), not a GCS or ray:// address")
    with state.locked():
        existing = state.load(ClusterHandle, name)
        if existing is not None:
            if is_alive(existing):
                return existing, False
            raise BurstError(f"cluster {name!r} is recorded but not answering; run `burst down {name}` first")
        handle = ClusterHandle(name=name, provider="ray", cluster_id=uuid.uuid4().hex[:12], state="running",
                               dashboard_url=address.rstrip("/"), token_path=token_path,
                               storage_uri=storage_uri or str(state.home() / "clusters" / name / "storage"),
                               layout={"nodes": None, "gpus": gpus, "accelerator": accelerator, "cpus": 1},
                               accelerator=accelerator, hourly_usd=hourly_usd,
                               outputs={"python": python} if python else {})
        if not is_alive(handle):
            raise BurstError(f"the on-prem Ray cluster at {address} does not answer; check the address and that its dashboard is reachable from here", exit_code=1)
        found = cluster_resources(handle)
        # The run uses what the policy allows of what the cluster has (a CPU-only site trains on CPUs).
        handle.layout.update(nodes=found["nodes"], cpus=found["cpus"], gpus=min(gpus, found["gpus"]), cluster_gpus=found["gpus"])
        state.save(handle)
    return handle, True


def down(handle: ClusterHandle) -> None:
    """The on-prem cluster keeps running; burst only forgets its handle."""
    with state.locked():
        state.delete(ClusterHandle, handle.name)


class OnPremRayTarget(Target):
    """The group's own Ray cluster: attached to by address, never started or stopped by burst."""

    provider = "ray"
    kind = "onprem"
    default_cluster_name = "onprem"
    takes_bundle = True

    def up(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> tuple[ClusterHandle, bool]:
        from ..pack import bundle_python

        site = placement.site
        return up(name, site.ray_address, placement.count, site.accelerator, placement.hourly_usd,
                  storage_uri=site.storage, token_path=site.token_file,
                  python=bundle_python(placement.bundle) if placement.bundle else None)

    def job_runtime(self, handle: ClusterHandle) -> JobRuntime:
        """The cluster's nodes run burst from the site's bundle install when one was named (no runtime env)."""
        return JobRuntime(python=handle.outputs["python"]) if handle.outputs.get("python") else super().job_runtime(handle)

    def down(self, handle: ClusterHandle, report: Reporter = QUIET) -> None:
        down(handle)

    def serves(self, site) -> bool:
        return site.scheduler == "ray"

    def is_alive(self, handle: ClusterHandle, timeout: float = 2.0) -> bool:
        return is_alive(handle, timeout=timeout)
