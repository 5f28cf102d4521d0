"""A Kubernetes cluster burst did not create (`--provider kubernetes`): the manifests it applies are
valid against the pinned Kubernetes and KubeRay schemas, the kubectl and helm calls it makes
(recorded by stand-ins, ``tests/fakes/kube``) create and delete exactly burst's objects, the plan
weighs the cluster against the clouds and reads a recorded Kueue queue, and the claim storage is
reached through the head pod."""

import json
import re
from contextlib import contextmanager
import os
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import psutil
import pytest

from tests.support import kube_schemas
from tests.support.kube_site import FAKES, SITE, calls, left_on, site_operator

ROOT = Path(__file__).resolve().parents[3]
SCHEMAS = ROOT / "tests" / "schemas"


def _strict(node):
    """A CRD schema as the API server applies it: an unknown field is pruned (silently dropped), so here it is an error."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and not node.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


VALIDATORS = {
    **{kind: kube_schemas.validator(kind) for kind in ("Namespace", "Secret", "PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding")},
    "RayCluster": jsonschema.Draft7Validator(_strict(json.loads((SCHEMAS / "kuberay-v1.5.1" / "raycluster-v1.json").read_text()))),
}


def invalid(obj: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in VALIDATORS[obj["kind"]].iter_errors(obj)]


def burst(*args, home, fake=None, timeout=120):
    env = {**os.environ, "BURST_HOME": str(home)}
    if fake is not None:
        env.update(FAKE_KUBE=str(fake), PATH=f"{FAKES}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


@pytest.fixture
def site(tmp_path):
    def write(extra: str = "") -> Path:
        path = tmp_path / "site.yaml"
        path.write_text(SITE % extra)
        return path
    return write


@pytest.fixture
def fake(tmp_path):
    root = tmp_path / "cluster"
    root.mkdir()
    return root


@pytest.mark.parametrize("extra, gpus", [("", 8), (", local_queue: gpu-queue", 16), (", storage: gs://lab-bucket/burst", 4)])
def test_the_dry_run_renders_schema_valid_manifests_sized_by_the_plan(tmp_path, site, extra, gpus):
    proc = burst("up", "--provider", "kubernetes", "--context", "lab-2", "--namespace", "hep", "--policy", str(site(extra)),
                 "--gpus", str(gpus), "--dry-run", "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["context"], out["namespace"]) == ("lab-2", "hep")  # the flags win over the policy's context and namespace
    objects = {o["kind"]: o for o in out["resources"]}
    for obj in out["resources"]:
        assert invalid(obj) == [], f"{obj['kind']}: {invalid(obj)}"
    rc = objects["RayCluster"]
    assert rc["apiVersion"] == "ray.io/v1" and rc["metadata"]["namespace"] == "hep"
    (group,) = rc["spec"]["workerGroupSpecs"]
    pod = group["template"]["spec"]
    assert group["replicas"] * int(group["rayStartParams"]["num-gpus"]) == gpus and group["replicas"] == gpus // 4
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    head = rc["spec"]["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP" and head["rayStartParams"]["dashboard-host"] == "127.0.0.1"
    for container in [head["template"]["spec"]["containers"][0], pod["containers"][0]]:
        env = {e["name"]: e for e in container["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == objects["Secret"]["metadata"]["name"]
    assert all(o["metadata"]["labels"]["burst-cluster"] == "k8s" for o in out["resources"] if o["kind"] != "Namespace")
    (namespace,) = [o for o in out["resources"] if o["kind"] == "Namespace"]  # shared by burst's clusters: burst's label, no lease
    assert namespace["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "burst"}
    if "local_queue" in extra:
        assert rc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue" and rc["spec"]["suspend"] is True
    else:
        assert "suspend" not in rc["spec"]
    if "storage" in extra:
        assert "PersistentVolumeClaim" not in objects and "volumes" not in pod
        assert pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][3].startswith("gs://lab-bucket/burst/notices/")
    else:
        claim = objects["PersistentVolumeClaim"]["metadata"]["name"]
        assert pod["volumes"] == [{"name": "burst-storage", "persistentVolumeClaim": {"claimName": claim}}]
        assert pod["containers"][0]["volumeMounts"] == [{"name": "burst-storage", "mountPath": "/mnt/burst"}]


def test_the_schemas_catch_what_the_api_server_would_refuse_or_silently_drop(tmp_path, site):
    out = json.loads(burst("up", "--provider", "kubernetes", "--policy", str(site()), "--dry-run", "--json", home=tmp_path).stdout)
    objects = {o["kind"]: o for o in out["resources"]}
    rc = json.loads(json.dumps(objects["RayCluster"]))
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelectr"] = {"a": "b"}  # a typo KubeRay's API would prune
    rc["spec"]["workerGroupSpecs"][0]["replicas"] = "2"
    errors = invalid(rc)
    assert any("nodeSelectr" in e for e in errors) and any("replicas" in e for e in errors)
    claim = json.loads(json.dumps(objects["PersistentVolumeClaim"]))
    claim["spec"]["accessModes"] = "ReadWriteMany"  # not a list
    assert invalid(claim)


@pytest.mark.parametrize("args, line", [
    (["up", "--provider", "kubernetes", "--context", "-oProxy", "--dry-run"], "--context '-oProxy' is not allowed"),
    (["up", "--provider", "kubernetes", "--namespace", "Physics Dept", "--dry-run"], "--namespace 'Physics Dept' is not allowed"),
    (["up", "--provider", "gcp", "--context", "lab", "--accelerator", "V100", "--gpus", "8", "--region", "us-central1", "--dry-run"],
     "--context and --namespace choose where in a Kubernetes cluster burst did not create; gcp is not one"),
    (["up", "--provider", "kubernetes", "--gpus", "64", "--dry-run"], "--gpus 64: the on-prem site lab-k8s offers 16 GPUs to one run"),
])
def test_bad_kubernetes_flags_are_one_line(tmp_path, site, args, line):
    proc = burst(*args, "--policy", str(site()), home=tmp_path)
    assert proc.returncode == 2 and line in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_policy_value_that_would_reach_kubectl_or_a_manifest_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("providers: [kubernetes]\nonprem: {scheduler: kubernetes, accelerator: V100, gpus: 4, node_selector: {\"a b\": x}}\n")
    proc = burst("policy", "check", str(bad), home=tmp_path)
    assert proc.returncode == 2 and "onprem.node_selector key 'a b' is not allowed" in proc.stderr


def test_up_installs_the_operator_it_lacks_applies_burst_s_objects_and_down_deletes_only_those(tmp_path, site, fake):
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))  # the namespace is the site's: never created nor deleted by burst
    home = tmp_path / "home"
    policy = site()
    policy.write_text(policy.read_text() + "budget_usd: 5000\n")
    proc = burst("up", "--provider", "kubernetes", "--policy", str(policy), "--gpus", "8", "--name", "lab", "--json", home=home, fake=fake)
    assert proc.returncode == 0, proc.stderr
    handle = json.loads(proc.stdout)
    rc = handle["outputs"]["ray_cluster"]
    assert rc == f"burst-lab-{handle['cluster_id']}"  # the name and the cluster's id: another person's `lab` is another object
    assert handle["state"] == "running" and handle["outputs"]["context"] == "lab"
    assert handle["budget_usd"] == 5000  # what `burst train` on it is held to (the local target's own test: test_budget_guard_...)
    assert handle["storage_uri"] == f"kube://lab/physics/{rc}/mnt/burst" and handle["outputs"]["job_storage"] == "/mnt/burst"
    assert oct(os.stat(handle["token_path"]).st_mode & 0o777) == "0o600"
    recorded = calls(fake)
    assert all(any(a == "--context=lab" or a == "--kube-context=lab" for a in c["argv"]) for c in recorded)  # always the pinned context
    (install,) = [c["argv"] for c in recorded if c["tool"] == "helm"]
    assert install[install.index("--version") + 1] == "1.5.1" and "kuberay-operator" in install
    applied = [json.loads(c["stdin"]) for c in recorded if "apply" in c["argv"]]
    marker = applied.pop(0)  # burst marks the operator as its own before installing it
    assert (marker["kind"], marker["metadata"]["name"], marker["metadata"]["namespace"]) == ("ConfigMap", "burst-kuberay-operator", "physics")
    assert [c["tool"] for c in recorded].index("helm") > next(i for i, c in enumerate(recorded) if "apply" in c["argv"])
    assert [o["kind"] for o in applied] == ["Secret", "PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding",
                                            "RayCluster"]  # no Namespace: it was there
    for obj in applied:
        assert invalid(obj) == []
    token = Path(handle["token_path"]).read_text().strip()
    assert applied[0]["stringData"]["auth_token"] == token and token not in json.dumps(handle)
    from burst.runtime import notice
    from infra import keeper

    # your own Kubernetes has a lease too: the keeper beside the head deletes this RayCluster at its end, and may do nothing else
    head = applied[-1]["spec"]["headGroupSpec"]["template"]["spec"]
    (side,) = [c for c in head["containers"] if c["name"] == "burst-keeper"]
    assert side["command"][:3] == ["python", "-c", keeper.source()] and head["serviceAccountName"] == f"{rc}-keeper"
    args = side["command"][3:]
    assert args[:6] == ["--end", "kube", "--namespace", "physics", "--name", rc]
    assert float(args[args.index("--expires") + 1]) == handle["expires"]
    assert applied[3]["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "resourceNames": [rc], "verbs": ["get", "delete"]}]
    assert applied[4]["subjects"] == [{"kind": "ServiceAccount", "name": f"{rc}-keeper", "namespace": "physics"}]

    for group in applied[-1]["spec"]["workerGroupSpecs"]:  # a worker pod's preStop posts where this cluster's runs read
        hook = group["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
        assert hook[3] == notice.root("/mnt/burst", handle["cluster_id"])

    (fake / "calls.jsonl").unlink()
    proc = burst("down", "lab", home=home, fake=fake)
    assert proc.returncode == 0, proc.stderr
    deleted = [c["argv"] for c in calls(fake) if "delete" in c["argv"]]
    assert [(a[a.index("delete") + 1], a[a.index("delete") + 2]) for a in deleted] == [
        ("raycluster", rc), ("rolebinding", f"{rc}-keeper"), ("role", f"{rc}-keeper"), ("serviceaccount", f"{rc}-keeper"),
        ("persistentvolumeclaim", f"{rc}-storage"), ("secret", f"{rc}-burst-ray-auth"), ("configmap", "burst-kuberay-operator")]
    assert any(c["tool"] == "helm" and "uninstall" in c["argv"] for c in calls(fake))  # burst installed the operator: the last to leave removes it
    assert left_on(fake) == [] and not (home / "clusters" / "lab.json").exists()
    assert json.loads((fake / "crds.json").read_text()) == ["rayclusters.ray.io"]  # Helm keeps the CRD
    assert json.loads((fake / "namespaces.json").read_text()) == ["physics"]  # the site's namespace stays
    assert not Path(handle["token_path"]).exists()


def test_a_site_with_the_prometheus_operator_gets_a_pod_monitor_and_one_without_it_a_line_before_anything_is_created(tmp_path, site, fake):
    """``onprem.pod_monitor``: the site's Prometheus scrapes every Ray pod of the cluster by the
    port KubeRay exports Ray's metrics on; a cluster without the Prometheus Operator's CRD is told
    so before anything is applied (kubectl itself would refuse the PodMonitor half-way)."""
    policy = site(", pod_monitor: true")
    out = json.loads(burst("up", "--provider", "kubernetes", "--policy", str(policy), "--dry-run", "--json", home=tmp_path).stdout)
    (monitor,) = [o for o in out["resources"] if o["kind"] == "PodMonitor"]
    (rc,) = [o for o in out["resources"] if o["kind"] == "RayCluster"]
    assert invalid(rc) == []
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["namespace"] == rc["metadata"]["namespace"]
    assert monitor["spec"]["selector"] == {"matchLabels": {"ray.io/cluster": rc["metadata"]["name"]}}
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    pods = [rc["spec"]["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in rc["spec"]["workerGroupSpecs"])]
    for pod in pods:  # the port the monitor names, on every Ray container
        assert {"containerPort": 8080, "name": "metrics"} in pod["containers"][0]["ports"]

    site_operator(fake)
    home = tmp_path / "home"
    proc = burst("up", "--provider", "kubernetes", "--policy", str(policy), "--name", "lab", home=home, fake=fake)
    assert proc.returncode == 2 and "has no Prometheus Operator (CRD podmonitors.monitoring.coreos.com)" in proc.stderr
    assert "Traceback" not in proc.stderr and left_on(fake) == ["ray-system_deployment_kuberay-operator"]
    assert not (home / "clusters" / "lab.json").exists()

    crds = json.loads((fake / "crds.json").read_text())
    (fake / "crds.json").write_text(json.dumps(crds + ["podmonitors.monitoring.coreos.com"]))
    proc = burst("up", "--provider", "kubernetes", "--policy", str(policy), "--name", "lab", home=home, fake=fake)
    assert proc.returncode == 0, proc.stderr
    assert any(re.fullmatch(r"physics_podmonitor_burst-lab-[0-9a-f]{12}-metrics", o) for o in left_on(fake)), left_on(fake)
    assert burst("down", "lab", home=home, fake=fake).returncode == 0
    assert left_on(fake) == ["ray-system_deployment_kuberay-operator"]


def test_a_custom_resource_without_its_crd_is_refused_as_kubectl_refuses_it(fake):
    """The stand-in's unkind part: ``kubectl apply`` of a kind the API server does not serve."""
    env = {**os.environ, "FAKE_KUBE": str(fake), "PATH": f"{FAKES}:{os.environ['PATH']}"}
    body = json.dumps({"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": {"name": "m", "namespace": "physics"}})
    proc = subprocess.run(["kubectl", "apply", "-f", "-"], input=body, capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ['resource mapping not found for name: "m" namespace: "physics" from "STDIN": no matches for kind '
                                        '"PodMonitor" in version "monitoring.coreos.com/v1"', "ensure CRDs are installed first"]


def test_an_up_killed_between_two_applies_leaves_down_everything_to_delete(tmp_path, site, fake):
    """`burst up` SIGKILLed the moment it applies the RayCluster (the objects before it exist, the
    operator is installed): every object was recorded before it was applied, so `burst down` deletes
    all of them and the operator, and nothing of burst's is left on the cluster."""
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    killer = tmp_path / "killer"
    killer.mkdir()
    (killer / "kubectl").write_text(f"""#!{sys.executable}
import os, signal, subprocess, sys
data = sys.stdin.read() if "-f" in sys.argv else None
if "apply" in sys.argv and data and '"kind": "RayCluster"' in data:
    os.kill(os.getppid(), signal.SIGKILL)  # the laptop dies mid-`up`
    sys.exit(1)
sys.exit(subprocess.run([{str(FAKES / "kubectl")!r}, *sys.argv[1:]], input=data, text=True).returncode)
""")
    (killer / "kubectl").chmod(0o755)
    home = tmp_path / "home"
    env = {**os.environ, "BURST_HOME": str(home), "FAKE_KUBE": str(fake), "PATH": f"{killer}:{FAKES}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "8",
                           "--name", "lab"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == -9, proc.stderr
    left = sorted(p.name for p in (fake / "objects").glob("*.json"))
    assert left and not any("raycluster" in n.lower() for n in left)  # the objects before the RayCluster exist
    handle = json.loads((home / "clusters" / "lab.json").read_text())
    assert handle["state"] == "starting" and [o["kind"] for o in handle["outputs"]["created"]][-1] == "RayCluster"
    down = burst("down", "lab", home=home, fake=fake)
    assert down.returncode == 0, down.stderr
    assert not list((fake / "objects").glob("*.json")) and not (home / "clusters" / "lab.json").exists()
    assert any(c["tool"] == "helm" and "uninstall" in c["argv"] for c in calls(fake))  # the operator up installed goes too


def test_an_operator_that_was_there_stays_and_a_namespace_burst_made_goes_with_the_last_cluster(tmp_path, site, fake):
    site_operator(fake)
    home = tmp_path / "home"
    assert burst("up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "4", "--name", "lab", home=home, fake=fake).returncode == 0
    assert not any(c["tool"] == "helm" for c in calls(fake))
    applied = [json.loads(c["stdin"]) for c in calls(fake) if "apply" in c["argv"]]
    assert applied[0]["kind"] == "Namespace" and applied[0]["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "burst"}  # absent: burst's
    assert burst("down", "lab", home=home, fake=fake).returncode == 0
    assert not any(c["tool"] == "helm" for c in calls(fake))  # never the operator it found
    assert left_on(fake) == ["ray-system_deployment_kuberay-operator"]  # the namespace burst made went with its last cluster


def test_a_failed_apply_deletes_what_up_created_and_gives_the_name_back(tmp_path, site, fake):
    site_operator(fake)
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    (fake / "fail-apply-RayCluster").write_text("")
    home = tmp_path / "home"
    proc = burst("up", "--provider", "kubernetes", "--policy", str(site()), "--name", "lab", home=home, fake=fake)
    assert proc.returncode == 1 and re.search(r"kubectl apply RayCluster burst-lab-[0-9a-f]{12} failed on context lab", proc.stderr)
    assert len([x for x in proc.stderr.splitlines() if x.startswith("error")]) == 1 and "Traceback" not in proc.stderr
    assert left_on(fake) == ["ray-system_deployment_kuberay-operator"]  # the Secret and the claim applied before it are gone
    assert not (home / "clusters" / "lab.json").exists()


def test_with_kueue_up_returns_queued_and_status_sees_the_admission(tmp_path, site, fake):
    (fake / "crds.json").write_text(json.dumps(["localqueues.kueue.x-k8s.io"]))
    site_operator(fake)
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    home = tmp_path / "home"
    proc = burst("up", "--provider", "kubernetes", "--policy", str(site(", local_queue: gpu-queue")), "--name", "lab", home=home, fake=fake)
    assert proc.returncode == 0 and re.search(r"Kueue holds RayCluster physics/burst-lab-[0-9a-f]{12} \(gpu-queue\)", " ".join((proc.stderr + proc.stdout).split()))
    assert json.loads((home / "clusters" / "lab.json").read_text())["state"] == "starting"
    status = json.loads(burst("status", "--json", home=home, fake=fake).stdout)
    (waiting,) = [c["state"] for c in status["clusters"]]
    assert re.fullmatch(r"waiting \(Kueue holds RayCluster physics/burst-lab-[0-9a-f]{12} \(gpu-queue\)\)", waiting), waiting
    (fake / "admitted").write_text("")  # Kueue admits the RayCluster
    status = json.loads(burst("status", "--json", home=home, fake=fake).stdout)
    assert [c["state"] for c in status["clusters"]] == ["running"]
    assert burst("down", "lab", home=home, fake=fake).returncode == 0


def _kueue(fake: Path, pending: int, used: int, quota: int = 32) -> None:
    (fake / "crds.json").write_text(json.dumps(["rayclusters.ray.io", "localqueues.kueue.x-k8s.io"]))
    (fake / "kueue").mkdir(exist_ok=True)
    (fake / "kueue" / "localqueue-gpu-queue.json").write_text(json.dumps({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "gpu-queue", "namespace": "physics"},
        "spec": {"clusterQueue": "lab-gpus"}, "status": {"pendingWorkloads": 0, "admittedWorkloads": 2}}))
    (fake / "kueue" / "clusterqueue-lab-gpus.json").write_text(json.dumps({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "lab-gpus"},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [{"name": "a100", "resources": [
            {"name": "cpu", "nominalQuota": 256}, {"name": "nvidia.com/gpu", "nominalQuota": quota}]}]}]},
        "status": {"pendingWorkloads": pending, "admittedWorkloads": 3,
                   "flavorsUsage": [{"name": "a100", "resources": [{"name": "cpu", "total": 40}, {"name": "nvidia.com/gpu", "total": used}]}]}}))


