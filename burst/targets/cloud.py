"""Cloud targets (``gcp``, ``gcp-tpu``, ``azure``): a Pulumi stack per cluster, reached by tunnel.

``up`` resolves the layout, prints it, checks the Pulumi CLI and the cloud credentials before
anything is created, records the handle first (so ``down`` can always clean up), then runs the
stack. A failed ``up`` destroys what it created. ``connect`` opens the tunnel to the Ray head
(``kubectl port-forward`` on GKE/AKS, an IAP SSH tunnel on a TPU VM) for the length of a command;
the head is never exposed publicly.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Iterator, Optional

from rich.console import Console

from .. import catalog, state
from ..console import console
from ..errors import BurstError
from ..layout import Layout, resolve
from ..state import ClusterHandle

DEFAULT_LEASE_HOURS = 24.0
SECRET_OUTPUTS = ("kubeconfig",)


# --------------------------------------------------------------------------- spec and rendering


def _ray_version() -> str:
    try:
        return version("ray")
    except PackageNotFoundError:
        return "2.52.0"


def gcp_project() -> Optional[str]:
    for var in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "GCLOUD_PROJECT"):
        if os.environ.get(var):
            return os.environ[var]
    return None


def build_spec(name: str, lay: Layout, preemptible: bool, hours: float, lease_id: Optional[str] = None,
               project: Optional[str] = None, wheel_path: Optional[str] = None):
    from infra.spec import PoolSpec, StackSpec, safe_name

    pools = []
    for i, pool in enumerate(lay.pools):
        o = pool.offer
        pools.append(PoolSpec(name="tpu" if o.is_tpu else f"gpu{i}-{safe_name(o.accelerator, 12)}", instance_type=o.instance_type,
                              accelerator=o.accelerator, gpus_per_node=o.accelerator_count, nodes=pool.nodes, zone=o.zone,
                              vcpus=o.vcpus, memory_gib=o.memory_gib))
    return StackSpec(provider=lay.provider, cluster=name, lease_id=lease_id or uuid.uuid4().hex[:12],
                     expires=int(time.time() + hours * 3600), region=lay.region, pools=tuple(pools), preemptible=preemptible,
                     ray_version=_ray_version(), project=project or gcp_project() or "my-gcp-project", wheel_path=wheel_path)


def program_for(spec):
    if spec.provider == "gcp":
        from infra import gke

        return lambda: gke.program(spec)
    if spec.provider == "gcp-tpu":
        from infra import tpu

        return lambda: tpu.program(spec)
    from infra import aks

    return lambda: aks.program(spec)


def _mask(value, key: str = ""):
    if key in ("stringData", "data") or key in SECRET_OUTPUTS:
        return "[secret]"
    if isinstance(value, dict):
        return {k: _mask(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return value


def dry_run(spec, lay: Layout) -> dict:
    """The resources the stack would create, rendered offline under Pulumi's mocks."""
    from infra import render

    resources = render.render(program_for(spec), stack=spec.stack_name)
    return {
        "provider": spec.provider, "stack": spec.stack_name, "region": spec.region, "preemptible": spec.preemptible,
        "lease_id": spec.lease_id, "expires": spec.expires, "labels": spec.labels(), "layout": lay.to_dict(),
        "hourly_usd": round(lay.hourly_usd(spec.preemptible), 4),
        "resources": [{"type": r["type"], "name": r["name"], "inputs": _mask(r["inputs"]), "summary": render.summary(r)} for r in resources],
    }


# --------------------------------------------------------------------------- checks before Pulumi


