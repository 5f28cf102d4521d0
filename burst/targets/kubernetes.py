"""A Kubernetes cluster burst did not create: a university cluster, an existing GKE or AKS cluster,
GPUs behind Kueue. ``--provider kubernetes --context NAME [--namespace NS]``; the policy's
``onprem`` section (``scheduler: kubernetes``) says what the cluster offers one run (accelerator,
GPUs, GPUs per node, price per GPU-hour, grid carbon), on which nodes (``node_selector``,
``tolerations``), through which Kueue ``local_queue``, and where the run's storage is (a bucket,
else a PersistentVolumeClaim burst creates).

``up`` finds the KubeRay operator (its running Deployment: Helm keeps a chart's CRDs after an
uninstall, so a CRD alone says nothing) or installs it with Helm (the pinned chart), then applies a
Secret with the Ray token, the claim and a RayCluster sized by the plan, all labelled with the
lease, and records each before it applies it. The head is reached with ``kubectl port-forward``
(the dashboard listens on the pod's loopback only). ``down`` deletes what ``up`` created, then
checks that nothing labelled with the lease is left. The context is pinned in the handle at ``up``:
switching ``kubectl``'s current context later never sends burst's deletes to another cluster.

Ownership is by label, never by a failed read: a namespace is burst's only if it carries
``app.kubernetes.io/managed-by: burst`` (burst labels the ones it creates), the operator only if
burst's marker ConfigMap stands beside it. Both are shared by every burst cluster that uses them;
the last one to leave removes them, and only when nothing else is in the namespace or reconciled
by the operator. A read that fails for any reason but NotFound is an error.

A cluster that Kueue holds, or whose pods wait for nodes the autoscaler is adding or for their
image, is waiting, not failing (bounded by its lease, as a Slurm job's queue wait is); only what
will not resolve by itself fails ``up``, with Kubernetes' own reason: an image that cannot be
pulled, pods no node can take and no autoscaler will add one for, a quota.

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

from ..home import state
from ..errors import BurstError
from ..runtime import ray_head
from ..home.state import ClusterHandle
from ..client.jobs import JobRuntime
from .base import QUIET, JobResources, Lease, QueueWait, Reporter, Target
from . import kube_head
from .tunnel import tunnel

if TYPE_CHECKING:
    from ..values.placement import Placement
    from ..values.site import OnPrem

KUBERAY_CRD = "rayclusters.ray.io"
KUEUE_CRD = "localqueues.kueue.x-k8s.io"
POD_MONITOR_CRD = "podmonitors.monitoring.coreos.com"
OPERATOR_RELEASE = "kuberay-operator"
POLL_S = 5.0
UNSCHEDULABLE_GRACE_S = 180.0  # pods no node takes and no autoscaler answers for this long: no node will come
IMAGE_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError")
KEPT_IN_NAMESPACE = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}  # what Kubernetes itself puts in every namespace
NOT_CONTENT = {"Event", "EndpointSlice", "Endpoints", "Lease"}  # records about objects, not anyone's objects (they go with them)


def namespaced_kinds(context: Optional[str]) -> list[str]:
    """Every kind of object the API server lists in a namespace (built-in and custom: Kueue's
    LocalQueues, RBAC, CronJobs, NetworkPolicies, ResourceQuotas, Ingresses, ...), as `kubectl
    api-resources --namespaced --verbs=list` names them: what deleting the namespace would delete."""
    names = kubectl(context, "api-resources", "--namespaced=true", "--verbs=list", "-o", "name", what="api-resources").split()
    if not names:
        raise BurstError(f"kubectl api-resources listed no namespaced kinds on {context}; the namespace is kept", exit_code=1)
    return names


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
    return read(context, "get", "crd", name, "-o", "name", what=f"get crd {name}") is not None


def read(context: Optional[str], *args: str, what: str = "") -> Optional[str]:
    """``kubectl get ...``: its output, or None when the object is NotFound. Any other failure (the
    API server not answering, a forbidden read) is an error, never taken for "missing"."""
    proc = run("kubectl", context, *args)
    if proc.returncode == 0:
        return proc.stdout
    if "(NotFound)" in (proc.stderr or "") or " not found" in _last(proc):
        return None
    raise BurstError(f"kubectl {what or ' '.join(args[:3])} failed on context {context or '(current)'}: {_last(proc)}; "
                     "nothing is assumed from a failed read: try again when the cluster answers", exit_code=1)


def items(context: Optional[str], *args: str, what: str = "") -> list[dict]:
    """The objects a ``kubectl get ... -o json`` lists (a List's items), without those being deleted."""
    raw = read(context, *args, "-o", "json", what=what)
    listed = json.loads(raw).get("items", []) if raw else []
    return [o for o in listed if not o.get("metadata", {}).get("deletionTimestamp")]


def burst_owns(obj: Optional[dict]) -> bool:
    """Burst created it: it carries burst's label (or, from before that label, a lease of burst's)."""
    labels = (obj or {}).get("metadata", {}).get("labels") or {}
    return labels.get("app.kubernetes.io/managed-by") == "burst" or "burst-lease" in labels


def operator_deployments(context: Optional[str]) -> list[dict]:
    """The KubeRay operator's Deployments anywhere in the cluster (the chart labels them
    ``app.kubernetes.io/name: kuberay-operator``)."""
    return items(context, "get", "deployments", "-A", "-l", "app.kubernetes.io/name=kuberay-operator", what="get the KubeRay operator")


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


def object_prefix(name: str, lease_id: str) -> str:
    """The RayCluster's name and its objects' prefix: the cluster's name and its id, so that two
    people's `k8s` in one namespace (each from their own machine) and two long names cut alike are
    different objects; 40 characters at most (KubeRay's pod and Service names are made from it)."""
    from infra.spec import safe_name

    return f"{safe_name(f'burst-{name}', 27)}-{cluster_id_of(lease_id)}"


def owner_of(obj: dict) -> Optional[str]:
    """The lease a Kubernetes object carries (burst's label), None for one burst did not make for a cluster."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get("burst-lease")


class KubernetesTarget(Target):
    """A site's own Kubernetes cluster, driven through kubectl and helm; burst creates only the RayCluster and its objects."""

    provider = "kubernetes"
    kind = "onprem"
    default_cluster_name = "k8s"
    is_scheduler = True          # with Kueue, a queue the plan asks
    keeper_ends_lease = True     # the keeper beside the head deletes the RayCluster at the lease's end (24 h by default)
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

    def spec(self, name: str, placement: "Placement", lease_id: str, expires: int, context: str,
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
            name=object_prefix(name, lease_id), cluster_id=cluster_id_of(lease_id), namespace=site.namespace,
            labels={"burst-lease": lease_id, "burst-expires": str(expires), "burst-cluster": safe_name(name, 63)},
            ray_version=ray_version(), workers=workers, gpus_per_worker=per_worker, image=placement.image,
            node_selector=dict(site.node_selector), tolerations=tuple(t.manifest() for t in site.tolerations),
            local_queue=site.local_queue, bucket=bucket, pvc_size_gi=site.pvc_size_gi, storage_class=site.storage_class,
            expires=expires, idle_minutes=idle_minutes, pod_monitor=site.pod_monitor)

    def render(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> dict:
        from infra.byo_kubernetes import manifests, namespace_manifest

        site = placement.site
        expires = int(time.time() + 3600 * (lease.hours or 24.0))
        spec = self.spec(name, placement, "dry-run", expires, site.context or "(current context)", idle_minutes=lease.idle_minutes)
        objects = [namespace_manifest(spec.namespace), *manifests(spec, token="<generated at up, kept in the Secret>")]
        return {"provider": self.provider, "cluster": name, "context": site.context or "(current context)", "namespace": spec.namespace,
                "operator": f"KubeRay operator: used if its Deployment runs, else `helm install` of chart kuberay-operator "
                            f"{_chart_version()} into {spec.namespace} (marked as burst's, uninstalled by the last burst cluster to leave)",
                "kueue": {"local_queue": site.local_queue} if site.local_queue else None,
                "storage": spec.bucket or f"PersistentVolumeClaim {spec.claim_name} ({spec.pvc_size_gi} Gi) at {spec.mount_path}",
                "resources": objects, "hourly_usd": round(placement.hourly_usd, 4),
                "note": "the Namespace is created (labelled as burst's) only when it does not exist yet, and deleted by the last "
                        "burst cluster to leave it when nothing else is in it; down deletes only what up created"}

    # ------------------------------------------------------------------ lifecycle

    def up(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> tuple[ClusterHandle, bool]:
        from infra.byo_kubernetes import manifests, namespace_manifest

        self.check_prerequisites("burst up")
        site = placement.site
        context = site.context or current_context()
        lease_id = uuid.uuid4().hex
        expires = int(time.time() + 3600 * (lease.hours or 24.0))
        claim = ClusterHandle(name=name, provider=self.provider, cluster_id=cluster_id_of(lease_id), state="starting", region=site.name,
                              accelerator=site.accelerator, hourly_usd=placement.hourly_usd,
                              created=time.time(), expires=expires, starter_pid=os.getpid(), storage_uri="",
                              layout={"count": placement.count, "gpus": placement.count, "accelerator": site.accelerator},
                              outputs={"context": context, "namespace": site.namespace, "lease": lease_id, "created": []})
        existing = state.claim(claim)
        if existing is not None:
            return existing, False
        created: list[dict] = []
        token_path = state.cluster_dir(name) / "auth_token"
        try:
            kubectl(context, "version", "-o", "json", what="version (is the cluster reachable?)")
            spec = self.spec(name, placement, lease_id, expires, context, idle_minutes=lease.idle_minutes)
            if spec.local_queue and not has_crd(context, KUEUE_CRD):
                raise BurstError(f"the policy names Kueue LocalQueue {spec.local_queue!r}, but context {context} has no Kueue "
                                 f"(CRD {KUEUE_CRD}); remove onprem.local_queue or install Kueue", exit_code=2)
            if spec.pod_monitor and not has_crd(context, POD_MONITOR_CRD):
                raise BurstError(f"the policy asks for a PodMonitor (onprem.pod_monitor), but context {context} has no Prometheus Operator "
                                 f"(CRD {POD_MONITOR_CRD}); remove onprem.pod_monitor or install the Prometheus Operator", exit_code=2)
            namespace = read(context, "get", "namespace", site.namespace, "-o", "json", what=f"get namespace {site.namespace}")
            if namespace is None:  # NotFound, and only that: burst creates it, labelled as burst's (shared, no lease)
                report.say(f"creating namespace {site.namespace} on {context} (burst's: the last burst cluster to leave deletes it)")
                kubectl(context, "apply", "-f", "-", data=json.dumps(namespace_manifest(site.namespace)), what=f"apply namespace {site.namespace}")
            self._ensure_operator(context, site.namespace, report)
            ray_head.new_token(token_path)
            objects = manifests(spec, token_path.read_text().strip())
            self._check_not_taken(context, objects, lease_id)  # `kubectl apply` would take over someone else's object of such a name
            for obj in objects:  # one by one, each recorded before it is applied: a kill in between leaves nothing `down` cannot find
                created.append({"kind": obj["kind"], "name": obj["metadata"]["name"],
                                "namespace": obj["metadata"].get("namespace")})
                self._intend(claim, created)
                kubectl(context, "apply", "-f", "-", data=json.dumps(obj), what=f"apply {obj['kind']} {obj['metadata']['name']}")
            handle = claim.model_copy(update={"token_path": str(token_path), "storage_uri": self._storage_here(spec, context)})
            handle.outputs.update({"ray_cluster": spec.name, "head_service": spec.head_service, "created": created,
                                   "job_storage": spec.job_storage, "image": placement.image, "local_queue": spec.local_queue,
                                   "lease": lease_id})
            handle.layout.update({"workers": spec.workers, "gpus_per_worker": spec.gpus_per_worker})
            with state.locked():
                state.save(handle)
            self._wait_ready(handle, report, lease.wait or not spec.local_queue)
        except BaseException as exc:
            report.say(f"up failed; deleting what it created on {context}")
            left = self._delete(context, created)
            if left:  # the record stays, with what is still there, so that `burst down` finishes the job
                self._keep_for_down(claim, created, token_path)
                why = exc if isinstance(exc, BurstError) else f"creating cluster {name!r} on Kubernetes failed: {exc}"
                raise BurstError(f"{why}; and {len(left)} object(s) it created could not be deleted ({'; '.join(left)[:300]}): "
                                 f"`burst down {name}` deletes them", exit_code=1) from None
            self._release_shared(context, site.namespace, QUIET)
            token_path.unlink(missing_ok=True)
            state.release(claim)
            if isinstance(exc, BurstError):
                raise
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise BurstError(f"creating cluster {name!r} on Kubernetes failed: {exc}; what it created was deleted", exit_code=1) from None
        return state.load(ClusterHandle, name) or handle, True

    @staticmethod
    def _check_not_taken(context: Optional[str], objects: list[dict], lease_id: str) -> None:
        """Refuse to apply over an object of one of these names that is not this cluster's (another
        person's cluster, or the site's own): `kubectl apply` would silently take it over. One read
        of them all (`kubectl get KIND/NAME ... --ignore-not-found`)."""
        by_ns: dict[str, list[str]] = {}
        for obj in objects:
            by_ns.setdefault(obj["metadata"].get("namespace") or "", []).append(f"{obj['kind'].lower()}/{obj['metadata']['name']}")
        for ns, names in by_ns.items():
            raw = read(context, "get", *names, "--ignore-not-found", *(["-n", ns] if ns else []), "-o", "json",
                       what="get the objects up would apply")
            answer = json.loads(raw) if raw and raw.strip() else {}
            found = answer.get("items", []) if answer.get("kind") == "List" else ([answer] if answer else [])  # one found: kubectl may print it alone
            taken = next((o for o in found if owner_of(o) != lease_id), None)
            if taken is not None:
                owner = owner_of(taken)
                raise BurstError(f"{taken['kind']} {taken['metadata']['name']} already exists in namespace {ns or '-'} on {context} and is "
                                 + (f"another burst cluster's (lease {owner})" if owner else "not burst's")
                                 + "; nothing of it was touched: choose another --name", exit_code=1)

    @staticmethod
    def _keep_for_down(claim: ClusterHandle, created: list[dict], token_path: Path) -> None:
        """A failed `up` that could not delete all it made: its record stays (state stopping) naming
        every object, so that `burst down` deletes what is left, by name and lease."""
        with state.locked():
            current = state.load(ClusterHandle, claim.name)
            if current is None or current.cluster_id != claim.cluster_id:
                return
            current.state = "stopping"
            current.starter_pid = None
            current.token_path = str(token_path) if token_path.exists() else None
            current.outputs.update({"created": list(created), "failed_up": True})
            state.save(current)

    @staticmethod
    def _intend(claim: ClusterHandle, created: list[dict]) -> None:
        """Write ahead: what `up` is about to create goes into the cluster's record first (deleting one
        that was never made is a no-op: `kubectl delete --ignore-not-found`)."""
        with state.locked():
            current = state.load(ClusterHandle, claim.name)
            if current is None or current.cluster_id != claim.cluster_id:
                return
            claim.outputs.update({"created": list(created)})
            state.save(claim)

    def _storage_here(self, spec, context: str) -> str:
        """The run's storage as this machine reaches it: the bucket, or the claim through the head pod."""
        if spec.bucket:
            return spec.bucket
        from ..runtime import kube_storage

        return kube_storage.uri(context, spec.namespace, spec.name, spec.mount_path)

    def _ensure_operator(self, context: str, namespace: str, report: Reporter) -> None:
        """A KubeRay operator that runs: used; one that is there and does not run: one line; none
        (perhaps only its CRD, which Helm keeps after an uninstall): installed with Helm, marked as burst's first."""
        from infra.byo_kubernetes import operator_marker
        from infra.spec import KUBERAY_REPO

        deployments = operator_deployments(context)
        running = [d for d in deployments if int(d.get("status", {}).get("availableReplicas") or 0) > 0]
        if running:
            d = running[0]["metadata"]
            report.say(f"the KubeRay operator runs ({d.get('namespace')}/{d['name']}); using it")
            return
        if deployments:
            d = deployments[0]["metadata"]
            raise BurstError(f"the KubeRay operator {d.get('namespace')}/{d['name']} has no available replica, so nothing would start "
                             f"the RayCluster; see `kubectl --context={context} describe deployment -n {d.get('namespace')} {d['name']}`",
                             exit_code=1)
        crd = " (its CRD is there from an earlier install: Helm keeps CRDs)" if has_crd(context, KUBERAY_CRD) else ""
        report.say(f"installing the KubeRay operator (chart {_chart_version()}) into {namespace} on {context}{crd}")
        kubectl(context, "apply", "-f", "-", data=json.dumps(operator_marker(namespace, OPERATOR_RELEASE, _chart_version())),
                what="apply the operator's marker")  # before the install: a kill during it leaves the mark for `down`
        proc = run("helm", context, "upgrade", "--install", OPERATOR_RELEASE, "kuberay-operator", "--repo", KUBERAY_REPO,
                   "--version", _chart_version(), "--namespace", namespace, "--create-namespace", "--wait", "--timeout", "10m", timeout=900)
        if proc.returncode != 0:
            raise BurstError(f"helm could not install the KubeRay operator: {_last(proc)}", exit_code=1)

    # ------------------------------------------------------------------ waiting for the cluster

    def look(self, handle: ClusterHandle) -> tuple[str, str]:
        """Where the RayCluster stands: ("ready" | "queued" | "starting" | "failed", what Kubernetes says)."""
        context, ns, rc = handle.outputs["context"], handle.outputs["namespace"], handle.outputs["ray_cluster"]
        raw = read(context, "get", "raycluster", rc, "-n", ns, "-o", "json", what="get raycluster")
        if raw is None:
            return "failed", f"RayCluster {ns}/{rc} is gone"
        body = json.loads(raw)
        status = body.get("status", {})
        conditions = status.get("conditions", [])
        if status.get("state") == "ready" or any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            return "ready", f"RayCluster {ns}/{rc} is ready"
        if body.get("spec", {}).get("suspend") or status.get("state") == "suspended":
            return "queued", f"Kueue holds RayCluster {ns}/{rc} ({handle.outputs.get('local_queue') or 'no queue named'})"
        pods = items(context, "get", "pods", "-n", ns, "-l", f"ray.io/cluster={rc}", what="get the cluster's pods")
        for pod in pods:
            for cs in pod.get("status", {}).get("containerStatuses", []) + pod.get("status", {}).get("initContainerStatuses", []):
                waiting = cs.get("state", {}).get("waiting") or {}
                if waiting.get("reason") in IMAGE_ERRORS:
                    return "failed", (f"pod {pod['metadata']['name']}: {waiting['reason']}: "
                                      f"{(waiting.get('message') or cs.get('image') or '').strip()[:300]}")
        events = items(context, "get", "events", "-n", ns, what="get events")
        quota = [e for e in events if e.get("involvedObject", {}).get("name") == rc and "exceeded quota" in (e.get("message") or "")]
        if quota:
            return "failed", f"RayCluster {ns}/{rc}: {quota[-1]['message'].strip()[:300]}"
        pending = [pod for pod in pods if _unschedulable(pod)]
        if pending:
            names = {pod["metadata"]["name"] for pod in pending}
            mine = [e for e in events if e.get("involvedObject", {}).get("name") in names]
            scaling = [e for e in mine if e.get("reason") == "TriggeredScaleUp"]
            refused = [e for e in mine if e.get("reason") == "NotTriggerScaleUp"]
            why = _unschedulable(pending[0])
            if scaling:
                return "starting", f"nodes are being added for {len(pending)} pod(s): {scaling[-1].get('message', '').strip()[:200]}"
            if refused:
                return "failed", f"pod {pending[0]['metadata']['name']} cannot be scheduled ({why}) and the autoscaler adds no node: " \
                                 f"{refused[-1].get('message', '').strip()[:200]}"
            return "unschedulable", f"pod {pending[0]['metadata']['name']} cannot be scheduled: {why}"
        return "starting", f"RayCluster {ns}/{rc}: {status.get('state') or 'pods starting'}"

    def _wait_ready(self, handle: ClusterHandle, report: Reporter, wait: bool) -> None:
        """Until the RayCluster is ready. Queued (Kueue) and scaling clusters wait, bounded by the
        lease (without --wait, a queued one is said and left to `burst status`); an error that will
        not resolve by itself fails at once, with Kubernetes' reason."""
        ns, rc = handle.outputs["namespace"], handle.outputs["ray_cluster"]
        said, unschedulable_since = None, None
        while True:
            where, detail = self.look(handle)
            if where == "ready":
                self._mark_running(handle)
                report.say(f"RayCluster {ns}/{rc} is ready on {handle.outputs['context']}")
                return
            if where == "failed":
                raise BurstError(f"{detail}; {self.head_hint}", exit_code=1)
            if where == "unschedulable":
                unschedulable_since = unschedulable_since or time.time()
                if time.time() - unschedulable_since > UNSCHEDULABLE_GRACE_S:
                    raise BurstError(f"{detail}, and no autoscaler added a node in {UNSCHEDULABLE_GRACE_S:.0f} s; "
                                     "ask for fewer GPUs, or for nodes that exist (onprem.node_selector)", exit_code=1)
            else:
                unschedulable_since = None
            self._note_waiting(handle, where, detail)
            if where == "queued" and not wait:
                report.say(f"{detail}; `burst status` shows when it runs, `burst up --wait` waits")
                return
            if detail != said:
                report.say(f"waiting: {detail}")
                said = detail
            if handle.expires is not None and time.time() > handle.expires:
                raise BurstError(f"RayCluster {ns}/{rc} did not start within its lease ({detail}); ask again with a longer --hours",
                                 exit_code=1)
            time.sleep(POLL_S)

    @staticmethod
    def _note_waiting(handle: ClusterHandle, where: str, detail: str) -> None:
        """What the cluster waits for, in its record: `burst status` shows it."""
        def waiting(current: ClusterHandle) -> bool:
            if current.outputs.get("waiting") == detail:
                return False  # said already: nothing to write
            current.outputs["waiting"] = detail
            return True

        _update_record(handle, waiting)

    @staticmethod
    def _mark_running(handle: ClusterHandle) -> None:
        head = _head_pod_of(handle)  # the head the run will start on: a later one is a new Ray cluster (``head_lost``)

        def running(current: ClusterHandle) -> bool:
            current.state = "running"
            current.outputs.pop("waiting", None)
            if head is not None:
                current.outputs["head_pod"] = {"uid": head.get("metadata", {}).get("uid"), "restarts": kube_head.restarts(head)}
            return True

        _update_record(handle, running)

    # ------------------------------------------------------------------ a lost head, in the API server's words

    def is_gone(self, handle: ClusterHandle) -> bool:
        """The API server says the cluster's head is lost (its RayCluster or head pod gone, the pod
        failed, replaced or restarted): asked without the head, so a controller moves the run at once.
        False when the API server does not answer (then only the blind grace can tell)."""
        return handle.state == "running" and bool(handle.outputs.get("ray_cluster")) and self._head_verdict(handle) is not None

    def stopped_reason(self, handle: ClusterHandle) -> str:
        return self._head_verdict(handle) or super().stopped_reason(handle)

    def _head_verdict(self, handle: ClusterHandle) -> Optional[str]:
        context, ns, rc = handle.outputs["context"], handle.outputs["namespace"], handle.outputs["ray_cluster"]
        try:
            if read(context, "get", "raycluster", rc, "-n", ns, "-o", "name", what="get raycluster") is None:
                return f"RayCluster {ns}/{rc} is gone"
            pods = _head_pods(handle)
        except BurstError:
            return None
        return kube_head.head_lost(pods, handle.outputs.get("head_pod") or {})

    # ------------------------------------------------------------------ taking it down

    def _delete(self, context: str, created: list[dict]) -> list[str]:
        """Delete the cluster's own objects, newest first (never a namespace: see ``_release_shared``); what could not be deleted."""
        left = []
        for obj in reversed(created):
            if obj["kind"] == "Namespace":  # recorded by burst before 0.x: the namespace is shared now, released by label
                continue
            args = ["delete", obj["kind"].lower(), obj["name"], "--ignore-not-found", "--wait=true", "--timeout=300s"]
            if obj.get("namespace"):
                args += ["-n", obj["namespace"]]
            proc = run("kubectl", context, *args, timeout=400)
            if proc.returncode != 0:
                left.append(f"{obj['kind']} {obj['name']}: {_last(proc)}")
        return left

    def _release_shared(self, context: str, namespace: str, report: Reporter) -> list[str]:
        """What burst created for all its clusters, removed by the last one to leave: the operator
        release burst installed (its marker beside it) once no RayCluster is left in the cluster,
        then the namespace burst created once nothing but Kubernetes' own objects is in it."""
        from infra.byo_kubernetes import OPERATOR_MARKER

        left = []
        try:
            markers = items(context, "get", "configmaps", "-A", "-l", "app.kubernetes.io/managed-by=burst,burst-part=kuberay-operator",
                            what="get burst's operator marker")
            if markers:
                others = items(context, "get", "rayclusters.ray.io", "-A", what="get rayclusters")
                if others:
                    report.say(f"the KubeRay operator burst installed stays: {len(others)} RayCluster(s) still use it")
                else:
                    for marker in markers:
                        ns = marker["metadata"]["namespace"]
                        release = marker.get("data", {}).get("release", OPERATOR_RELEASE)
                        proc = run("helm", context, "uninstall", release, "--namespace", ns, "--wait")
                        if proc.returncode != 0 and "not found" not in _last(proc):
                            left.append(f"helm release {release}: {_last(proc)}")
                            continue
                        kubectl(context, "delete", "configmap", OPERATOR_MARKER, "-n", ns, "--ignore-not-found", what="delete the operator's marker")
                        report.say(f"uninstalled the KubeRay operator burst installed in {ns} (Helm keeps its CRDs)")
            ns_raw = read(context, "get", "namespace", namespace, "-o", "json", what=f"get namespace {namespace}")
            if ns_raw is not None and burst_owns(json.loads(ns_raw)):
                inside = [o for o in items(context, "get", ",".join(namespaced_kinds(context)), "-n", namespace,
                                           what=f"get what is in {namespace}")
                          if (o.get("kind"), o["metadata"]["name"]) not in KEPT_IN_NAMESPACE
                          and o.get("kind") not in NOT_CONTENT and o.get("type") != "kubernetes.io/service-account-token"]
                if inside:
                    report.say(f"namespace {namespace} stays: {len(inside)} object(s) of others are in it")
                else:
                    kubectl(context, "delete", "namespace", namespace, "--ignore-not-found", "--wait=true", "--timeout=300s",
                            what=f"delete namespace {namespace}")
                    report.say(f"deleted namespace {namespace}, which burst created and nothing uses now")
        except BurstError as exc:
            left.append(str(exc))
        return left

    def down(self, handle: ClusterHandle, report: Reporter = QUIET) -> None:
        """Delete what ``up`` created, check that nothing with the lease's label is left, release
        what the last burst cluster leaves behind, forget the handle."""
        self.check_prerequisites("burst down")
        context, ns = handle.outputs.get("context"), handle.outputs.get("namespace")
        with state.locked():
            handle.state = "stopping"
            state.save(handle)
        created = handle.outputs.get("created", [])
        left = self._delete(context, created)
        lease = handle.outputs.get("lease")
        if lease and not left:
            proc = run("kubectl", context, "get", "rayclusters.ray.io,secrets,persistentvolumeclaims", "-n", ns, "-l",
                       f"burst-lease={lease}", "-o", "name")
            if proc.returncode == 0 and proc.stdout.strip():
                left += proc.stdout.split()
        if not left:
            left += self._release_shared(context, ns, report)
        if left:
            raise BurstError(f"cluster {handle.name!r}: not deleted on {context}: {'; '.join(left)}; fix it and run `burst down {handle.name}` again",
                             exit_code=1)
        with state.locked():
            state.delete(ClusterHandle, handle.name)
        token = state.own_token(handle)  # never a file a hand edit named
        if token is not None:
            token.unlink(missing_ok=True)
        report.say(f"deleted {len([o for o in created if o['kind'] != 'Namespace'])} object(s) burst created on {context}")

    def is_alive(self, handle: ClusterHandle, timeout: float = 2.0) -> bool:
        return handle.state == "running"

    def describe_state(self, handle: ClusterHandle) -> str:
        if handle.state == "starting" and handle.outputs.get("ray_cluster") and shutil.which("kubectl"):
            where, detail = self.look(handle)  # Kueue may have admitted it since, or its nodes come up
            if where == "ready":
                self._mark_running(handle)
                return "running"
            self._note_waiting(handle, where, detail)
            return f"{'failed' if where == 'failed' else 'waiting'} ({detail})"
        return handle.state

    def not_ready(self, handle: ClusterHandle) -> str:
        if handle.state == "starting":
            return (f"cluster {handle.name!r} is waiting ({handle.outputs.get('waiting') or 'for Kueue or its nodes'}); "
                    "`burst status` shows when it runs")
        return super().not_ready(handle)

    def answers_here(self, handle: ClusterHandle) -> bool:
        return False

    @contextmanager
    def reach(self, handle: ClusterHandle) -> Iterator[ClusterHandle]:
        self.check_prerequisites("reach the cluster")
        with tunnel(lambda port: self._port_forward(handle, port, 8265), handle.name, self.head_hint) as url:
            yield handle.model_copy(update={"dashboard_url": url})

    def _port_forward(self, handle: ClusterHandle, local_port: int, remote_port: int) -> list[str]:
        context, ns, svc = handle.outputs["context"], handle.outputs["namespace"], handle.outputs["head_service"]
        return ["kubectl", f"--context={context}", "port-forward", "-n", ns, f"service/{svc}", f"{local_port}:{remote_port}", "--address=127.0.0.1"]

    def forward_command(self, handle: ClusterHandle, local_port: int, remote_port: int, workdir: Path) -> Optional[list[str]]:
        self.check_prerequisites("reach the cluster")
        return self._port_forward(handle, local_port, remote_port)

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


def _update_record(handle: ClusterHandle, change) -> None:
    """Change this cluster's saved record under the state lock (not a newer cluster of its name);
    ``change`` says whether it changed anything to save."""
    with state.locked():
        current = state.load(ClusterHandle, handle.name)
        if current is not None and current.cluster_id == handle.cluster_id and change(current):
            state.save(current)


def _head_pods(handle: ClusterHandle) -> list[dict]:
    """The RayCluster's head pods as the API server lists them now, those being deleted included."""
    context, ns, rc = handle.outputs["context"], handle.outputs["namespace"], handle.outputs["ray_cluster"]
    raw = read(context, "get", "pods", "-n", ns, "-l", f"ray.io/cluster={rc},ray.io/node-type=head", "-o", "json", what="get the head pod")
    return json.loads(raw).get("items", []) if raw else []


def _head_pod_of(handle: ClusterHandle) -> Optional[dict]:
    """The RayCluster's head pod now, not one being deleted (None: none, or no answer)."""
    try:
        pods = [p for p in _head_pods(handle) if not p.get("metadata", {}).get("deletionTimestamp")]
    except BurstError:
        return None
    return pods[0] if pods else None


def _unschedulable(pod: dict) -> str:
    """The scheduler's message for a pod it could not place ("0/3 nodes are available: 3 Insufficient
    nvidia.com/gpu"), or "" for a pod that is placed or not yet looked at."""
    if pod.get("status", {}).get("phase") != "Pending":
        return ""
    for c in pod.get("status", {}).get("conditions", []):
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return (c.get("message") or "Unschedulable").strip()[:300]
    return ""