def test_the_plan_reads_kueue_and_weighs_the_cluster_against_the_clouds(tmp_path, site, fake):
    policy = site(", local_queue: gpu-queue, queue_wait_hours: 6")
    # both sides in float32: under auto, the clouds' V100s in mixed float16 (x2.12, derived) would
    # outrun the site's A100s in bfloat16 (x1.12) and change what this test weighs
    policy.write_text(policy.read_text() + "precision: float32\n")
    _kueue(fake, pending=0, used=8)
    plan = json.loads(burst("plan", "--policy", str(policy), "--json", "--all", home=tmp_path, fake=fake).stdout)
    k8s = [c for c in plan["candidates"] if c["provider"] == "kubernetes"]
    assert k8s and {c["queue_source"] for c in k8s} == {"kubernetes"} and {c["queue_wait_h"] for c in k8s} == {0.0}
    assert any(c["provider"] == "gcp" for c in plan["candidates"])  # weighed against the clouds
    assert plan["choice"]["provider"] == "kubernetes"  # $1.2/GPU-h, no wait, 50 gCO2/kWh: the site wins
    assert any("Kueue physics/gpu-queue -> lab-gpus: 0 pending, 8 of 32 GPUs in use; 16 fit now" in r for r in k8s[0]["reasons"])

    _kueue(fake, pending=5, used=32)  # the queue is full: the policy's wait, with the queue's state as the reason
    plan = json.loads(burst("plan", "--policy", str(policy), "--json", "--all", home=tmp_path, fake=fake).stdout)
    k8s = [c for c in plan["candidates"] if c["provider"] == "kubernetes"]
    assert {c["queue_source"] for c in k8s} == {"policy"} and {c["queue_wait_h"] for c in k8s} == {6.0}
    assert any("5 pending, 32 of 32 GPUs in use" in r for r in k8s[0]["reasons"])


