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
