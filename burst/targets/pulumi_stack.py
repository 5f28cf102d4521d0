"""What every cloud target shares: a Pulumi stack per cluster, created, rendered and destroyed.

``up`` checks the Pulumi CLI and the cloud credentials before anything is created, records the
handle first (so ``down`` can always clean up), then runs the stack; a failed ``up`` destroys
what it created. ``reach`` opens a tunnel to the Ray head for the length of a command (the head is
never exposed publicly); each subclass says which tunnel.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from abc import abstractmethod
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, NamedTuple, Optional

from ..home import state
from ..errors import BurstError
from ..home.state import ClusterHandle
from ..runtime import ray_head
from .base import QUIET, Lease, Reporter, Target
from .tunnel import tunnel

if TYPE_CHECKING:
    from ..values.placement import Layout, Placement

DEFAULT_LEASE_HOURS = 24.0
SECRET_OUTPUTS = ("kubeconfig",)
# How the providers word "this zone has no capacity for that machine right now" (GCE, GKE, Cloud
# TPU, Azure): such a failure is retried in the region's other zones that offer the accelerator.
STOCKOUT_MARKERS = ("ZONE_RESOURCE_POOL_EXHAUSTED", "GCE_STOCKOUT", "does not have enough resources available",
                    "no more capacity in the zone", "SkuNotAvailable", "AllocationFailed", "OverconstrainedAllocationRequest")


class StoreAt(NamedTuple):
    """The store a cluster keeps its runs' files in: its URI, what the cluster is granted on it, and
    after how many days its lifecycle deletes a staged dataset (None: a store the policy names, whose
    rules are not burst's)."""

    uri: str
    scope: Optional[str]
    datasets_days: Optional[int] = None


class StockOut(Exception):
    """A create that failed for want of capacity in ``zones`` (everything it created is destroyed)."""

    def __init__(self, zones: list[str], reason: str):
        super().__init__(reason)
        self.zones, self.reason = zones, reason


def ray_version() -> str:
    try:
        return version("ray")
    except PackageNotFoundError:
        return "2.52.0"


def pulumi_processes(stack: str) -> list[int]:
    """PIDs of Pulumi CLI processes working on ``stack`` (``pulumi ... --stack NAME``), of any session."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any(os.path.basename(part) == "pulumi" for part in cmd[:2]) and "--stack" in cmd and stack in cmd:
            found.append(proc.info["pid"])
    return found


def missing_tools(names, why: str) -> list[str]:
    missing = [n for n in names if shutil.which(n) is None]
    return [f"{', '.join(missing)} not installed ({why})"] if missing else []


@contextmanager
def stack_errors() -> Iterator[None]:
    """A Pulumi driver's own error (no CLI, resources left) in burst's terms."""
    from infra.driver import StackError

    try:
        yield
    except StackError as exc:
        raise BurstError(str(exc), exit_code=1) from None


def _mask(value, key: str = ""):
    if key in ("stringData", "data", "secretData") or key in SECRET_OUTPUTS:
        return "[secret]"
    if isinstance(value, dict):
        return {k: _mask(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return value


class PulumiTarget(Target):
    """A cloud provider whose clusters are Pulumi stacks (subclasses: the stack program, the
    credentials it needs, the tunnel to the head)."""

    kind = "cloud"
    provisions = True
    keeper_ends_lease = True
    supports_spot = True
    renders_offline = True
    reads_local_paths = False  # cloud nodes cannot read this machine's disk: data goes to the bucket
    command: ClassVar[Optional[object]] = None  # a Pulumi command stand-in (tests); None: the real CLI
    store_service: ClassVar[str] = "gcs"  # where its region's store is made (infra.store: gcs or blob)

    @property
    def default_cluster_name(self) -> str:  # type: ignore[override]
        return self.provider

    # ------------------------------------------------------------------ what subclasses say

    @abstractmethod
    def program(self, spec) -> Callable[[], object]:
        """The inline Pulumi program that builds the stack of ``spec``."""

    @abstractmethod
    def stack_config(self, spec_fields: dict) -> dict[str, str]:
        """The stack's Pulumi configuration (project, region, location)."""

    @abstractmethod
    def missing_credentials(self) -> list[str]:
        """Credentials the provider's APIs need (the stacks and the pre-flight), each with how to fix it."""

    def missing_access(self) -> list[str]:
        """Credentials and tools the provider needs (besides the Pulumi CLI), each with how to fix it."""
        return self.missing_credentials() + self.missing_tools()

    def missing_tools(self) -> list[str]:
        """The command-line tools this target needs besides the credentials, each with how to install it."""
        return []

    @abstractmethod
    def tunnel_command(self, handle: ClusterHandle, port: int, kubeconfig: Optional[str], remote_port: int = 8265) -> list[str]:
        """A command that forwards 127.0.0.1:``port`` to the head's ``remote_port`` (its dashboard) until it is stopped."""

    def forward_command(self, handle: ClusterHandle, local_port: int, remote_port: int, workdir: Path) -> Optional[list[str]]:
        self.check_prerequisites("reach the cluster")
        config, kubeconfig_file = self.kubeconfig(handle), None
        if config is not None:
            kubeconfig_file = workdir / "kubeconfig"
            kubeconfig_file.unlink(missing_ok=True)
            fd = os.open(kubeconfig_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(config)
        return self.tunnel_command(handle, local_port, str(kubeconfig_file) if kubeconfig_file else None, remote_port)

    def project(self) -> Optional[str]:
        return None

    @abstractmethod
    def preflight_problems(self, lay: "Layout", preemptible: bool) -> list[str]:
        """Shortfalls the provider's APIs report for this layout (quota, zone, image), one line each."""

    def preflight(self, placement: "Placement", report: Reporter = QUIET) -> None:
        """Ask the provider before anything is created; one error listing every shortfall."""
        from . import preflight

        preflight.run(lambda: self.preflight_problems(placement.layout, placement.preemptible), self.provider, report.say)

    def check(self, placement: "Placement", report: Reporter = QUIET) -> None:
        """``up --check``: the pre-flight alone; needs the credentials, not Pulumi or kubectl."""
        problems = self.missing_credentials()
        if problems:
            raise BurstError(f"cannot check a cluster on {self.provider}: " + "; ".join(problems))
        self.preflight(placement, report)

    # ------------------------------------------------------------------ the region's store

    def store_project(self) -> str:
        """Whose store it is: the GCP project (Azure: the subscription); store names derive from it."""
        return self.project() or "my-gcp-project"

    def store_program(self, spec) -> Callable[[], object]:
        """The inline program of a region's store stack (``infra.store``)."""
        from infra import store

        return (lambda: store.gcs_program(spec)) if spec.service == store.GCS else (lambda: store.azure_program(spec))

    def named_store_scope(self, uri: str) -> Optional[str]:
        """What a cluster's identity is granted access on for a store the policy names (Azure: the account's id)."""
        return None

    def region_store(self, region: str, stores=None, project: Optional[str] = None):
        """The spec of the store burst makes for ``region`` (``stores``: the policy's lifecycle)."""
        from infra.store import StoreSpec

        keep = {} if stores is None else dict(checkpoints_days=stores.checkpoints_days, datasets_days=stores.datasets_days,
                                              notices_days=stores.notices_days)
        return StoreSpec(service=self.store_service, region=region, project=project or self.store_project(), **keep)

    def ensure_store(self, placement: "Placement", report: Reporter = QUIET) -> StoreAt:
        """The store the cluster's runs keep their files in: the one the policy or
        ``--storage`` names, else the region's own, whose stack is created or updated here (once per
        project and region; concurrent ``up``s take turns) and never destroyed by ``burst down``."""
        if placement.storage:
            report.say(f"store: {placement.storage} (named; the cluster is granted access to it)")
            return StoreAt(placement.storage, self.named_store_scope(placement.storage))
        return self.make_store(self.region_store(placement.region, placement.stores), report)

    def make_store(self, spec, report: Reporter = QUIET, set_rules: frozenset = frozenset()) -> StoreAt:
        """Bring the region's store stack up; where it is and the days it keeps datasets. A store owns its lifecycle: once made, its
        rules are the ones its stack holds, whatever a later policy says (said when they differ), and
        change only for the rules named in ``set_rules`` (``checkpoints_days``, ...: ``burst store lifecycle``)."""
        from filelock import FileLock

        report.say(f"store: {spec.uri} (stack {spec.stack_name}: made once for {spec.region}, kept after `burst down`)")
        lock = state.home() / "pulumi" / f"{spec.stack_name}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with FileLock(str(lock)), report.stack_progress("preparing the store") as watcher:
            with stack_errors():
                made = self._driver(spec.stack_name).config()
            if made and set_rules:  # the days not given keep the store's own
                given = {f"{r}_days": d for r, _, d in spec.rules()}
                spec = replace(spec.with_rules_of(made), **{k: v for k, v in given.items() if k in set_rules})
            elif made:
                kept = spec.with_rules_of(made)
                if kept.rules() != spec.rules():
                    report.say(f"store {spec.uri} keeps its lifecycle (" + ", ".join(f"{r} {d} d" for r, _, d in kept.rules())
                               + "); the policy says " + ", ".join(f"{r} {d} d" for r, _, d in spec.rules())
                               + f": `burst store lifecycle --provider {self.provider} --region {spec.region} --checkpoints-days N` changes it")
                spec = kept
            driver = self._driver(spec, watcher, program=self.store_program(spec))
            try:
                with stack_errors():
                    outputs = driver.up()
            except BurstError:
                raise
            except Exception as exc:  # noqa: BLE001 - Pulumi's CommandError: one line, nothing of the cluster exists yet
                reason = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else exc.__class__.__name__
                raise BurstError(f"the store {spec.uri} of {spec.region} could not be made ({reason}); no cluster was created; "
                                 f"fix the cause and run `burst up` again (the store's stack {spec.stack_name} goes on where it stopped)",
                                 exit_code=1) from None
        return StoreAt(outputs.get("storage_uri") or spec.uri, outputs.get("scope") or spec.scope, spec.datasets_days)

    def wheel(self) -> Optional[str]:
        """A burst wheel the nodes install at boot (None: the nodes get burst another way)."""
        return None

    # ------------------------------------------------------------------ spec and rendering

    def build_spec(self, name: str, lay: "Layout", preemptible: bool, hours: float, lease_id: Optional[str] = None,
                   project: Optional[str] = None, wheel_path: Optional[str] = None, image: Optional[str] = None,
                   auth_token: Optional[str] = None, store: Optional[tuple[str, Optional[str]]] = None,
                   idle_minutes: Optional[float] = None):
        """The stack's spec; ``auth_token``: the Ray token its heads require (None: a throwaway one, for a rendering);
        ``store``: (uri, scope) of the store the cluster is granted (None: the region's own, ``region_store``)."""
        import secrets

        from infra.spec import TPU_TENSORFLOW, PoolSpec, StackSpec, safe_name

        from ..catalog import facts

        known = facts.load(self.provider)
        if store is None:
            own = self.region_store(lay.region, project=project)
            store = (own.uri, own.scope)
        pools = []
        for i, pool in enumerate(lay.pools):
            o = pool.offer
            pools.append(PoolSpec(name="tpu" if o.is_tpu else f"gpu{i}-{safe_name(o.accelerator, 12)}", instance_type=o.instance_type,
                                  accelerator=o.accelerator, gpus_per_node=o.accelerator_count, nodes=pool.nodes, zone=pool.zone,
                                  vcpus=o.vcpus, memory_gib=o.memory_gib, gpu_driver=known.gke_driver(o.accelerator)))
        fields = dict(provider=self.provider, cluster=name, lease_id=lease_id or uuid.uuid4().hex[:12],
                      expires=int(time.time() + hours * 3600), region=lay.region, pools=tuple(pools), preemptible=preemptible,
                      ray_version=ray_version(), project=project or self.project() or "my-gcp-project", wheel_path=wheel_path,
                      image=image, device_plugin_image=known.device_plugin.image if known.device_plugin else None,
                      auth_token=auth_token or secrets.token_hex(32), store_uri=store[0], store_scope=store[1], idle_minutes=idle_minutes)
        if lay.is_tpu:
            fields["tpu_runtime"] = known.tpu_runtime(TPU_TENSORFLOW, lay.accelerator)
        return StackSpec(**fields, config=self.stack_config(fields))

    def rendering(self, spec, lay: "Layout") -> dict:
        from infra import render

        resources = render.render(self.program(spec), stack=spec.stack_name)
        return {
            "provider": spec.provider, "stack": spec.stack_name, "region": spec.region, "preemptible": spec.preemptible,
            "lease_id": spec.lease_id, "expires": spec.expires, "labels": spec.labels(), "layout": lay.to_dict(),
            "hourly_usd": round(lay.hourly_usd(spec.preemptible), 4), "image": spec.image,
            "resources": [{"type": r["type"], "name": r["name"], "inputs": _mask(r["inputs"]), "summary": render.summary(r),
                           "dependsOn": r.get("dependsOn", [])} for r in resources],
        }

    def render(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> dict:
        """The resources the stack would create, rendered offline under Pulumi's mocks, and the store it uses
        (with its own stack's resources when burst makes it: once per project and region)."""
        from infra import render

        if placement.storage:
            store_spec, store = None, (placement.storage, "(the named store's account, looked up at `up`)" if self.store_service == "blob" else None)
        else:
            store_spec = self.region_store(placement.region, placement.stores)
            store = (store_spec.uri, store_spec.scope)
        spec = self.build_spec(name, placement.layout, placement.preemptible, lease.hours or DEFAULT_LEASE_HOURS, lease_id="dryrun000000",
                               image=placement.image, store=store, idle_minutes=lease.idle_minutes)
        out = self.rendering(spec, placement.layout)
        out["store"] = {"uri": store[0], "stack": store_spec.stack_name if store_spec else None, "named": store_spec is None,
                        "kept_after_down": True,
                        "lifecycle_days": {rule: days for rule, _, days in store_spec.rules()} if store_spec else None,
                        "resources": [] if store_spec is None else [
                            {"type": r["type"], "name": r["name"], "inputs": _mask(r["inputs"]), "summary": render.summary(r)}
                            for r in render.render(self.store_program(store_spec), stack=store_spec.stack_name)]}
        return out

    # ------------------------------------------------------------------ checks before Pulumi

    def missing_prerequisites(self) -> list[str]:
        """What must be installed or configured before a stack can be created or reached, and how."""
        from infra.driver import CLI_MISSING, find_cli

        return ([CLI_MISSING] if find_cli() is None else []) + self.missing_access()

    def check_prerequisites(self, action: str) -> None:
        problems = self.missing_prerequisites()
        if problems:
            raise BurstError(f"cannot {action} on {self.provider}: " + "; ".join(problems))

    # ------------------------------------------------------------------ up / down

    def _driver(self, spec_or_name, watcher=None, program=None):
        from infra.driver import StackDriver

        with stack_errors():
            return StackDriver(spec_or_name, state.home(), program=program or (lambda: None), command=self.command,
                               on_output=watcher.on_output if watcher else None, on_event=watcher.on_event if watcher else None)

    def up(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> tuple[ClusterHandle, bool]:
        lay = placement.layout
        hours = lease.hours or DEFAULT_LEASE_HOURS
        self.check_prerequisites("create a cluster")
        # The name is claimed, in one locked step with the check, before anything is created: a
        # second `up` of it finds this one instead of creating a second stack.
        claim = ClusterHandle(name=name, provider=self.provider, cluster_id=f"claim-{uuid.uuid4().hex[:12]}", state="starting",
                              storage_uri="", starter_pid=os.getpid())
        existing = state.claim(claim)
        if existing is not None:
            if existing.state == "running" and existing.provider == self.provider:
                return existing, False
            if existing.state == "starting" and state.starter_alive(existing):
                raise BurstError(f"cluster {name!r} is being created by PID {existing.starter_pid}; wait for it (`burst status`), "
                                 f"then run `burst up` again", exit_code=1)
            raise BurstError(f"cluster {name!r} is recorded ({existing.provider}, state {existing.state}); run `burst down {name}` first")
        try:
            return self._create_somewhere(name, lay, placement, lease, hours, claim, report), True
        finally:
            state.release(claim)  # still the claim: nothing was created (a created stack's handle replaced it)

    def _create_somewhere(self, name: str, lay: "Layout", placement: "Placement", lease: Lease, hours: float, claim: ClusterHandle,
                          report: Reporter) -> ClusterHandle:
        """The stack in the layout's zones, moving to the region's other zones on a stock-out."""
        self.preflight(placement, report)
        store = self.ensure_store(placement, report)
        wheel = self.wheel()
        tried: set[str] = set()
        while True:
            try:
                return self._create(name, lay, placement, lease, hours, wheel, claim, report, store)
            except StockOut as out:
                tried |= set(out.zones)
                moved = lay.without_zones(tried)
                if moved is None:
                    raise BurstError(f"creating cluster {name!r} on {self.provider} failed: no capacity for {lay.accelerator} in "
                                     f"{', '.join(sorted(tried))} ({out.reason}); everything it created was destroyed; try another "
                                     f"--region or accelerator, or later", exit_code=1) from None
                report.say(f"{', '.join(out.zones)}: no {lay.accelerator} capacity; trying {', '.join(moved.zones)} "
                           f"(same nodes at the same regional prices: the plan's time and cost stand)")
                lay = moved

    def _create(self, name: str, lay: "Layout", placement: "Placement", lease: Lease, hours: float, wheel: Optional[str],
                claim: ClusterHandle, report: Reporter, store: StoreAt) -> ClusterHandle:
        """One attempt at the stack; a failure destroys what it created (``StockOut`` when for want of capacity)."""
        preemptible = placement.preemptible
        report.say(f"layout: {lay.describe()} in {lay.region}, {lay.count} x {lay.accelerator}"
                   f"{' (preemptible)' if preemptible else ''}, ${lay.hourly_usd(preemptible):,.2f}/h, lease {hours:g} h")
        token_path = state.cluster_dir(name) / "auth_token"
        ray_head.new_token(token_path)  # this machine's copy (user-only); the stack keeps it as a Pulumi secret
        spec = self.build_spec(name, lay, preemptible, hours, wheel_path=wheel, image=placement.image,
                               auth_token=token_path.read_text().strip(), store=store, idle_minutes=lease.idle_minutes)
        handle = ClusterHandle(name=name, provider=self.provider, cluster_id=spec.lease_id, state="starting", expires=float(spec.expires),
                               storage_uri=store.uri, datasets_days=store.datasets_days, token_path=str(token_path), layout=lay.to_dict(), hourly_usd=lay.hourly_usd(preemptible),
                               region=lay.region, accelerator=lay.accelerator,
                               preemptible=preemptible, lease_id=spec.lease_id, stack=spec.stack_name, starter_pid=os.getpid(),
                               outputs={"project": spec.project, "zone": spec.pools[0].zone, "image": spec.image or ""})
        with state.locked():
            state.save(handle)  # before Pulumi runs: `burst down` can always find and destroy the stack
        # No end for the bar: counting resources would mean rendering under the mock runtime, which
        # must not share this process with a real update.
        with report.stack_progress("creating") as watcher:
            driver = self._driver(spec, watcher, program=self.program(spec))
            try:
                with stack_errors():
                    outputs = driver.up()
            except KeyboardInterrupt:
                report.say(f"interrupted: Pulumi cancelled and the stack refreshed; run `burst down {name}` to remove what was created")
                raise
            except Exception as exc:  # a failed up must not leave resources behind
                reason = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else exc.__class__.__name__
                report.say(f"up failed ({reason}); destroying what was created")
                with stack_errors():
                    driver.destroy()
                token_path.unlink(missing_ok=True)
                with state.locked():
                    state.save(claim)  # nothing is left: the name stays claimed for the next zone, or is released by `up`
                if any(marker in str(exc) for marker in STOCKOUT_MARKERS):
                    raise StockOut([z for z in lay.zones if z in str(exc)] or lay.zones, reason) from None
                raise BurstError(f"creating cluster {name!r} on {self.provider} failed: {reason}; everything it created was destroyed",
                                 exit_code=1) from None
        handle.state = "running"
        handle.storage_uri = outputs.get("storage_uri") or store.uri
        handle.outputs.update({k: v for k, v in outputs.items() if k not in SECRET_OUTPUTS})
        with state.locked():
            state.save(handle)
        return handle

    def down(self, handle: ClusterHandle, report: Reporter = QUIET) -> None:
        """Destroy the stack, verify it holds nothing, then forget the handle (kept when anything is left)."""
        if not handle.stack:
            with state.locked():
                state.delete(ClusterHandle, handle.name)
            return
        self.check_prerequisites("destroy a cluster")
        with state.locked():
            handle.state = "stopping"
            state.save(handle)
        with report.stack_progress("destroying") as watcher, stack_errors():
            self._driver(handle.stack, watcher).destroy()
        with state.locked():
            state.delete(ClusterHandle, handle.name)
        token = state.own_token(handle)  # never a file a hand edit named
        if token is not None:
            token.unlink(missing_ok=True)

    def adopt(self, handle: ClusterHandle, report: Reporter = QUIET, poll_s: float = 5.0, timeout_s: float = 3 * 3600) -> Optional[ClusterHandle]:
        """The Pulumi CLI runs in a session of its own: a killed `up` (or controller) leaves it
        creating. Wait until no Pulumi process works on the stack any more (never destroy it under
        one), then take the stack's outputs: a stack that came up is this cluster, running."""
        if not handle.stack:
            return None
        deadline = time.time() + timeout_s
        said = False
        while pulumi_processes(handle.stack) and time.time() < deadline:
            if not said:
                report.say(f"cluster {handle.name}: Pulumi is still working on stack {handle.stack} (its starter died); waiting for it")
                said = True
            time.sleep(poll_s)
        if pulumi_processes(handle.stack):
            return None
        with stack_errors():
            outputs = self._driver(handle.stack).outputs()
        if not outputs.get("storage_uri"):  # the program's last exports: the stack did not come up
            return None
        with state.locked():
            current = state.load(ClusterHandle, handle.name)
            if current is None or current.cluster_id != handle.cluster_id:
                return None
            current.state = "running"
            current.storage_uri = outputs["storage_uri"]
            current.outputs.update({k: v for k, v in outputs.items() if k not in SECRET_OUTPUTS})
            state.save(current)
        report.say(f"cluster {handle.name}: stack {handle.stack} came up; adopted")
        return current

    def is_alive(self, handle: ClusterHandle, timeout: float = 2.0) -> bool:
        """A cloud cluster is alive while its stack is up; the Ray head is checked through the tunnel."""
        return handle.state == "running"

    def answers_here(self, handle: ClusterHandle) -> bool:
        return False  # its head is reached through a tunnel, opened by the commands that need it

    # ------------------------------------------------------------------ reaching the Ray head

    def kubeconfig(self, handle: ClusterHandle) -> Optional[str]:
        """The cluster's kubeconfig (a secret stack output), for targets reached through Kubernetes."""
        return None

    @contextmanager
    def kubeconfig_file(self, handle: ClusterHandle) -> Iterator[Optional[str]]:
        """The cluster's kubeconfig in a file of the user's only, for as long as a command needs it (None: none)."""
        config = self.kubeconfig(handle)
        if config is None:
            yield None
            return
        fd, path = tempfile.mkstemp(prefix="kubeconfig-", dir=state.home())
        try:
            with os.fdopen(fd, "w") as f:  # mkstemp: readable by the user only
                f.write(config)
            yield path
        finally:
            Path(path).unlink(missing_ok=True)

    @contextmanager
    def reach(self, handle: ClusterHandle) -> Iterator[ClusterHandle]:
        """A copy of the handle whose dashboard URL reaches the Ray head through a tunnel burst owns."""
        self.check_prerequisites("reach the cluster")
        with self.kubeconfig_file(handle) as kubeconfig_file:
            with tunnel(lambda port: self.tunnel_command(handle, port, kubeconfig_file), handle.name, self.head_hint) as url:
                yield handle.model_copy(update={"dashboard_url": url})

    head_hint: ClassVar[str] = "check the cluster's head node"