def test_the_claim_is_read_and_written_through_the_head_pod(tmp_path, fake, monkeypatch):
    from burst.runtime import kube_storage, storage

    monkeypatch.setenv("FAKE_KUBE", str(fake))
    monkeypatch.setenv("PATH", f"{FAKES}:{os.environ['PATH']}")
    root = kube_storage.uri("lab/ctx:1", "physics", "burst-lab", "/mnt/burst")
    assert kube_storage.KubePath.parse(root) == kube_storage.KubePath("lab/ctx:1", "physics", "burst-lab", "/mnt/burst")
    stop = storage.join(root, "runs", "r1", "STOP")
    assert not storage.exists(stop)
    storage.write_text(stop, "budget\n")
    assert storage.exists(stop) and storage.read_text(stop) == "budget\n"
    assert (fake / "pvc" / "runs" / "r1" / "STOP").read_text() == "budget\n"  # on the claim, through `kubectl exec`
    (fake / "pvc" / "runs" / "r1" / "report").mkdir()
    (fake / "pvc" / "runs" / "r1" / "report" / "metrics.json").write_text("{}")
    assert storage.tree_stats(storage.join(root, "runs", "r1")) == (2, len("budget\n") + 2)  # files and bytes, counted in the pod
    storage.copy_dir(storage.join(root, "runs", "r1"), str(tmp_path / "here"))  # results: `kubectl cp`
    assert (tmp_path / "here" / "report" / "metrics.json").read_text() == "{}"
    storage.remove(stop)
    assert not storage.exists(stop)
    assert all(c["argv"][0] == "--context=lab/ctx:1" for c in calls(fake))


