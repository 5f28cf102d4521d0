"""The Cloud TPU target (``gcp-tpu``): one TPU VM slice whose hosts run Ray themselves.

TPUs cannot be driven by Ray Train, so a job runs the training loop as one Ray task under
TPUStrategy on host 0, which drives the chips of every host on a pod slice (runtime.tpu). The
hosts install burst from a wheel built here at ``up``, and the head is reached through an IAP SSH
tunnel (no external IP).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

from ..home import state
from ..errors import BurstError
from ..home.state import ClusterHandle
from ..client.jobs import JobRuntime
from .base import JobResources
from . import google_cloud
from .google_cloud import GoogleCloudStack
from .pulumi_stack import missing_tools


class TpuVmTarget(GoogleCloudStack):
    provider = "gcp-tpu"
    head_hint = "check the TPU VM's startup log"
    # Every host of a slice trains: on a pod slice TensorFlow's single client on host 0 drives
    # the chips of all hosts (runtime.tpu), so the plan may offer slices of any size.
    tpu_hosts_driven = None

    def program(self, spec) -> Callable[[], object]:
        from infra import tpu

        return lambda: tpu.program(spec)

    def preflight_problems(self, lay, preemptible: bool) -> list[str]:
        from infra.spec import TPU_TENSORFLOW

        from ..catalog import facts

        runtime = facts.load(self.provider).tpu_runtime(TPU_TENSORFLOW, lay.accelerator)
        return google_cloud.tpu_problems(self.preflight_session(), self.project() or "", lay, runtime)

    def missing_tools(self) -> list[str]:
        return missing_tools(("gcloud",), "to tunnel to the TPU VM: install the Google Cloud CLI")

    def wheel(self) -> str:
        """Build the burst wheel the TPU hosts install (from the source tree this burst runs from)."""
        root = Path(__file__).resolve().parents[2]
        if not (root / "pyproject.toml").exists():
            raise BurstError("the TPU target installs burst from its source tree, which was not found next to this installation")
        out = Path(tempfile.mkdtemp(prefix="burst-wheel-", dir=state.home()))
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(root)],
                              capture_output=True, text=True, timeout=600)
        wheels = list(out.glob("burst-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise BurstError(f"building the burst wheel failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}", exit_code=1)
        return str(wheels[0])

    def tunnel_command(self, handle: ClusterHandle, port: int, kubeconfig: Optional[str], remote_port: int = 8265) -> list[str]:
        return ["gcloud", "compute", "tpus", "tpu-vm", "ssh", handle.outputs.get("tpu_name", ""), f"--zone={handle.outputs.get('zone', '')}",
                f"--project={handle.outputs.get('project', '')}", "--worker=0", "--tunnel-through-iap", "--",
                "-N", "-L", f"{port}:127.0.0.1:{remote_port}"]

    def job_resources(self, handle: ClusterHandle, workers: int) -> JobResources:
        from ..catalog.facts import tpu_hosts

        hosts = tpu_hosts(handle.accelerator) if handle.accelerator else 1
        return JobResources(workers=1, tpu=True, tpu_hosts=hosts, tpu_name=handle.outputs.get("tpu_name") or None)

    def job_runtime(self, handle: ClusterHandle) -> JobRuntime:
        return JobRuntime(python="python3")  # the TPU hosts installed burst from its wheel at boot

    # ------------------------------------------------------------------ a lost slice, in the TPU API's words

    def is_gone(self, handle: ClusterHandle) -> bool:
        """The Cloud TPU API says the slice is no longer the one the run started on (preempted,
        terminated, stopped, restarting, being deleted, or no longer there): asked without the head's
        tunnel, so a controller moves the run at once. False when the API cannot be asked."""
        return handle.state == "running" and node_loss(self._node(handle)) is not None

    def stopped_reason(self, handle: ClusterHandle) -> str:
        return node_loss(self._node(handle)) or super().stopped_reason(handle)

    def _node(self, handle: ClusterHandle) -> Optional[dict]:
        """The slice's TPU node as the API has it; {} when the API says there is none; None: no answer."""
        import requests

        name, zone, project = (handle.outputs.get(k) for k in ("tpu_name", "zone", "project"))
        if not (name and zone and project):
            return None
        try:
            response = self.preflight_session().get(f"{google_cloud.TPU_API}/projects/{project}/locations/{zone}/nodes/{name}", timeout=20)
        except (BurstError, requests.RequestException):
            return None
        except Exception:  # noqa: BLE001 - a refused credential refresh (google-auth): no answer, not a verdict
            return None
        if response.status_code == 404:
            return {}
        if response.status_code != 200:
            return None
        try:
            return response.json()
        except ValueError:
            return None


LOST_STATES = {  # a TPU node's state (Cloud TPU v2 Node.State) in which the Ray cluster on it is gone or going
    "PREEMPTED": "preempted", "TERMINATED": "terminated (maintenance, or a preemptible slice's end of life)",
    "STOPPING": "stopping", "STOPPED": "stopped", "DELETING": "being deleted", "RESTARTING": "restarting",
    "REIMAGING": "being reimaged", "HIDING": "being hidden", "HIDDEN": "hidden", "UNKNOWN": "in an unknown state after a failed repair",
}


def node_loss(node: Optional[dict]) -> Optional[str]:
    """Why the slice is lost, in the TPU API's words, or None (ready, creating, repairing, or no answer)."""
    if node is None:
        return None
    if not node:
        return "the TPU node is gone (the Cloud TPU API has no node of its name)"
    state = node.get("state", "")
    if state not in LOST_STATES:
        return None
    health = node.get("healthDescription") or node.get("health")
    return f"TPU node {node.get('name', '?').rsplit('/', 1)[-1]} {LOST_STATES[state]} ({state}" + (f"; {health}" if health else "") + ")"