def missing_prerequisites(provider: str) -> list[str]:
    """What must be installed or configured before a stack of ``provider`` can be created, and how."""
    from infra.driver import CLI_MISSING, find_cli

    problems = []
    if find_cli() is None:
        problems.append(CLI_MISSING)
    if provider in ("gcp", "gcp-tpu"):
        adc = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        default = Path(os.environ.get("CLOUDSDK_CONFIG", Path.home() / ".config" / "gcloud")) / "application_default_credentials.json"
        if adc and not Path(adc).is_file():
            problems.append(f"GOOGLE_APPLICATION_CREDENTIALS points to {adc}, which does not exist")
        elif not adc and not default.is_file():
            problems.append("no Google Cloud application-default credentials: run `gcloud auth application-default login` "
                            "or set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file")
        if gcp_project() is None:
            problems.append("no Google Cloud project: set GOOGLE_CLOUD_PROJECT to your project id")
        if provider == "gcp":
            problems += _tools(("kubectl", "gke-gcloud-auth-plugin"), "to reach the Ray head on GKE: `gcloud components install kubectl gke-gcloud-auth-plugin`")
        else:
            problems += _tools(("gcloud",), "to tunnel to the TPU VM: install the Google Cloud CLI")
    elif provider == "azure":
        sp = [v for v in ("ARM_CLIENT_ID", "ARM_CLIENT_SECRET", "ARM_TENANT_ID", "ARM_SUBSCRIPTION_ID") if os.environ.get(v)]
        profile = Path(os.environ.get("AZURE_CONFIG_DIR", Path.home() / ".azure")) / "azureProfile.json"
        if 0 < len(sp) < 4:
            problems.append("incomplete Azure service principal: set all of ARM_CLIENT_ID, ARM_CLIENT_SECRET, ARM_TENANT_ID, ARM_SUBSCRIPTION_ID")
        elif not sp and not _azure_logged_in(profile):
            problems.append("not logged in to Azure: run `az login`, or set ARM_CLIENT_ID, ARM_CLIENT_SECRET, ARM_TENANT_ID "
                            "and ARM_SUBSCRIPTION_ID for a service principal")
        problems += _tools(("kubectl",), "to reach the Ray head on AKS: `az aks install-cli`")
    return problems


def _tools(names, why: str) -> list[str]:
    missing = [n for n in names if shutil.which(n) is None]
    return [f"{', '.join(missing)} not installed ({why})"] if missing else []