@contextmanager
def cpu_site(tmp_path: Path, fake: Path):
    """A stand-in Kubernetes site of CPU workers whose RayCluster head is a real Ray head on this
    machine (the port-forward stand-in proxies to it), the KubeRay CRD there and the namespace the
    site's: (home, policy, the head's handle, PATH for the stand-ins, the site's bucket directory)."""
    head_home, home = tmp_path / "head-home", tmp_path / "home"
    bucket = tmp_path / "bucket"
    env_path = f"{Path(sys.executable).parent}:{FAKES}:{os.environ['PATH']}"  # the job's `python` is this one (an image would carry it)
    assert subprocess.run([sys.executable, "-m", "burst.cli", "up", "--provider", "local", "--name", "rayhead", "--cpus", "2"], timeout=180,
                          env={**os.environ, "BURST_HOME": str(head_home), "PATH": env_path}, capture_output=True).returncode == 0
    head = json.loads((head_home / "clusters" / "rayhead.json").read_text())
    try:
        site_operator(fake)
        (fake / "namespaces.json").write_text(json.dumps(["physics"]))
        policy = tmp_path / "cpu-site.yaml"
        policy.write_text("providers: [kubernetes]\nonprem: {scheduler: kubernetes, name: lab-k8s, accelerator: skylake-48c, gpus: 1, "
                          f"usd_per_gpu_hour: 0.5, context: lab, namespace: physics, storage: 'file://{bucket}'}}\n")
        yield home, policy, head, env_path, bucket
    finally:
        burst("down", "rayhead", home=head_home, timeout=120)


