"""A Kubernetes cluster burst did not create: a university cluster, an existing GKE or AKS cluster,
GPUs behind Kueue. ``--provider kubernetes --context NAME [--namespace NS]``; the policy's
``onprem`` section (``scheduler: kubernetes``) says what the cluster offers one run (accelerator,
GPUs, GPUs per node, price per GPU-hour, grid carbon), on which nodes (``node_selector``,
``tolerations``), through which Kueue ``local_queue``, and where the run's storage is (a bucket,
else a PersistentVolumeClaim burst creates).

``up`` finds the KubeRay operator (its CRD) or installs it with Helm (the pinned chart), then
applies a Secret with the Ray token, the claim and a RayCluster sized by the plan, all labelled with
the lease, and records exactly what it created. The head is reached with ``kubectl port-forward``
(the dashboard listens on the pod's loopback only). ``down`` deletes what ``up`` created, and only
that (never the namespace or the operator it found), then checks that nothing labelled with the
lease is left. The context is pinned in the handle at ``up``: switching ``kubectl``'s current
context later never sends burst's deletes to another cluster.

With Kueue, the plan's queue wait comes from the queue (as Slurm's does from ``sbatch --test-only``):
nothing pending ahead and room in the ClusterQueue's nominal quota for the run's GPUs is a start
now; otherwise the policy's ``queue_wait_hours``, with the queue's state as the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from .. import state
from ..errors import BurstError
from ..runtime import ray_head
from ..state import ClusterHandle
from .base import QUIET, JobResources, JobRuntime, Lease, QueueWait, Reporter, Target
from .tunnel import tunnel

if TYPE_CHECKING:
    from ..placement.planner import Placement
    from .site import OnPrem

KUBERAY_CRD = "rayclusters.ray.io"
KUEUE_CRD = "localqueues.kueue.x-k8s.io"
OPERATOR_RELEASE = "kuberay-operator"
READY_TIMEOUT_S = 900.0
POLL_S = 5.0


def run(tool: str, context: Optional[str], *args: str, data: Optional[str] = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``kubectl`` or ``helm`` against ``context`` (text in and out; never a shell)."""
    flag = {"kubectl": "--context", "helm": "--kube-context"}[tool]
    command = [tool, *([f"{flag}={context}"] if context else []), *args]
    try:
        return subprocess.run(command, input=data, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise BurstError(f"{tool} is not installed; the kubernetes target needs kubectl and helm on PATH "
                         "(https://kubernetes.io/docs/tasks/tools/, https://helm.sh/docs/intro/install/)", exit_code=1) from None
    except subprocess.TimeoutExpired:
        raise BurstError(f"`{tool} {' '.join(args[:3])}` did not answer within {timeout:.0f} s; is the cluster reachable?", exit_code=1) from None


def _last(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit code {proc.returncode}"


def kubectl(context: Optional[str], *args: str, data: Optional[str] = None, what: str = "") -> str:
    proc = run("kubectl", context, *args, data=data)
    if proc.returncode != 0:
        raise BurstError(f"kubectl {what or args[0]} failed on context {context or '(current)'}: {_last(proc)}", exit_code=1)
    return proc.stdout


def has_crd(context: Optional[str], name: str) -> bool:
    return run("kubectl", context, "get", "crd", name, "-o", "name").returncode == 0


def current_context() -> str:
    proc = run("kubectl", None, "config", "current-context")
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BurstError("no kubeconfig context: pass --context NAME (`kubectl config get-contexts` lists them) or set onprem.context",
                         exit_code=2)
    return proc.stdout.strip()


ASK_TIMEOUT = "--request-timeout=10s"  # a plan asks the queue; an unreachable cluster must not hold it up
KUEUE_FRESH_S = 30.0  # a plan asks once for all its candidate sizes; a controller planning a move later asks again
_kueue_asked: dict[tuple, tuple[float, tuple]] = {}


def kueue_state(context: Optional[str], ns: str, lq: str) -> tuple[Optional[dict], Optional[dict], str]:
    """(LocalQueue, its ClusterQueue, why not) as the cluster reports them, asked at most every ``KUEUE_FRESH_S``."""
    key = (context, ns, lq)
    asked = _kueue_asked.get(key)
    if asked is None or time.monotonic() - asked[0] > KUEUE_FRESH_S:
        _kueue_asked[key] = asked = (time.monotonic(), _ask_kueue(context, ns, lq))
    return asked[1]


def _ask_kueue(context: Optional[str], ns: str, lq: str) -> tuple[Optional[dict], Optional[dict], str]:
    proc = run("kubectl", context, ASK_TIMEOUT, "get", "crd", KUEUE_CRD, "-o", "name", timeout=30)
    if proc.returncode != 0:
        if "NotFound" in (proc.stderr or ""):
            return None, None, f"no Kueue on the cluster, yet the policy names LocalQueue {lq!r}"
        return None, None, f"the cluster did not answer ({_last(proc)})"
    proc = run("kubectl", context, ASK_TIMEOUT, "get", "localqueue", lq, "-n", ns, "-o", "json", timeout=30)
    if proc.returncode != 0:
        return None, None, f"Kueue LocalQueue {ns}/{lq} not readable: {_last(proc)}"
    local = json.loads(proc.stdout)
    cq_name = local.get("spec", {}).get("clusterQueue")
    proc = run("kubectl", context, ASK_TIMEOUT, "get", "clusterqueue", cq_name, "-o", "json", timeout=30)
    if proc.returncode != 0:
        return None, None, f"Kueue ClusterQueue {cq_name} not readable: {_last(proc)}"
    return local, json.loads(proc.stdout), ""


def kueue_wait(site: "OnPrem", gpus: int) -> QueueWait:
    """Whether the site's LocalQueue would admit ``gpus`` now, from the queue's and its ClusterQueue's status."""
    context, ns, lq = site.context, site.namespace, site.local_queue
    local, cq, why = kueue_state(context, ns, lq)
    if why:
        return QueueWait(None, why)
    cq_name = cq.get("metadata", {}).get("name", "?")
    pending = int(cq.get("status", {}).get("pendingWorkloads", 0)) + int(local.get("status", {}).get("pendingWorkloads", 0))
    quota = used = 0.0
    for group in cq.get("spec", {}).get("resourceGroups", []):
        for flavor in group.get("flavors", []):
            for r in flavor.get("resources", []):
                if r.get("name") == "nvidia.com/gpu":
                    quota += float(r.get("nominalQuota", 0))
    for flavor in cq.get("status", {}).get("flavorsUsage", []):
        for r in flavor.get("resources", []):
            if r.get("name") == "nvidia.com/gpu":
                used += float(r.get("total", 0))
    free = quota - used
    state_line = f"Kueue {ns}/{lq} -> {cq_name}: {pending} pending, {used:g} of {quota:g} GPUs in use"
    if pending == 0 and free >= gpus:
        return QueueWait(0.0, f"{state_line}; {gpus} fit now")
    return QueueWait(None, f"{state_line}; {gpus} GPUs wait for admission")


def cluster_id_of(lease_id: str) -> str:
    """The id a cluster's handle (and its notice directory) carries: its lease's first 12 hex digits."""
    return lease_id[:12]


class KubernetesTarget(Target):
    """A site's own Kubernetes cluster, driven through kubectl and helm; burst creates only the RayCluster and its objects."""

    provider = "kubernetes"
    kind = "onprem"
    default_cluster_name = "k8s"
    is_scheduler = True          # with Kueue, a queue the plan asks
    renders_offline = True       # `up --dry-run` prints the manifests
    reads_local_paths = False    # the pods cannot read this machine's files: --data is copied to the storage
    runs_images = True
    takes_context = True
    head_hint = "see `kubectl get pods -n NAMESPACE` and `kubectl describe raycluster`"

    def serves(self, site) -> bool:
        return site.scheduler == "kubernetes"

    def check_prerequisites(self, action: str) -> None:
        missing = [t for t in ("kubectl", "helm") if shutil.which(t) is None]
        if missing:
            raise BurstError(f"{' and '.join(missing)} not found; {action} on Kubernetes needs kubectl and helm on PATH "
                             "(https://kubernetes.io/docs/tasks/tools/, https://helm.sh/docs/intro/install/)", exit_code=1)

    def queue_estimate(self, site, nodes: int, hours: float) -> QueueWait:
        if not site.local_queue:
            return QueueWait(None, "no Kueue LocalQueue in the policy")
        if shutil.which("kubectl") is None:
            return QueueWait(None, "kubectl not found")
        return kueue_wait(site, max(1, nodes * (site.gpus_per_node or site.gpus)))

    # ------------------------------------------------------------------ what up creates

    def spec(self, name: str, placement: "Placement", lease_id: str, expires: int, context: str, create_namespace: bool,
             idle_minutes: Optional[float] = None):
        from infra.byo_kubernetes import ByoSpec
        from infra.spec import safe_name

        site = placement.site
        if site.gpus_per_node:  # one worker pod per gpus_per_node GPUs
            workers = max(1, -(-placement.count // site.gpus_per_node))
            per_worker = placement.count // workers
        else:  # 0: CPU nodes, one worker pod per node
            workers, per_worker = max(1, placement.count), 0
        bucket = site.storage if site.storage and "://" in site.storage else None
        from .pulumi_stack import ray_version

        return ByoSpec(
            name=safe_name(f"burst-{name}", 40), cluster_id=cluster_id_of(lease_id), namespace=site.namespace,
            labels={"burst-lease": lease_id, "burst-expires": str(expires), "burst-cluster": safe_name(name, 63)},
            ray_version=ray_version(), workers=workers, gpus_per_worker=per_worker, image=placement.image,
            node_selector=dict(site.node_selector), tolerations=tuple(t.manifest() for t in site.tolerations),
            local_queue=site.local_queue, bucket=bucket, pvc_size_gi=site.pvc_size_gi, storage_class=site.storage_class,
            create_namespace=create_namespace, expires=expires, idle_minutes=idle_minutes)

    def render(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> dict:
        from infra.byo_kubernetes import manifests

        site = placement.site
        expires = int(time.time() + 3600 * (lease.hours or 24.0))
        spec = self.spec(name, placement, "dry-run", expires, site.context or "(current context)", create_namespace=True,
                         idle_minutes=lease.idle_minutes)
        objects = manifests(spec, token="<generated at up, kept in the Secret>")
        return {"provider": self.provider, "cluster": name, "context": site.context or "(current context)", "namespace": spec.namespace,
                "operator": f"KubeRay operator: used if its CRD {KUBERAY_CRD} exists, else `helm install` of chart kuberay-operator "
                            f"{_chart_version()} into {spec.namespace}",
                "kueue": {"local_queue": site.local_queue} if site.local_queue else None,
                "storage": spec.bucket or f"PersistentVolumeClaim {spec.claim_name} ({spec.pvc_size_gi} Gi) at {spec.mount_path}",
                "resources": objects, "hourly_usd": round(placement.hourly_usd, 4),
                "note": "the Namespace is created only when it does not exist yet; down deletes only what up created"}

    # ------------------------------------------------------------------ lifecycle

    def up(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> tuple[ClusterHandle, bool]:
        from infra.byo_kubernetes import manifests

        self.check_prerequisites("burst up")
        site = placement.site
        context = site.context or current_context()
        lease_id = uuid.uuid4().hex
        expires = int(time.time() + 3600 * (lease.hours or 24.0))
        claim = ClusterHandle(name=name, provider=self.provider, cluster_id=cluster_id_of(lease_id), state="starting", region=site.name,
                              accelerator=site.accelerator, hourly_usd=placement.hourly_usd, budget_usd=lease.budget_usd,
                              created=time.time(), expires=expires, starter_pid=os.getpid(), storage_uri="",
                              layout={"count": placement.count, "gpus": placement.count, "accelerator": site.accelerator},
                              outputs={"context": context, "namespace": site.namespace, "lease": lease_id, "created": []})
        existing = state.claim(claim)
        if existing is not None:
            return existing, False
        created: list[dict] = []
        installed_operator = False
        token_path = state.cluster_dir(name) / "auth_token"
        try:
            kubectl(context, "version", "-o", "json", what="version (is the cluster reachable?)")
            namespace_exists = run("kubectl", context, "get", "namespace", site.namespace, "-o", "name").returncode == 0
            spec = self.spec(name, placement, lease_id, expires, context, create_namespace=not namespace_exists,
                             idle_minutes=lease.idle_minutes)
            if spec.local_queue and not has_crd(context, KUEUE_CRD):
                raise BurstError(f"the policy names Kueue LocalQueue {spec.local_queue!r}, but context {context} has no Kueue "
                                 f"(CRD {KUEUE_CRD}); remove onprem.local_queue or install Kueue", exit_code=2)
            if not has_crd(context, KUBERAY_CRD):
                report.say(f"installing the KubeRay operator (chart {_chart_version()}) into {site.namespace} on {context}")
                installed_operator = True
                self._intend(claim, created, installed_operator)  # recorded before it exists: a kill now leaves `down` what to delete
                self._install_operator(context, site.namespace)
            else:
                report.say(f"the KubeRay operator is there ({KUBERAY_CRD}); using it")
            ray_head.new_token(token_path)
            objects = manifests(spec, token_path.read_text().strip())
            for obj in objects:  # one by one, each recorded before it is applied: a kill in between leaves nothing `down` cannot find
                created.append({"kind": obj["kind"], "name": obj["metadata"]["name"],
                                "namespace": obj["metadata"].get("namespace")})
                self._intend(claim, created, installed_operator)
                kubectl(context, "apply", "-f", "-", data=json.dumps(obj), what=f"apply {obj['kind']} {obj['metadata']['name']}")
            handle = claim.model_copy(update={"token_path": str(token_path), "storage_uri": self._storage_here(spec, context)})
            handle.outputs.update({"ray_cluster": spec.name, "head_service": spec.head_service, "created": created,
                                   "operator_installed": installed_operator, "job_storage": spec.job_storage,
                                   "image": placement.image, "local_queue": spec.local_queue, "lease": lease_id})
            handle.layout.update({"workers": spec.workers, "gpus_per_worker": spec.gpus_per_worker})
            with state.locked():
                state.save(handle)
            self._wait_ready(handle, report, lease.wait or not spec.local_queue)
        except BaseException as exc:
            if created or installed_operator:
                report.say(f"up failed; deleting what it created on {context}")
                self._delete(context, created, site.namespace if installed_operator else None)
            token_path.unlink(missing_ok=True)
            state.release(claim)
            if isinstance(exc, BurstError):
                raise
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise BurstError(f"creating cluster {name!r} on Kubernetes failed: {exc}; what it created was deleted", exit_code=1) from None
        return state.load(ClusterHandle, name) or handle, True

    @staticmethod
    def _intend(claim: ClusterHandle, created: list[dict], installed_operator: bool) -> None:
        """Write ahead: what `up` is about to create goes into the cluster's record first (deleting one
        that was never made is a no-op: `kubectl delete --ignore-not-found`)."""
        with state.locked():
            current = state.load(ClusterHandle, claim.name)
            if current is None or current.cluster_id != claim.cluster_id:
                return
            claim.outputs.update({"created": list(created), "operator_installed": installed_operator})
            state.save(claim)

    def _storage_here(self, spec, context: str) -> str:
        """The run's storage as this machine reaches it: the bucket, or the claim through the head pod."""
        if spec.bucket:
            return spec.bucket
        from ..runtime import kube_storage

        return kube_storage.uri(context, spec.namespace, spec.name, spec.mount_path)

    def _install_operator(self, context: str, namespace: str) -> None:
        from infra.spec import KUBERAY_REPO

        proc = run("helm", context, "upgrade", "--install", OPERATOR_RELEASE, "kuberay-operator", "--repo", KUBERAY_REPO,
                   "--version", _chart_version(), "--namespace", namespace, "--create-namespace", "--wait", "--timeout", "10m", timeout=900)
        if proc.returncode != 0:
            raise BurstError(f"helm could not install the KubeRay operator: {_last(proc)}", exit_code=1)

    def _wait_ready(self, handle: ClusterHandle, report: Reporter, wait: bool) -> None:
        """Until the RayCluster is ready; with Kueue and no --wait, say it is queued and return."""
        context, ns, rc = handle.outputs["context"], handle.outputs["namespace"], handle.outputs["ray_cluster"]
        deadline = time.time() + READY_TIMEOUT_S
        said = False
        while True:
            raw = kubectl(context, "get", "raycluster", rc, "-n", ns, "-o", "json", what="get raycluster")
            status = json.loads(raw).get("status", {})
            if status.get("state") == "ready" or any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])):
                with state.locked():
                    current = state.load(ClusterHandle, handle.name)
                    if current is not None:
                        current.state = "running"
                        state.save(current)
                report.say(f"RayCluster {ns}/{rc} is ready on {context}")
                return
            if not wait:
                report.say(f"RayCluster {ns}/{rc} waits for Kueue to admit it ({handle.outputs.get('local_queue')}); "
                           f"`burst status` shows when it runs, `burst up --wait` waits")
                return
            if not said:
                report.say(f"waiting for RayCluster {ns}/{rc} to be ready ({status.get('state') or 'pending'})")
                said = True
            if time.time() > deadline:
                raise BurstError(f"RayCluster {ns}/{rc} was not ready within {READY_TIMEOUT_S / 60:.0f} minutes; {self.head_hint}", exit_code=1)
            time.sleep(POLL_S)

    def _delete(self, context: str, created: list[dict], operator_namespace: Optional[str]) -> list[str]:
        """Delete the objects (newest first) and the operator release burst installed; what could not be deleted."""
        left = []
        for obj in reversed(created):
            args = ["delete", obj["kind"].lower(), obj["name"], "--ignore-not-found", "--wait=true", "--timeout=300s"]
            if obj.get("namespace"):
                args += ["-n", obj["namespace"]]
            proc = run("kubectl", context, *args, timeout=400)
            if proc.returncode != 0:
                left.append(f"{obj['kind']} {obj['name']}: {_last(proc)}")
        if operator_namespace:
            proc = run("helm", context, "uninstall", OPERATOR_RELEASE, "--namespace", operator_namespace, "--wait")
            if proc.returncode != 0 and "not found" not in _last(proc):
                left.append(f"helm release {OPERATOR_RELEASE}: {_last(proc)}")
        return left

    def down(self, handle: ClusterHandle, report: Reporter = QUIET) -> None:
        """Delete what ``up`` created, check that nothing with the lease's label is left, forget the handle."""
        self.check_prerequisites("burst down")
        context, ns = handle.outputs.get("context"), handle.outputs.get("namespace")
        with state.locked():
            handle.state = "stopping"
            state.save(handle)
        created = handle.outputs.get("created", [])
        left = self._delete(context, created, ns if handle.outputs.get("operator_installed") else None)
        lease = handle.outputs.get("lease")
        if lease and not any(o["kind"] == "Namespace" for o in created):
            proc = run("kubectl", context, "get", "rayclusters.ray.io,secrets,persistentvolumeclaims", "-n", ns, "-l",
                       f"burst-lease={lease}", "-o", "name")
            if proc.returncode == 0 and proc.stdout.strip():
                left += proc.stdout.split()
        if left:
            raise BurstError(f"cluster {handle.name!r}: not deleted on {context}: {'; '.join(left)}; fix it and run `burst down {handle.name}` again",
                             exit_code=1)
        with state.locked():
            state.delete(ClusterHandle, handle.name)
        if handle.token_path:
            Path(handle.token_path).unlink(missing_ok=True)
        report.say(f"deleted {len(created)} object(s) burst created on {context}" + (" and the operator it installed" if handle.outputs.get("operator_installed") else ""))

    def is_alive(self, handle: ClusterHandle, timeout: float = 2.0) -> bool:
        return handle.state == "running"

    def describe_state(self, handle: ClusterHandle) -> str:
        if handle.state == "starting" and handle.outputs.get("ray_cluster") and shutil.which("kubectl"):
            self._wait_ready(handle, QUIET, wait=False)  # Kueue may have admitted it since
            current = state.load(ClusterHandle, handle.name)
            return current.state if current is not None else "gone"
        return handle.state

    def not_ready(self, handle: ClusterHandle) -> str:
        if handle.state == "starting":
            return f"cluster {handle.name!r} waits for Kueue ({handle.outputs.get('local_queue')}); `burst status` shows when it runs"
        return super().not_ready(handle)

    def answers_here(self, handle: ClusterHandle) -> bool:
        return False

    @contextmanager
    def reach(self, handle: ClusterHandle) -> Iterator[ClusterHandle]:
        self.check_prerequisites("reach the cluster")
        context, ns, svc = handle.outputs["context"], handle.outputs["namespace"], handle.outputs["head_service"]
        command = lambda port: ["kubectl", f"--context={context}", "port-forward", "-n", ns, f"service/{svc}", f"{port}:8265",  # noqa: E731
                                "--address=127.0.0.1"]
        with tunnel(command, handle.name, self.head_hint) as url:
            yield handle.model_copy(update={"dashboard_url": url})

    # ------------------------------------------------------------------ jobs

    def job_resources(self, handle: ClusterHandle, workers: int) -> JobResources:
        per_worker = int(handle.layout.get("gpus_per_worker", 0))
        count = int(handle.layout.get("workers", 1))
        return JobResources(workers=count, gpus_per_worker=per_worker, cpus_per_worker=1)

    def job_runtime(self, handle: ClusterHandle) -> JobRuntime:
        from .kuberay import pod_job_runtime

        return pod_job_runtime(handle)  # the same pods as on GKE/AKS

    def job_storage(self, handle: ClusterHandle) -> str:
        return handle.outputs.get("job_storage") or handle.storage_uri

    def storage_outlives(self, handle: ClusterHandle) -> bool:
        from ..runtime import kube_storage

        return not kube_storage.is_kube(handle.storage_uri)  # a claim is deleted with the cluster; the site's bucket stays


def _chart_version() -> str:
    from infra.spec import KUBERAY_CHART_VERSION

    return KUBERAY_CHART_VERSION