def _azure_logged_in(profile: Path) -> bool:
    try:
        data = json.loads(profile.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return False
    return bool(data.get("subscriptions"))


def check_prerequisites(provider: str, action: str) -> None:
    problems = missing_prerequisites(provider)
    if problems:
        raise BurstError(f"cannot {action} on {provider}: " + "; ".join(problems))


# --------------------------------------------------------------------------- up / down


def _wheel() -> str:
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


class PulumiProgress:
    """Pulumi's engine events as a rich progress bar: one step per resource, the current one named.

    ``total`` (when known) is the number of resources the program registers.
    """

    def __init__(self, verb: str, total: Optional[int] = None, out: Optional[Console] = None):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.out = out or console
        self.done = 0
        self.failed: list[str] = []
        self._bar = Progress(TextColumn(f"[bold]{verb}[/bold]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("{task.description}"), console=self.out, transient=False)
        self._task = self._bar.add_task("", total=total)

    def __enter__(self):
        self._bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self._bar.__exit__(*exc)

    @staticmethod
    def _name(meta) -> str:
        return f"{meta.type.rsplit(':', 1)[-1]} {meta.urn.rsplit('::', 1)[-1]}"

    def on_event(self, event) -> None:
        pre = getattr(event, "resource_pre_event", None)
        outputs = getattr(event, "res_outputs_event", None)
        failed = getattr(event, "res_op_failed_event", None)
        if pre is not None and not pre.planning and not pre.metadata.type.startswith("pulumi:"):
            self._bar.update(self._task, description=f"{_op(pre.metadata)} {self._name(pre.metadata)}")
        elif outputs is not None and not outputs.metadata.type.startswith("pulumi:"):
            self.done += 1
            self._bar.update(self._task, advance=1, description=f"done: {self._name(outputs.metadata)}")
        elif failed is not None:
            self.failed.append(self._name(failed.metadata))
            self.out.print(f"[red]failed[/red] {self._name(failed.metadata)}")

    def on_output(self, line: str) -> None:
        if "error" in line.lower():
            self.out.print(line, style="dim", markup=False, highlight=False)


def _op(meta) -> str:
    return getattr(meta.op, "value", str(meta.op))


def choose_layout(provider: str, gpus: Optional[int], accelerator: Optional[str], region: Optional[str]) -> Layout:
    offers = catalog.load()
    if accelerator is None:
        raise BurstError(f"say which accelerator with --accelerator (see `burst catalog --provider {provider}`), "
                         "or leave out --provider and let `burst plan` choose")
    return resolve(offers, provider, accelerator, gpus, region=region)


def up(name: str, provider: str, *, gpus: Optional[int], accelerator: Optional[str], preemptible: bool,
       region: Optional[str], policy=None, hours: Optional[float] = None, dry_run: bool = False, command=None):
    """Create the cluster's stack (or render it with ``dry_run``); returns (handle, created) or the rendering."""
    lay = choose_layout(provider, gpus, accelerator, region)
    if preemptible and not lay.has_spot:
        raise BurstError(f"{lay.describe()} in {lay.region} has no spot/preemptible offer; use --on-demand")
    if policy is not None:  # the policy's guard rails hold for explicit choices too (data residency, caps)
        if provider not in policy.providers:
            raise BurstError(f"provider {provider} is not allowed by the policy (providers: {', '.join(policy.providers)})")
        if not policy.region_allowed(lay.region):
            raise BurstError(f"region {lay.region} is not allowed by the policy (regions: {', '.join(policy.regions)})")
        if not policy.accelerator_allowed(lay.accelerator):
            raise BurstError(f"accelerator {lay.accelerator} is not allowed by the policy (accelerators: {', '.join(policy.accelerators or [])})")
        if lay.count > policy.max_gpus:
            raise BurstError(f"{lay.count} {lay.accelerator} is over the policy's max_gpus {policy.max_gpus}")
        if preemptible and policy.preemptible == "never":
            raise BurstError("the policy says preemptible: never; use --on-demand or another policy")
        if not preemptible and policy.preemptible == "only":
            raise BurstError("the policy says preemptible: only; use --preemptible or another policy")
    hours = hours or DEFAULT_LEASE_HOURS
    if not dry_run:
        check_prerequisites(provider, "create a cluster")
    console.print(f"layout: {lay.describe()} in {lay.region}, {lay.count} x {lay.accelerator}"
                  f"{' (preemptible)' if preemptible else ''}, ${lay.hourly_usd(preemptible):,.2f}/h, lease {hours:g} h")
    if dry_run:
        return dry_run_result(name, lay, preemptible, hours)
    with state.locked():
        existing = state.load(ClusterHandle, name)
        if existing is not None:
            if existing.state == "running":
                return existing, False
            raise BurstError(f"cluster {name!r} is recorded in state {existing.state}; run `burst down {name}` first")
    spec = build_spec(name, lay, preemptible, hours, wheel_path=_wheel() if provider == "gcp-tpu" else None)
    handle = ClusterHandle(name=name, provider=provider, cluster_id=spec.lease_id, state="starting", expires=float(spec.expires),
                           storage_uri="", layout=lay.to_dict(), hourly_usd=lay.hourly_usd(preemptible),
                           budget_usd=policy.budget_usd if policy else None, region=lay.region, accelerator=lay.accelerator,
                           preemptible=preemptible, lease_id=spec.lease_id, stack=spec.stack_name,
                           outputs={"project": spec.project, "zone": spec.pools[0].zone})
    with state.locked():
        state.save(handle)  # before Pulumi runs: `burst down` can always find and destroy the stack
    from infra.driver import StackDriver

    # No end for the bar: counting resources would mean rendering under the mock runtime, which
    # must not share this process with a real update.
    progress = PulumiProgress("creating", None)
    driver = StackDriver(spec, program_for(spec), command=command, on_output=progress.on_output, on_event=progress.on_event)
    try:
        with progress:
            outputs = driver.up()
    except KeyboardInterrupt:
        console.print(f"interrupted: Pulumi cancelled and the stack refreshed; run `burst down {name}` to remove what was created")
        raise
    except Exception as exc:  # a failed up must not leave resources behind
        reason = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else exc.__class__.__name__
        console.print(f"[red]up failed[/red] ({reason}); destroying what was created")
        driver.destroy()
        with state.locked():
            state.delete(ClusterHandle, name)
        raise BurstError(f"creating cluster {name!r} on {provider} failed: {reason}; everything it created was destroyed", exit_code=1) from None
    handle.state = "running"
    handle.storage_uri = outputs.get("storage_uri", "")
    handle.outputs.update({k: v for k, v in outputs.items() if k not in SECRET_OUTPUTS})
    with state.locked():
        state.save(handle)
    return handle, True


def dry_run_result(name: str, lay: Layout, preemptible: bool, hours: float) -> dict:
    spec = build_spec(name, lay, preemptible, hours, lease_id="dryrun000000")
    return dry_run(spec, lay)


def down(handle: ClusterHandle, command=None) -> None:
    """Destroy the stack, verify it holds nothing, then forget the handle (kept when anything is left)."""
    if not handle.stack:
        with state.locked():
            state.delete(ClusterHandle, handle.name)
        return
    check_prerequisites(handle.provider, "destroy a cluster")
    from infra.driver import StackDriver

    with state.locked():
        handle.state = "stopping"
        state.save(handle)
    progress = PulumiProgress("destroying")
    with progress:
        StackDriver(handle.stack, command=command, on_output=progress.on_output, on_event=progress.on_event).destroy()
    with state.locked():
        state.delete(ClusterHandle, handle.name)


def is_alive(handle: ClusterHandle, timeout: float = 2.0) -> bool:
    """A cloud cluster is alive while its stack is up; the Ray head is checked through the tunnel."""
    return handle.state == "running"


# --------------------------------------------------------------------------- reaching the Ray head


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tunnel_command(handle: ClusterHandle, port: int, kubeconfig: Optional[str]) -> list[str]:
    if handle.provider == "gcp-tpu":
        return ["gcloud", "compute", "tpus", "tpu-vm", "ssh", handle.outputs.get("tpu_name", ""), f"--zone={handle.outputs.get('zone', '')}",
                f"--project={handle.outputs.get('project', '')}", "--worker=0", "--tunnel-through-iap", "--",
                "-N", "-L", f"{port}:127.0.0.1:8265"]
    return ["kubectl", f"--kubeconfig={kubeconfig}", "port-forward", "-n", handle.outputs.get("ray_namespace", "burst"),
            f"service/{handle.outputs.get('ray_head_service', 'burst-head-svc')}", f"{port}:8265", "--address=127.0.0.1"]


@contextmanager
def connect(handle: ClusterHandle, command=None) -> Iterator[ClusterHandle]:
    """A copy of the handle whose dashboard URL reaches the Ray head through a tunnel burst owns."""
    check_prerequisites(handle.provider, "reach the cluster")
    from infra.driver import StackDriver

    kubeconfig_file = None
    if handle.provider != "gcp-tpu":
        config = StackDriver(handle.stack, command=command).outputs().get("kubeconfig")
        fd, kubeconfig_file = tempfile.mkstemp(prefix="kubeconfig-", dir=state.home())
        with os.fdopen(fd, "w") as f:  # mkstemp: readable by the user only
            f.write(config or "")
    port = _free_port()
    proc = subprocess.Popen(tunnel_command(handle, port, kubeconfig_file), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.stderr else []
                raise BurstError(f"the tunnel to cluster {handle.name!r} closed: {(err or ['no output'])[-1]}", exit_code=1)
            try:
                with urllib.request.urlopen(url + "/api/version", timeout=2):
                    break
            except urllib.error.HTTPError:
                break  # the head answered (e.g. 401 without a token): the tunnel is up
            except (urllib.error.URLError, OSError):
                if time.time() > deadline:
                    raise BurstError(f"the Ray head of {handle.name!r} did not answer through the tunnel within 60 s; "
                                     "see `kubectl get pods -n burst`", exit_code=1) from None
                time.sleep(1)
        yield handle.model_copy(update={"dashboard_url": url})
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if kubeconfig_file:
            Path(kubeconfig_file).unlink(missing_ok=True)