@pytest.mark.slow
def test_a_run_is_submitted_through_the_port_forward_with_the_secret_s_token_and_outlives_its_tunnel(tmp_path, fake):
    """Every step burst takes from this machine, for real, against a stand-in cluster whose RayCluster
    head is a real Ray head here: `up` applies the objects (stand-in kubectl); without the token the
    Secret holds the head refuses the job; `burst monitor` scrapes the nodes through a relay on the
    head; a managed run reaches the head through `kubectl port-forward` (the stand-in proxies TCP as
    the real one does), and when that tunnel breaks mid-run (the process killed, as when a laptop's
    network changes) the controller reopens it after REOPEN_AFTER_S and follows the run to its end,
    collecting the results from the bucket; `down` deletes the objects and stops Prometheus.
    (One run for both: the attached and the managed submission share the port-forward and the token.)"""
    from tests.support import census

    before = census.snapshot()
    with cpu_site(tmp_path, fake) as (home, policy, head, env_path, bucket):
        up = subprocess.run([sys.executable, "-m", "burst.cli", "up", "--provider", "kubernetes", "--policy", str(policy), "--name", "k8s",
                             "--image", "registry.example.org/burst:1", "--json"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "BURST_HOME": str(home), "FAKE_KUBE": str(fake), "PATH": env_path})
        assert up.returncode == 0, up.stderr
        handle = json.loads(up.stdout)
        assert handle["storage_uri"] == f"file://{bucket}" and handle["layout"]["workers"] == 1
        env = {**os.environ, "BURST_HOME": str(home), "FAKE_KUBE": str(fake), "FAKE_KUBE_HEAD": head["dashboard_url"].rsplit(":", 1)[1],
               "PATH": env_path}
        train = ["train", "gan3d", "--cluster", "k8s", "--epochs", "4", "--steps", "8", "--synthetic", "200", "--val-events", "100",
                 "--batch-per-replica", "4"]
        refused = subprocess.run([sys.executable, "-m", "burst.cli", *train], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
        assert refused.returncode != 0  # the token up generated is not the head's: the Jobs API refuses it
        Path(handle["token_path"]).write_text(Path(head["token_path"]).read_text())  # the Secret's token is the head's
        # `burst monitor`: the nodes are scraped through a relay on the head and a port-forward of its own
        shown = subprocess.run([sys.executable, "-m", "burst.cli", "monitor", "k8s", "--json"], capture_output=True, text=True, timeout=240,
                               cwd=tmp_path, env=env)
        assert shown.returncode == 0, shown.stderr[-3000:]
        mon, checked = json.loads(shown.stdout), False
        try:
            assert mon["relay_url"].startswith("http://127.0.0.1:") and psutil.pid_exists(mon["forward_pid"])
            proc = subprocess.run([sys.executable, "-m", "burst.cli", *train, "--managed", "--detach", "--policy", str(policy)],
                                  capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
            assert proc.returncode == 0, proc.stderr[-3000:]
            run_id = " ".join(proc.stderr.split()).split("run ", 1)[1].split(" ", 1)[0]
            relay_port = f"{mon['relay_url'].rsplit(':', 1)[1]}:8266"  # the relay's port, which the head Service lists
            run_tunnels = lambda: [c["argv"] for c in calls(fake) if "port-forward" in c["argv"] and relay_port not in c["argv"]]  # noqa: E731
            killed_pids = _break_the_run_s_tunnel(home, run_id, spare=mon["forward_pid"])
            opened_before = len(run_tunnels())
            managed = home / "managed" / f"{run_id}.json"
            deadline = time.time() + 600
            while json.loads(managed.read_text())["phase"] != "finished":
                assert time.time() < deadline, "the run did not finish after its tunnel broke"
                time.sleep(1)
            record = json.loads((home / "runs" / f"{run_id}.json").read_text())
            assert record["state"] == "SUCCEEDED", record
            assert record["cluster"] == "k8s" and record["provider"] == "kubernetes"
            assert [h["epoch"] for h in json.loads((Path(record["run_dir"]) / "history.json").read_text())] == [1, 2, 3, 4]
            assert (Path(record["run_dir"]) / "report" / "metrics.json").exists()  # collected from the site's bucket
            (attempt,) = json.loads(managed.read_text())["attempts"]  # the same cluster throughout: no move, no loss
            moves = (home / "managed" / f"{run_id}.log").read_text() if (home / "managed" / f"{run_id}.log").exists() else ""
            assert "reopening the way to it" in moves, moves
            forwards = [c["argv"] for c in calls(fake) if "port-forward" in c["argv"]]
            assert forwards and all(a[0] == "--context=lab" and f"service/{handle['outputs']['head_service']}" in a and "--address=127.0.0.1" in a for a in forwards)
            assert any(relay_port in a for a in forwards)
            assert killed_pids and len(run_tunnels()) > opened_before  # the run's tunnel opened again after it was killed
            assert psutil.pid_exists(mon["forward_pid"])  # the monitor's own tunnel was not the run's to break
            _scraped_through_the_relay(mon)
            # the monitor's tunnel breaks: the node is no longer scraped (every scrape goes through it); `burst monitor` again opens a new one
            psutil.Process(mon["forward_pid"]).kill()
            assert _wait_for_up(mon["url"], "0"), "scrapes still answered with the tunnel gone"
            again = json.loads(subprocess.run([sys.executable, "-m", "burst.cli", "monitor", "k8s", "--json"], capture_output=True, text=True,
                                              timeout=240, cwd=tmp_path, env=env).stdout)
            assert again["forward_pid"] != mon["forward_pid"] and not psutil.pid_exists(mon["pid"])  # the old Prometheus was stopped
            assert _wait_for_up(again["url"], "1")
            checked = True
        finally:
            if not checked:
                burst("monitor", "k8s", "--stop", home=home, fake=fake)  # whatever failed above, no Prometheus outlives the test
        assert burst("down", "k8s", home=home, fake=fake).returncode == 0
        assert not psutil.pid_exists(again["pid"]) and not psutil.pid_exists(again["forward_pid"])  # down stops Prometheus and its tunnel
        assert left_on(fake) == ["ray-system_deployment_kuberay-operator"]
    census.assert_none_left(before)


def _break_the_run_s_tunnel(home: Path, run_id: str, spare: int) -> set[int]:
    """Once the run has trained an epoch, kill the stand-in `kubectl port-forward` its controller
    follows it through (this test process's own, not ``spare``, the monitor's); the pids killed."""
    from tests.support import census

    def progress() -> int:
        return (json.loads((home / "runs" / f"{run_id}.json").read_text()).get("progress") or {}).get("epoch") or 0

    def forwards() -> list:
        group = census.members()  # this test process's own: another worker's tunnel is not this test's to break
        return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] and "port-forward" in p.info["cmdline"]
                and any(str(FAKES) in part for part in p.info["cmdline"]) and (group is None or p.pid in group) and p.pid != spare]

    deadline = time.time() + 400
    while progress() < 1 or not forwards():
        assert time.time() < deadline, "no epoch through the port-forward"
        time.sleep(0.5)
    killed = forwards()
    for p in killed:
        p.kill()  # the tunnel breaks mid-run
    return {p.pid for p in killed}


def _wait_for_up(url: str, value: str, within_s: float = 60) -> bool:
    """Wait until every node's ``up`` sample in the Prometheus at ``url`` reads ``value``."""
    from burst.monitor import query

    deadline = time.time() + within_s
    while time.time() < deadline:
        up = query(url, 'up{job="ray"}')
        if up and all(r["value"][1] == value for r in up):
            return True
        time.sleep(2)
    return False


def _scraped_through_the_relay(mon: dict) -> None:
    """Prometheus scrapes the head's node through the relay; the relay refuses what is not a node's
    metrics page; Prometheus and the tunnel listen on loopback only."""
    import urllib.error
    import urllib.request

    from burst.monitor import query

    deadline, up, cpu = time.time() + 90, [], []
    while time.time() < deadline:
        up, cpu = query(mon["url"], 'up{job="ray"}'), query(mon["url"], "ray_node_cpu_utilization")
        if up and all(r["value"][1] == "1" for r in up) and cpu:
            break
        time.sleep(2)
    assert up and all(r["value"][1] == "1" for r in up) and cpu, (up, cpu)
    nodes = json.loads((Path(mon["directory"]) / "nodes.json").read_text())[0]["targets"]
    assert {r["metric"]["instance"] for r in up} == set(nodes)  # each node under its own address, not the relay's
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": mon["relay_url"]}))
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open("http://127.0.0.1:9/metrics", timeout=10)  # not a node of the cluster: no open proxy
    assert refused.value.code == 403
    for pid in (mon["pid"], mon["forward_pid"]):
        listening = [c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert listening and set(listening) == {"127.0.0.1"}, (pid, listening)


# ---------------------------------------------------------------------- Kubernetes as it really behaves


@pytest.mark.parametrize("first_down", ["a", "b"])
def test_two_clusters_share_a_namespace_and_operator_and_either_leaves_the_other_untouched(tmp_path, site, fake, first_down):
    """Before: `up a` created namespace `physics` and installed the operator, `up b` reused both, and
    `down a` deleted the namespace, and with it b's RayCluster, Secret and claim (its checkpoints)
    mid-run, and uninstalled b's operator. Now either goes first and the other keeps everything; the
    last to leave removes the namespace and the operator burst created, and Helm's CRD stays."""
    home = tmp_path / "home"
    for name in ("a", "b"):
        proc = burst("up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "4", "--name", name, home=home, fake=fake)
        assert proc.returncode == 0, proc.stderr
    assert sum(1 for c in calls(fake) if c["tool"] == "helm") == 1  # b found the operator a installed running
    everything = left_on(fake)
    mine = {name: [o for o in everything if f"burst-{name}" in o] for name in ("a", "b")}
    assert mine["a"] and mine["b"]
    second = "b" if first_down == "a" else "a"
    (fake / "calls.jsonl").unlink()
    assert burst("down", first_down, home=home, fake=fake).returncode == 0
    assert left_on(fake) == sorted(set(everything) - set(mine[first_down]))  # the other's objects, the namespace, the operator: untouched
    assert not any(c["tool"] == "helm" for c in calls(fake))
    deleted = [c["argv"] for c in calls(fake) if "delete" in c["argv"]]
    assert all(f"burst-{first_down}" in " ".join(a) for a in deleted), deleted  # nothing of the other's, no namespace
    proc = burst("down", second, home=home, fake=fake)
    assert proc.returncode == 0, proc.stderr
    assert left_on(fake) == []  # the last to leave: the namespace and the operator burst created go too
    assert any(c["tool"] == "helm" and "uninstall" in c["argv"] for c in calls(fake))
    assert json.loads((fake / "crds.json").read_text()) == ["rayclusters.ray.io"]  # Helm keeps CRDs


def test_a_namespace_with_objects_of_others_is_never_deleted(tmp_path, site, fake):
    """A namespace burst created, in which someone else has since put a Deployment: kept."""
    site_operator(fake)
    home = tmp_path / "home"
    assert burst("up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "4", "--name", "a", home=home, fake=fake).returncode == 0
    (fake / "objects" / "physics_deployment_jupyter.json").write_text(json.dumps({
        "kind": "Deployment", "metadata": {"name": "jupyter", "namespace": "physics"}, "status": {"availableReplicas": 1}}))
    proc = burst("down", "a", home=home, fake=fake)
    assert proc.returncode == 0 and "namespace physics stays: 1 object(s) of others are in it" in " ".join(proc.stderr.split())
    assert "-_namespace_physics" in left_on(fake) and "physics_deployment_jupyter" in left_on(fake)


def test_a_failed_read_of_the_namespace_is_an_error_not_a_missing_namespace(tmp_path, site, fake):
    """A transient API error on `get namespace` made the site's namespace count as burst's (created,
    recorded, later deleted). Now it is one line and nothing is created."""
    home, error = _failed_up(tmp_path, site, fake, "fail-get-namespace", "a")
    assert "kubectl get namespace physics failed on context lab: Unable to connect to the server" in error, error
    assert not any("apply" in c["argv"] for c in calls(fake))
    assert left_on(fake) == ["ray-system_deployment_kuberay-operator"] and not (home / "clusters" / "a.json").exists()


def _failed_up(tmp_path: Path, site, fake: Path, scenario: str, name: str) -> tuple[Path, str]:
    """`burst up` on the site's namespace, with the operator running, under a stand-in scenario that
    makes it fail: (BURST_HOME, its one error line)."""
    site_operator(fake)
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    (fake / scenario).write_text("")
    home = tmp_path / "home"
    proc = burst("up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "8", "--name", name, home=home, fake=fake)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    return home, error


def test_a_crd_left_by_an_uninstall_is_not_taken_for_a_running_operator(tmp_path, site, fake):
    """Helm keeps a chart's CRDs after `helm uninstall`: the next `up` found the CRD, skipped the
    operator, applied a RayCluster nothing reconciles and waited 15 minutes. Now the operator's
    Deployment is what counts: it is installed, and the cluster comes up."""
    (fake / "crds.json").write_text(json.dumps(["rayclusters.ray.io"]))  # left by an earlier install
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    home = tmp_path / "home"
    proc = burst("up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "4", "--name", "a", home=home, fake=fake, timeout=40)
    assert proc.returncode == 0, proc.stderr
    assert "its CRD is there from an earlier install: Helm keeps CRDs" in " ".join(proc.stderr.split())
    assert any(c["tool"] == "helm" and "upgrade" in c["argv"] for c in calls(fake))
    assert burst("down", "a", home=home, fake=fake).returncode == 0


def test_an_operator_that_does_not_run_is_one_line(tmp_path, site, fake):
    site_operator(fake)
    path = fake / "objects" / "ray-system_deployment_kuberay-operator.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "status": {"replicas": 1, "unavailableReplicas": 1}}))
    home = tmp_path / "home"
    proc = burst("up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "4", "--name", "a", home=home, fake=fake)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "the KubeRay operator ray-system/kuberay-operator has no available replica" in proc.stderr
    assert not any(c["tool"] == "helm" for c in calls(fake)) and not (home / "clusters" / "a.json").exists()


def test_staging_into_a_claim_twice_replaces_instead_of_nesting(tmp_path, fake, monkeypatch):
    """`kubectl cp DIR pod:DEST` nests into DEST/DIR when DEST exists: staging a checkpoint again after
    a controller restart made checkpoint_X/checkpoint_X, and the partial first copy was the one used.
    Now a copy goes to a fresh path and is renamed into place; a download replaces, never merges."""
    from burst.runtime import kube_storage

    monkeypatch.setenv("FAKE_KUBE", str(fake))
    monkeypatch.setenv("PATH", f"{FAKES}:{os.environ['PATH']}")
    here = tmp_path / "checkpoint_000003"
    here.mkdir()
    (here / "model.weights.h5").write_text("first, partial")
    dest = kube_storage.uri("lab", "physics", "burst-lab", "/mnt/burst/resume/checkpoint_000003")
    kube_storage.upload(str(here), dest)
    (here / "model.weights.h5").write_text("complete")
    (here / "state.json").write_text("{}")
    kube_storage.upload(str(here), dest)  # again, after a restart
    claim = fake / "pvc" / "resume" / "checkpoint_000003"
    assert sorted(p.name for p in claim.iterdir()) == ["model.weights.h5", "state.json"]  # no checkpoint_000003/checkpoint_000003
    assert (claim / "model.weights.h5").read_text() == "complete"
    assert not [p for p in claim.parent.iterdir() if p.name.startswith(".burst-partial")]
    back = tmp_path / "back"
    back.mkdir()
    (back / "stale.json").write_text("from an earlier copy")
    kube_storage.download(dest, str(back))
    assert sorted(p.name for p in back.iterdir()) == ["model.weights.h5", "state.json"]


def _rc_handle(fake: Path, local_queue=None):
    """A handle and its RayCluster on the stand-in cluster (as `up` leaves them before waiting)."""
    from burst.home import state
    from burst.home.state import ClusterHandle

    site_operator(fake)
    (fake / "objects" / "physics_raycluster_burst-lab.json").write_text(json.dumps({
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "burst-lab", "namespace": "physics"},
        "spec": {"suspend": bool(local_queue), "headGroupSpec": {}, "workerGroupSpecs": [{"replicas": 2}]}}))
    handle = ClusterHandle(name="lab", provider="kubernetes", cluster_id="0123456789ab", state="starting", storage_uri="/x",
                           expires=time.time() + 3600, outputs={"context": "lab", "namespace": "physics", "ray_cluster": "burst-lab",
                                                                "local_queue": local_queue, "created": []})
    with state.locked():
        state.save(handle)
    return handle


class _Said:
    def __init__(self):
        self.lines = []

    def say(self, line):
        self.lines.append(line)


def test_a_cluster_whose_nodes_are_being_added_waits_and_comes_up(tmp_path, fake, monkeypatch):
    """Worker pods Pending while the cluster autoscaler adds GPU nodes (TriggeredScaleUp) are a wait,
    not a failure (before: failed after a hard 900 s, everything deleted); `burst status` says what it waits for."""
    from burst.home import state
    from burst.home.state import ClusterHandle
    from burst.targets import kubernetes

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FAKE_KUBE", str(fake))
    monkeypatch.setenv("PATH", f"{FAKES}:{os.environ['PATH']}")
    monkeypatch.setattr(kubernetes, "POLL_S", 0.05)
    handle = _rc_handle(fake)
    (fake / "scale-up-looks").write_text("3")
    target = kubernetes.KubernetesTarget()
    assert target.describe_state(handle).startswith("waiting (nodes are being added for 2 pod(s): pod triggered scale-up")
    said = _Said()
    target._wait_ready(state.load(ClusterHandle, "lab"), said, wait=True)
    assert state.load(ClusterHandle, "lab").state == "running"
    assert any("waiting: nodes are being added" in line for line in said.lines) and said.lines[-1].startswith("RayCluster physics/burst-lab is ready")


@pytest.mark.parametrize("scenario, line", [
    ("image-pull", "pod burst-lab-worker-1: ErrImagePull: failed to pull and unpack image \"registry.example.org/burst:1\": not found"),
    ("no-scale-up", "cannot be scheduled (0/3 nodes are available: 3 Insufficient nvidia.com/gpu.) and the autoscaler adds no node: "
                    "pod didn't trigger scale-up"),
    ("unschedulable", "cannot be scheduled: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu., and no autoscaler added a node in 0 s"),
])
def test_what_will_not_resolve_by_itself_fails_up_with_kubernetes_reason(tmp_path, fake, monkeypatch, scenario, line):
    from burst.errors import BurstError
    from burst.targets import kubernetes

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FAKE_KUBE", str(fake))
    monkeypatch.setenv("PATH", f"{FAKES}:{os.environ['PATH']}")
    monkeypatch.setattr(kubernetes, "POLL_S", 0.05)
    monkeypatch.setattr(kubernetes, "UNSCHEDULABLE_GRACE_S", 0.2)
    handle = _rc_handle(fake)
    (fake / scenario).write_text("")
    with pytest.raises(BurstError) as caught:
        kubernetes.KubernetesTarget()._wait_ready(handle, _Said(), wait=True)
    assert line in str(caught.value), str(caught.value)


def test_an_image_that_cannot_be_pulled_fails_up_in_one_line_and_leaves_nothing(tmp_path, site, fake):
    home, error = _failed_up(tmp_path, site, fake, "image-pull", "lab")
    assert "ErrImagePull" in error
    assert left_on(fake) == ["ray-system_deployment_kuberay-operator"] and not (home / "clusters" / "lab.json").exists()


@pytest.mark.parametrize("first_down", ["alice", "bob"])
def test_two_people_bring_up_k8s_on_one_namespace_and_either_down_leaves_the_other_s_untouched(tmp_path, site, fake, first_down):
    """Issue 64, finding 5: two members of a group, each from their own machine (their own state
    directory), both `burst up --provider kubernetes` with the default name `k8s` into the group's
    namespace. Before, object names came from the cluster name alone: bob's `up` silently took over
    alice's Secret, claim and RayCluster, and either `down` deleted both. Now each cluster's objects
    carry its id, nothing is applied over an object that is not this cluster's, and either goes
    first while the other keeps everything."""
    site_operator(fake)
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    homes = {who: tmp_path / who for who in ("alice", "bob")}
    ids = {}
    for who, home in homes.items():
        proc = burst("up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "4", "--json", home=home, fake=fake)
        assert proc.returncode == 0, proc.stderr
        ids[who] = json.loads(proc.stdout)["cluster_id"]
        assert json.loads(proc.stdout)["name"] == "k8s"
    everything = left_on(fake)
    mine = {who: [o for o in everything if ids[who] in o] for who in homes}
    assert len(mine["alice"]) == len(mine["bob"]) == 6 and not set(mine["alice"]) & set(mine["bob"])
    token = {who: json.loads(next(Path(fake / "objects").glob(f"physics_secret_burst-k8s-{ids[who]}-*.json")).read_text())["stringData"]
             for who in homes}
    assert token["alice"] != token["bob"]  # bob's up did not rewrite alice's Ray token
    second = "bob" if first_down == "alice" else "alice"
    (fake / "calls.jsonl").unlink()
    proc = burst("down", "k8s", home=homes[first_down], fake=fake)
    assert proc.returncode == 0, proc.stderr
    assert left_on(fake) == sorted(set(everything) - set(mine[first_down]))  # the other's six objects untouched
    deleted = [" ".join(c["argv"]) for c in calls(fake) if "delete" in c["argv"]]
    assert deleted and all(ids[first_down] in a for a in deleted), deleted
    assert burst("status", "--json", home=homes[second], fake=fake).returncode == 0
    proc = burst("down", "k8s", home=homes[second], fake=fake)
    assert proc.returncode == 0, proc.stderr
    assert left_on(fake) == ["ray-system_deployment_kuberay-operator"]  # the site's operator and namespace stay


def test_up_never_applies_over_an_object_that_is_not_its_own(tmp_path, site, fake, monkeypatch):
    """An object of the very name up would apply, made by someone else (by hand, or a cluster of
    another lease): refused in one line, nothing applied, the name given back."""
    from burst.targets import kubernetes

    site_operator(fake)
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    monkeypatch.setattr(kubernetes.uuid, "uuid4", lambda: type("U", (), {"hex": "0123456789ab" + "0" * 20})())
    (fake / "objects" / "physics_secret_burst-lab-0123456789ab-burst-ray-auth.json").write_text(json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "burst-lab-0123456789ab-burst-ray-auth", "namespace": "physics"}}))
    home = tmp_path / "home"
    monkeypatch.setenv("BURST_HOME", str(home))
    monkeypatch.setenv("FAKE_KUBE", str(fake))
    monkeypatch.setenv("PATH", f"{FAKES}:{os.environ['PATH']}")
    from burst import api
    from burst.errors import BurstError

    with pytest.raises(BurstError, match=r"Secret burst-lab-0123456789ab-burst-ray-auth already exists in namespace physics on lab and "
                                         r"is not burst's; nothing of it was touched"):
        api.up("kubernetes", "lab", policy=str(site()), gpus=4)
    assert not any("apply" in c["argv"] and "Secret" in (c["stdin"] or "") for c in calls(fake))
    assert left_on(fake) == ["physics_secret_burst-lab-0123456789ab-burst-ray-auth", "ray-system_deployment_kuberay-operator"]
    assert not (home / "clusters" / "lab.json").exists()


def test_a_failed_up_that_cannot_delete_what_it_made_keeps_a_record_for_down(tmp_path, site, fake):
    """Issue 64, finding 7: the RayCluster's apply fails and RBAC refuses deleting the Secret. Before,
    `up` ignored what its clean-up could not delete and forgot the cluster: the Secret, claim and RBAC
    objects stayed for good with no record for `burst down`. Now the record stays naming them, the
    error says so, and `burst down` finishes the job once it can."""
    site_operator(fake)
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    (fake / "fail-apply-RayCluster").write_text("")
    (fake / "fail-delete-secret").write_text("")
    home = tmp_path / "home"
    proc = burst("up", "--provider", "kubernetes", "--policy", str(site()), "--name", "lab", home=home, fake=fake)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "and 1 object(s) it created could not be deleted (Secret burst-lab-" in error and error.endswith("`burst down lab` deletes them")
    record = json.loads((home / "clusters" / "lab.json").read_text())
    assert record["state"] == "stopping" and [o["kind"] for o in record["outputs"]["created"]][:2] == ["Secret", "PersistentVolumeClaim"]
    assert [o for o in left_on(fake) if "_secret_" in o]  # still there: the record is what finds it
    (fake / "fail-delete-secret").unlink()  # RBAC fixed
    proc = burst("down", "lab", home=home, fake=fake)
    assert proc.returncode == 0, proc.stderr
    assert left_on(fake) == ["ray-system_deployment_kuberay-operator"] and not (home / "clusters" / "lab.json").exists()


@pytest.mark.parametrize("kind, api_version, crd", [
    ("RoleBinding", "rbac.authorization.k8s.io/v1", None), ("LocalQueue", "kueue.x-k8s.io/v1beta1", "localqueues.kueue.x-k8s.io"),
    ("CronJob", "batch/v1", None), ("NetworkPolicy", "networking.k8s.io/v1", None), ("ResourceQuota", "v1", None),
    ("ServiceAccount", "v1", None),
])
def test_the_last_down_never_deletes_a_namespace_holding_objects_of_any_kind(tmp_path, site, fake, kind, api_version, crd):
    """Issue 64, finding 9: the emptiness check asked nine kinds; a namespace burst created, in which
    a colleague has since put a Kueue LocalQueue, a RoleBinding, a CronJob, a NetworkPolicy, a
    ResourceQuota or a ServiceAccount, was deleted with them. Now every namespaced kind the API
    server lists (`kubectl api-resources`) is asked."""
    if crd:
        (fake / "crds.json").write_text(json.dumps([crd]))
    site_operator(fake)
    home = tmp_path / "home"
    assert burst("up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "4", "--name", "a", home=home, fake=fake).returncode == 0
    (fake / "objects" / f"physics_{kind.lower()}_team.json").write_text(json.dumps({
        "apiVersion": api_version, "kind": kind, "metadata": {"name": "team", "namespace": "physics"}}))
    proc = burst("down", "a", home=home, fake=fake)
    assert proc.returncode == 0 and "namespace physics stays: 1 object(s) of others are in it" in " ".join(proc.stderr.split())
    assert f"physics_{kind.lower()}_team" in left_on(fake) and "-_namespace_physics" in left_on(fake)


def test_down_copies_a_stopped_run_s_checkpoints_off_its_claim_before_deleting_it(tmp_path, site, fake):
    """Issue 64, finding 1's second half: a plain `burst down` of your own Kubernetes deleted the
    claim, with the checkpoints of a run that was stopped (its budget, its lease) and waits for
    `--resume`. Now down copies the newest one to this machine first; when the claim cannot be read,
    nothing is deleted and the error says how to go on."""
    from tests.support.checkpoints import checkpoint, tree

    site_operator(fake)
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    home = tmp_path / "home"
    up = burst("up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "4", "--name", "lab", "--json", home=home, fake=fake)
    assert up.returncode == 0, up.stderr
    handle = json.loads(up.stdout)
    checkpoint(fake / "pvc" / "ray-train" / "r1", "checkpoint_000000", 1)
    newest = checkpoint(fake / "pvc" / "ray-train" / "r1", "checkpoint_000001", 2)
    (home / "runs").mkdir(exist_ok=True)
    (home / "runs" / "r1.json").write_text(json.dumps({"run_id": "r1", "workload": "gan3d", "cluster": "lab", "provider": "kubernetes",
                                                       "state": "STOPPED_BUDGET", "storage_uri": handle["storage_uri"]}))
    (fake / "unreachable").write_text("")  # the API server does not answer: the claim cannot be read
    refused = burst("down", "lab", home=home, fake=fake)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    said = " ".join(refused.stderr.split())
    assert "cluster 'lab' not taken down: run r1 (STOPPED_BUDGET) may be resumed" in said and "nothing was deleted" in said
    assert "--discard-checkpoints" in said and (home / "clusters" / "lab.json").exists()
    (fake / "unreachable").unlink()
    proc = burst("down", "lab", home=home, fake=fake)
    assert proc.returncode == 0, proc.stderr
    assert tree(home / "checkpoints" / "r1" / "checkpoint_000001") == tree(newest)  # `burst train --resume r1` goes on from epoch 2
    assert "run r1's newest checkpoint kept on this machine" in " ".join(proc.stderr.split())
    assert left_on(fake) == ["ray-system_deployment_kuberay-operator"]


def test_a_lost_head_pod_is_told_by_the_api_server_without_the_head_and_a_silent_api_server_tells_nothing(tmp_path, site, fake, monkeypatch):
    """The platform's own word on a head (issue 86): the API server says a head pod was deleted
    (KubeRay's replacement is a new Ray cluster), evicted or restarted, or that the RayCluster is
    gone, and the target says so without reaching the head; a head as it came up is not lost, and
    an API server that does not answer is no verdict (only the blind grace may judge then)."""
    from burst.home.state import ClusterHandle
    from burst.targets import get

    home = tmp_path / "home"
    proc = burst("up", "--provider", "kubernetes", "--policy", str(site()), "--gpus", "4", "--name", "lab", "--json", home=home, fake=fake)
    assert proc.returncode == 0, proc.stderr
    handle = ClusterHandle(**json.loads(proc.stdout))
    rc, ns = handle.outputs["ray_cluster"], "physics"
    assert handle.outputs["head_pod"] == {"uid": f"uid-{rc}-head-0", "restarts": 0}  # the head the cluster came up with
    monkeypatch.setenv("FAKE_KUBE", str(fake))
    monkeypatch.setenv("PATH", f"{FAKES}:{os.environ['PATH']}")
    target = get("kubernetes")
    assert not target.is_gone(handle)
    (fake / "head-restarted").write_text("")
    assert target.is_gone(handle)
    assert target.stopped_reason(handle) == f"pod {rc}-head-0 restarted its ray-head container (OOMKilled, exit code 137)"
    (fake / "head-restarted").unlink()
    (fake / "head-failed").write_text("")
    assert target.stopped_reason(handle) == f"pod {rc}-head-0 Failed (Evicted: The node was low on resource: memory.)"
    (fake / "head-failed").unlink()
    deleted = subprocess.run(["kubectl", "--context=lab", "delete", "pod", f"{rc}-head-0", "-n", ns], capture_output=True, text=True)
    assert deleted.returncode == 0 and deleted.stdout.strip() == f'pod "{rc}-head-0" deleted', deleted.stderr
    assert target.is_gone(handle)
    assert target.stopped_reason(handle) == f"pod {rc}-head-1 is a new head (the pod the cluster came up with is gone)"
    (fake / "unreachable").write_text("")
    assert not target.is_gone(handle)  # no answer is no verdict
    (fake / "unreachable").unlink()
    (fake / "objects" / next(p.name for p in (fake / "objects").glob("*.json") if json.loads(p.read_text())["kind"] == "RayCluster")).unlink()
    assert target.is_gone(handle) and target.stopped_reason(handle) == f"RayCluster {ns}/{rc} is gone"
