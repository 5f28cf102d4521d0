"""The Pulumi programs rendered under Pulumi's mocks: the inputs users depend on, per provider and layout."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burst.placement import layout
from burst.catalog import facts
from burst import targets
from tests.support.stacks import OFFERS, of_type, render

ROOT = Path(__file__).resolve().parents[2]
UNLABELLED = {"gcp:serviceaccount/iAMMember:IAMMember", "gcp:storage/bucketIAMMember:BucketIAMMember",  # bindings take no labels
              "gcp:projects/iAMMember:IAMMember",
              "gcp:secretmanager/secretIamMember:SecretIamMember", "azure-native:authorization:RoleAssignment",
              "gcp:secretmanager/secretVersion:SecretVersion",  # a version of the (labelled) secret, deleted with it
              "azure-native:managedidentity:FederatedIdentityCredential",  # part of its (tagged) identity
              "gcp:compute/routerNat:RouterNat"}  # a NAT is part of its router (which carries the lease)


def catalog_price(provider, region, instance_type, accelerator, count, spot) -> float:
    """$/h of one node, straight from the shipped catalog file."""
    import csv

    text = (ROOT / "burst" / "catalog" / "data" / "catalog.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    (row,) = [r for r in rows if (r["provider"], r["region"], r["instance_type"], r["accelerator"], int(r["accelerator_count"]))
              == (provider, region, instance_type, accelerator, count)]
    return float(row["price_spot" if spot else "price_od"])


def lease_labels(r) -> dict:
    i = r["inputs"]
    for holder in (i.get("labels"), i.get("resourceLabels"), i.get("tags"), (i.get("metadata") or {}).get("labels"),
                   (i.get("nodeConfig") or {}).get("resourceLabels"), (i.get("values") or {}).get("labels"), i.get("metadata")):
        if isinstance(holder, dict) and "burst-lease" in holder:
            return holder
    if r["type"] in ("gcp:serviceaccount/account:Account", "gcp:compute/router:Router", "gcp:compute/firewall:Firewall",
                     "gcp:projects/iAMCustomRole:IAMCustomRole"):
        return dict(kv.split("=") for kv in i["description"].split())  # these take no labels: the lease is in the description
    return {}


def assert_every_resource_is_labelled(resources, spec):
    for r in resources:
        if r["type"] in UNLABELLED:
            continue
        labels = lease_labels(r)
        assert labels.get("burst-lease") == spec.lease_id, r["type"]
        assert labels.get("burst-expires") == str(spec.expires), r["type"]


def bucket_uri(spec) -> str:
    """The store a rendered stack is granted (its region's, ``infra.store``): no cluster stack makes a bucket."""
    return spec.store_uri


def ray_groups(resources):
    (rc,) = of_type(resources, "RayCluster")
    return rc["inputs"]["spec"]


@pytest.mark.parametrize("accelerator, gpus, preemptible, expect", [
    ("V100", 128, True, [("n1-standard-32", "nvidia-tesla-v100", 8, 8, "us-central1-a"), ("n1-standard-32", "nvidia-tesla-v100", 8, 8, "us-central1-b")]),
    ("V100", 12, False, [("n1-standard-32", "nvidia-tesla-v100", 8, 1, "us-central1-a"), ("n1-standard-32", "nvidia-tesla-v100", 4, 1, "us-central1-a")]),
    ("A100-40GB", 16, True, [("a2-highgpu-8g", "nvidia-tesla-a100", 8, 2, "us-central1-a")]),
    ("H100", 8, False, [("a3-highgpu-8g", "nvidia-h100-80gb", 8, 1, "us-central1-a")]),
    ("L4", 2, True, [("g2-standard-24", "nvidia-l4", 2, 1, "us-central1-a")]),
    ("T4", 4, True, [("n1-standard-32", "nvidia-tesla-t4", 4, 1, "us-central1-a")]),
])
def test_gke_gpu_pools_ray_workers_and_labels(accelerator, gpus, preemptible, expect):
    lay, spec, resources, result = render("gcp", accelerator, gpus, preemptible, region="us-central1")
    (cluster,) = of_type(resources, "container/cluster:Cluster")
    assert cluster["inputs"]["deletionProtection"] is False
    assert cluster["inputs"]["removeDefaultNodePool"] is True
    assert cluster["inputs"]["workloadIdentityConfig"]["workloadPool"] == "proj.svc.id.goog"
    assert cluster["inputs"]["location"] == "us-central1-a"  # zonal: node counts are per zone
    extra_zones = sorted({z for *_, z in expect} - {"us-central1-a"})
    assert cluster["inputs"].get("nodeLocations") == (extra_zones or None)  # a spread layout makes it multi-zonal
    pools = sorted((p for p in of_type(resources, "nodePool:NodePool") if p["name"] != "system"), key=lambda p: p["name"])
    got = []
    for p in pools:
        nc = p["inputs"]["nodeConfig"]
        acc = nc["guestAccelerators"][0]
        (zone,) = p["inputs"]["nodeLocations"]
        got.append((nc["machineType"], acc["type"], acc["count"], p["inputs"]["initialNodeCount"], zone))
        # the pool scales to zero once its keeper has deleted the RayCluster at the lease's end
        assert p["inputs"]["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": p["inputs"]["initialNodeCount"]}
        assert nc.get("spot", False) is preemptible and "preemptible" not in nc
    assert got == expect
    spec_rc = ray_groups(resources)
    assert spec_rc["headGroupSpec"]["serviceType"] == "ClusterIP"
    groups = spec_rc["workerGroupSpecs"]
    assert [(g["replicas"], g["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) for g in groups] == [(n, c) for *_, c, n, _ in expect]
    for g, p in zip(groups, pools):
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in g["template"]["spec"]["tolerations"]
        assert g["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": p["name"]}
    (release,) = of_type(resources, "helm.sh/v3:Release")
    assert release["inputs"]["chart"] == "kuberay-operator" and release["inputs"]["version"] == "1.5.1"
    # the cluster owns no bucket: its Ray pods' identity is granted the region's store, which outlives it
    assert not of_type(resources, "storage/bucket:Bucket")
    (grant,) = of_type(resources, "bucketIAMMember:BucketIAMMember")
    assert "gs://" + grant["inputs"]["bucket"] == spec.store_uri == targets.get("gcp").region_store("us-central1", project="proj").uri
    assert_every_resource_is_labelled(resources, spec)
    # The price comes from the catalog's own rows for the pools the stack creates (read here with
    # the csv module, not through the code that priced the layout), plus nothing else.
    expected = sum(nodes * catalog_price("gcp", "us-central1", machine, accelerator, count, preemptible) for machine, _, count, nodes, _ in expect)
    assert result["hourly_usd"] == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize("accelerator, gpus, preemptible, expect", [
    ("T4", 5, True, [("Standard_NC64as_T4_v3", 1), ("Standard_NC4as_T4_v3", 1)]),
    ("A100-80GB", 16, False, [("Standard_ND96amsr_A100_v4", 2)]),
    ("T4", 1, True, [("Standard_NC4as_T4_v3", 1)]),
])
def test_aks_agent_pools_spot_taints_and_tags(accelerator, gpus, preemptible, expect):
    lay, spec, resources, _ = render("azure", accelerator, gpus, preemptible, region="eastus")
    (cluster,) = of_type(resources, "ManagedCluster")
    assert [p["mode"] for p in cluster["inputs"]["agentPoolProfiles"]] == ["System"]  # GPU pools are separate resources
    pools = sorted(of_type(resources, "containerservice:AgentPool"), key=lambda p: p["name"])
    assert [(p["inputs"]["vmSize"], p["inputs"]["count"]) for p in pools] == expect
    for p in pools:
        assert p["inputs"]["mode"] == "User"
        assert "nvidia.com/gpu=present:NoSchedule" in p["inputs"]["nodeTaints"]
        if preemptible:
            assert p["inputs"]["scaleSetPriority"] == "Spot" and p["inputs"]["spotMaxPrice"] == -1
            assert p["inputs"]["scaleSetEvictionPolicy"] == "Delete"
        else:
            assert "scaleSetPriority" not in p["inputs"]
    spot_toleration = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
    for g, (vm, n) in zip(ray_groups(resources)["workerGroupSpecs"], expect):
        assert g["replicas"] == n
        assert (spot_toleration in g["template"]["spec"]["tolerations"]) is preemptible
    assert_every_resource_is_labelled(resources, spec)


@pytest.mark.parametrize("accelerator, preemptible, runtime", [
    # from TF 2.18 the runtime image is per TPU generation group: the names Google publishes
    ("v3-8", True, "tpu-vm-tf-2.18.0-pjrt-v5p-and-below"), ("v5litepod-8", False, "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6"),
    ("v3-32", True, "tpu-vm-tf-2.18.0-pod-pjrt-v5p-and-below"),
])
def test_tpu_vm_slice(accelerator, preemptible, runtime):
    lay, spec, resources, _ = render("gcp-tpu", accelerator, None, preemptible)
    (tpu,) = of_type(resources, "v2Vm:V2Vm")
    i = tpu["inputs"]
    assert i["acceleratorType"] == accelerator and i["runtimeVersion"] == runtime
    assert i.get("schedulingConfig", {}).get("spot", False) is preemptible
    assert i["networkConfig"]["enableExternalIps"] is False  # no external IP unless asked
    script = i["metadata"]["startup-script"]
    assert "ray_start --head" in script and "--dashboard-host=127.0.0.1" in script and "pip install" in script
    # every host is a TPU_HOST; host 0 alone the TPU_SLICE_HEAD, where TensorFlow's client runs (burst.runtime.tpu)
    head, worker = (line for line in script.splitlines() if line.strip().startswith("ray_start "))
    assert "\"TPU_HOST\": 1, \"TPU_SLICE_HEAD\": 1" in head and "TPU_SLICE_HEAD" not in worker and "\"TPU_HOST\": 1" in worker
    # the hosts reach each other on every TCP port, and only each other
    (inside,) = [r for r in of_type(resources, "compute/firewall:Firewall") if r["name"] == "slice-internal"]
    assert inside["inputs"]["sourceTags"] == inside["inputs"]["targetTags"] == i["tags"] == [spec.slug]
    assert inside["inputs"]["allows"] == [{"protocol": "tcp"}] and "sourceRanges" not in inside["inputs"]
    # preempted or stopped, host 0 posts a stop notice on the bucket and waits for the run's checkpoint
    shutdown = i["metadata"]["shutdown-script"]
    assert f"python3 -m burst.runtime.notice '{bucket_uri(spec)}/notices/{spec.lease_id}' --action stop" in shutdown and "--wait 20" in shutdown
    # host 0 starts the keeper, which deletes this very node at the lease's end, with a role that can do that and no more
    keeper = next(line for line in script.splitlines() if "python3 -m infra.keeper" in line)
    assert f"--end tpu --project proj --zone {spec.pools[0].zone} --name {spec.slug} --expires {spec.expires}" in keeper
    # host 0 only, and before Ray: a slice whose head never comes up is still deleted at its lease's end
    assert script.index('if [ "$WORKER" = "0" ]') < script.index("python3 -m infra.keeper") < script.index("ray_start --head") < script.index("else")
    (role,) = of_type(resources, "iAMCustomRole:IAMCustomRole")
    assert role["inputs"]["permissions"] == ["tpu.nodes.get", "tpu.nodes.delete", "tpu.operations.get"]
    (grant,) = of_type(resources, "projects/iAMMember:IAMMember")
    assert grant["inputs"]["member"].startswith("serviceAccount:") and "-tpu@" in grant["inputs"]["member"]
    # granted on the project (TPU nodes take no policy of their own), so a condition names this node: no other TPU of the project
    where = f"projects/proj/locations/{spec.pools[0].zone}"
    assert grant["inputs"]["condition"]["expression"] == (f'resource.name == "{where}/nodes/{spec.slug}" || '
                                                          f'resource.name.startsWith("{where}/operations/")')
    assert grant["inputs"]["condition"]["title"] == f"burst keeper of {spec.slug}"
    assert_every_resource_is_labelled(resources, spec)


# `ray` on a host that is still busy: its first FAILURES starts time out as Ray's own does (ray/_private/node.py)
RAY_TIMING_OUT = """#!/bin/sh
echo "ray $*" >> "$FAKE_TPU_LOG"
if [ "$1" = "start" ] && [ "$(grep -c '^ray start' "$FAKE_TPU_LOG")" -le "$FAILURES" ]; then
  echo "Exception: The current node timed out during startup." >&2; exit 1
fi
"""


@pytest.mark.parametrize("failures", [0, 1, 2])
def test_a_tpu_host_starts_its_keeper_whatever_ray_does_and_tries_a_timed_out_ray_start_once_more(tmp_path, failures):
    from infra import tpu
    from tests.fakes import tpu_vm

    _, spec, resources, _ = render("gcp-tpu", "v3-8", None, False)
    (vm,) = of_type(resources, "v2Vm:V2Vm")
    (secret,) = of_type(resources, "secretmanager/secret:Secret")
    script = vm["inputs"]["metadata"]["startup-script"]
    for old, new in ((f"TOKEN_FILE={tpu.TOKEN_FILE}", f"TOKEN_FILE={tmp_path / 'ray_token'}"),
                     ("/var/log/burst-keeper.log", str(tmp_path / "keeper.log")), ("/var/log/burst-ray.log", str(tmp_path / "ray.log")),
                     ("RAY_CHECK_S=30", "RAY_CHECK_S=0.3")):
        assert script.count(old) == 1, old
        script = script.replace(old, new)
    script = script.replace("sleep 5", "sleep 0")  # the pause between two tries
    env = {**os.environ, **tpu_vm.boundary(tmp_path, secret["inputs"]["secretId"], "proj", "a token"), "FAILURES": str(failures)}
    tpu_vm.executable(tmp_path / "bin" / "ray", RAY_TIMING_OUT)
    tpu_vm.executable(tmp_path / "bin" / "pgrep", tpu_vm.PGREP_NO_RAYLET)  # the raylet dies after the script: the watcher sees none
    try:
        proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert (proc.returncode == 0) is (failures < 2), proc.stderr
        head = f"ray start --head --port={tpu.GCS_PORT} --dashboard-host=127.0.0.1 --dashboard-port={tpu.DASHBOARD_PORT} " \
               '--resources={"TPU_HOST": 1, "TPU_SLICE_HEAD": 1}'

        def script_s_own() -> list[str]:  # the calls before the watcher's first look
            calls = tpu_vm.calls(tmp_path)
            looked = next((i for i, c in enumerate(calls) if c.startswith("pgrep ")), len(calls))
            return [c for c in calls[:looked] if c.startswith("ray ")]

        assert script_s_own() == ([head] if failures == 0 else [head, "ray stop --force", head])  # a second try, after stopping what the first left
        deadline = time.time() + 10  # the keeper runs in the background
        while not any(c.startswith("python3 -m infra.keeper --end tpu") for c in tpu_vm.calls(tmp_path)):
            assert time.time() < deadline, "host 0 started no keeper"
            time.sleep(0.1)
        if failures < 2:  # Ray started: its watcher finds no raylet and starts Ray again, with the same arguments
            deadline = time.time() + 10
            while tpu_vm.calls(tmp_path)[-3:] != ["pgrep -x raylet", "ray stop --force", head]:
                assert time.time() < deadline, tpu_vm.calls(tmp_path)[-6:]
                time.sleep(0.1)
            assert "no raylet: starting Ray again" in (tmp_path / "ray.log").read_text()
        else:  # a Ray that never started is not watched: the script failed and the slice is deleted at its lease's end
            time.sleep(1)
            assert not any(c.startswith("pgrep ") for c in tpu_vm.calls(tmp_path))
    finally:
        assert tpu_vm.stop_watchers(tmp_path) == (1 if failures < 2 else 0)


def test_gke_kubeconfig_is_a_secret_built_from_the_cluster():
    import pulumi

    from infra import gke, render as r

    lay = layout.resolve(OFFERS, "gcp", "V100", 8, region="us-central1")
    spec = targets.get("gcp").build_spec("t", lay, False, hours=1, lease_id="lease0123456", project="proj")
    seen = {}

    def program():
        out = gke.program(spec)
        config = gke.kubeconfig(out["cluster"])
        config.apply(lambda text: seen.update(text=text))

        async def secret():
            seen["secret"] = await config.is_secret()

        return {**out, "check": pulumi.Output.from_input(secret())}

    r.render(program)
    assert "server: https://203.0.113.10" in seen["text"] and "certificate-authority-data: Q0EK" in seen["text"]
    assert "command: gke-gcloud-auth-plugin" in seen["text"]
    assert seen["secret"] is True


def test_dry_run_cli_json_for_every_provider(tmp_path):
    env = {**os.environ, "BURST_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for args in (["--provider", "gcp", "--gpus", "128", "--accelerator", "V100", "--preemptible", "--region", "us-central1"],
                 ["--provider", "gcp-tpu", "--accelerator", "v3-8", "--on-demand"],
                 ["--provider", "azure", "--gpus", "8", "--accelerator", "A100-80GB", "--region", "eastus"]):
        proc = subprocess.run([sys.executable, "-m", "burst.cli", "up", *args, "--dry-run", "--json"], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=120)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["hourly_usd"] > 0 and out["resources"]
        assert all(set(r) >= {"type", "name", "inputs"} for r in out["resources"])
        masked = {r["type"] for r in out["resources"] if "[secret]" in json.dumps(r["inputs"])}
        # the Ray token, and nothing else, is a secret of every stack (no storage key exists anywhere)
        assert masked == ({"gcp:secretmanager/secretVersion:SecretVersion"} if args[1] == "gcp-tpu" else {"kubernetes:core/v1:Secret"})
    assert not list(tmp_path.glob("clusters/*.json"))  # a dry run records nothing
    gcp = json.loads(subprocess.run([sys.executable, "-m", "burst.cli", "up", "--provider", "gcp", "--gpus", "128", "--accelerator", "V100",
                                     "--preemptible", "--region", "us-central1", "--dry-run", "--json"], capture_output=True, text=True,
                                    env=env, cwd=ROOT, timeout=120).stdout)
    # 128 GPUs are above the 64-per-zone limit: two pools in two zones that offer V100 (provider facts)
    assert gcp["layout"]["pools"] == [{"instance_type": "n1-standard-32", "accelerator": "V100", "gpus_per_node": 8, "nodes": 8, "zone": z}
                                      for z in ("us-central1-a", "us-central1-b")]
    v100_zones = facts.load("gcp").zones_for("V100", "us-central1")
    assert gcp["layout"]["zones"] and set(gcp["layout"]["zones"]) <= set(v100_zones)
    assert gcp["hourly_usd"] == pytest.approx(16 * (8 * 1.0885 + 32 * 0.0963 / 8), rel=1e-3)


def test_aks_ray_pods_reach_storage_through_workload_identity_and_no_key_exists():
    """No storage account key in the cluster (Secret or env): the Ray pods' service account is federated
    with a managed identity of their own that may use that account's blobs and nothing else."""
    lay, spec, resources, result = render("azure", "T4", 4, False, region="eastus")
    everything = json.dumps(result)
    assert "AZURE_STORAGE_ACCOUNT_KEY" not in everything and "listStorageAccountKeys" not in everything
    (cluster,) = of_type(resources, "ManagedCluster")
    assert cluster["inputs"]["oidcIssuerProfile"] == {"enabled": True}
    assert cluster["inputs"]["securityProfile"]["workloadIdentity"] == {"enabled": True}
    (identity,) = of_type(resources, "UserAssignedIdentity")
    (federation,) = of_type(resources, "FederatedIdentityCredential")
    assert federation["inputs"]["subject"] == "system:serviceaccount:burst:burst-ray"
    assert federation["inputs"]["audiences"] == ["api://AzureADTokenExchange"]
    (grant,) = of_type(resources, "RoleAssignment")
    assert grant["inputs"]["roleDefinitionId"].endswith("/roleDefinitions/ba92f5b4-2d11-453d-a403-e96b0029c9fe")  # Storage Blob Data Contributor
    # the region store's container, not its account (which may hold others' containers), the subscription or the group
    assert grant["inputs"]["scope"] == f"{spec.store_scope}/blobServices/default/containers/{spec.store_uri.split('://')[1].split('@')[0]}"
    assert spec.store_scope.endswith(f"/storageAccounts/{spec.store_uri.split('@')[1].split('.')[0]}")
    assert not of_type(resources, "StorageAccount") and not of_type(resources, "BlobContainer")  # the store outlives the cluster
    (ksa,) = [r for r in of_type(resources, "core/v1:ServiceAccount") if r["inputs"]["metadata"]["name"] == "burst-ray"]
    assert ksa["inputs"]["metadata"]["annotations"]["azure.workload.identity/client-id"] == "00000000-0000-0000-0000-00000000c11e"
    rc = ray_groups(resources)
    for pod in [rc["headGroupSpec"]["template"]] + [g["template"] for g in rc["workerGroupSpecs"]]:
        assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"
        assert pod["spec"]["serviceAccountName"] == "burst-ray"


@pytest.mark.parametrize("provider, accelerator, gpus, region", [("gcp", "V100", 16, "us-central1"), ("azure", "T4", 4, "eastus")])
def test_a_worker_pod_that_kubernetes_ends_first_posts_a_checkpoint_notice_on_the_bucket(provider, accelerator, gpus, region):
    from infra.kuberay import NOTICE_WAIT_S, TERMINATION_GRACE_S
    from infra.notice_hook import HOOK_SCRIPT

    lay, spec, resources, _ = render(provider, accelerator, gpus, True, region=region)
    for group in ray_groups(resources)["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        command = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
        assert command[:3] == ["python", "-c", HOOK_SCRIPT] and command[4:] == ["checkpoint", "Kubernetes ends a worker pod", str(NOTICE_WAIT_S)]
        # the cluster's own notice directory on the stack's storage (its id: the lease's, as its handle's)
        assert command[3] == f"{bucket_uri(spec)}/notices/{spec.lease_id}" if provider == "gcp" else (
            command[3].startswith("abfs://") and command[3].endswith(f"/notices/{spec.lease_id}"))
        assert NOTICE_WAIT_S < pod["terminationGracePeriodSeconds"] == TERMINATION_GRACE_S
    # tests/burst/runtime/test_notice.py runs this very command and shows a worker acting on its notice


@pytest.mark.parametrize("provider, accelerator, gpus, region", [("gcp", "V100", 16, "us-central1"), ("azure", "T4", 4, "eastus")])
def test_every_ray_container_requires_the_token_from_the_secret(provider, accelerator, gpus, region):
    """Rendered only (tests/infra/test_head_auth.py starts the head for real): token mode on the head and
    every worker, the token from the stack's Secret, the Jobs API on the pod's loopback."""
    lay, spec, resources, _ = render(provider, accelerator, gpus, False, region=region)
    rc = ray_groups(resources)
    assert rc["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "127.0.0.1"
    (secret,) = [r for r in of_type(resources, "core/v1:Secret") if r["inputs"]["metadata"]["name"] == "burst-ray-auth"]
    assert secret["inputs"]["stringData"] == "[secret]"  # masked in a rendering, like every secret
    for pod in [rc["headGroupSpec"]["template"]] + [g["template"] for g in rc["workerGroupSpecs"]]:
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "burst-ray-auth", "key": "auth_token"}}
    (cluster,) = of_type(resources, "RayCluster")
    assert "ray-auth" in cluster["dependsOn"]  # the pods never start before their token exists
    # the head lists burst's metrics relay port, so that its Service carries it for `burst monitor`'s port-forward
    from burst.runtime.metrics_relay import RELAY_PORT

    assert {"containerPort": RELAY_PORT, "name": "metrics-relay"} in rc["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]


@pytest.mark.parametrize("provider, region", [("gcp", "us-central1"), ("gcp-tpu", "europe-west4"), ("azure", "eastus")])
def test_a_region_store_keeps_results_and_expires_what_the_policy_says(provider, region):
    """The store stack (infra.store): one bucket or container per project and region, never
    force-destroyed, lifecycle rules by prefix with the policy's days, no lease labels (a sweeper of
    expired leases must never take it), and the prefixes are where burst really writes."""
    from burst.placement.policy import Stores
    from burst.runtime.job import RunFiles
    from infra import render as r
    from infra.store import CHECKPOINT_PREFIXES, DATASET_PREFIXES

    target = targets.get(provider)
    store = target.region_store(region, Stores(checkpoints_days=3, datasets_days=45, notices_days=2), project="proj")
    resources = r.render(target.store_program(store), stack=store.stack_name)
    assert store.stack_name == f"store-{target.store_service}-{region}"
    assert all("burst-lease" not in json.dumps(x["inputs"]) and "burst-expires" not in json.dumps(x["inputs"]) for x in resources)
    if target.store_service == "gcs":
        (bucket,) = of_type(resources, "storage/bucket:Bucket")
        i = bucket["inputs"]
        assert i["name"] == store.bucket and store.uri == f"gs://{store.bucket}" and i["forceDestroy"] is False
        assert i["location"] == region.upper() and i["uniformBucketLevelAccess"] is True and i["publicAccessPrevention"] == "enforced"
        rules = {tuple(x["condition"]["matchesPrefixes"]): x["condition"]["age"] for x in i["lifecycleRules"]}
        assert all(x["action"]["type"] == "Delete" for x in i["lifecycleRules"])
    else:
        (account,) = of_type(resources, "StorageAccount")
        assert account["inputs"]["accountName"] == store.account and account["inputs"]["allowBlobPublicAccess"] is False
        assert 3 <= len(store.account) <= 24 and store.account.isalnum() and store.account.islower()
        (policy,) = of_type(resources, "ManagementPolicy")
        rules = {tuple(p.split("/", 1)[1] for p in x["definition"]["filters"]["prefixMatch"]):
                 x["definition"]["actions"]["baseBlob"]["delete"]["daysAfterModificationGreaterThan"] for x in policy["inputs"]["policy"]["rules"]}
    assert rules == {CHECKPOINT_PREFIXES: 3, DATASET_PREFIXES: 45, ("notices/",): 2}
    # results (runs/) are kept; checkpoints and staged data are where RunFiles and datasets put them
    files = RunFiles(store.uri, "run1")
    for path in (files.ray_train_dir, files.tpu_checkpoints):
        assert path.removeprefix(store.uri + "/").startswith(CHECKPOINT_PREFIXES)
    assert files.data_dir("train").removeprefix(store.uri + "/").startswith(DATASET_PREFIXES)
    assert not files.run_dir.removeprefix(store.uri + "/").startswith(CHECKPOINT_PREFIXES + DATASET_PREFIXES)
    # two projects never share a bucket name; one project's regions never do either
    assert len({target.region_store(region, project=p).uri for p in ("a", "b")} | {target.region_store("x-1", project="a").uri}) == 3


def test_the_dry_run_shows_the_store_and_its_own_stack():
    from burst.placement import planner, policy, profile
    from burst.placement.request import PlacementRequest
    from burst.targets.base import Lease

    placement = planner.pin(policy.parse("stores: {checkpoints_days: 5}"), profile.load("gan3d"), OFFERS,
                            PlacementRequest(provider="gcp", gpus=8, accelerator="V100", region="us-central1"))
    from burst.lifecycle import placing

    placement = placing.in_store(placement, policy.parse("stores: {checkpoints_days: 5}"))
    out = targets.get("gcp").render("t", placement, Lease(hours=1))
    assert out["store"]["stack"] == "store-gcs-us-central1" and out["store"]["kept_after_down"] is True
    assert out["store"]["lifecycle_days"]["checkpoints"] == 5 and of_type(out["store"]["resources"], "storage/bucket:Bucket")
    named = placing.in_store(placement, policy.parse("stores: {named: {'gcp:us-central1': 'gs://site-bucket'}}"))
    out = targets.get("gcp").render("t", named, Lease(hours=1))
    assert out["store"] == {"uri": "gs://site-bucket", "stack": None, "named": True, "kept_after_down": True, "lifecycle_days": None,
                            "resources": []}
    (grant,) = of_type(out["resources"], "bucketIAMMember:BucketIAMMember")
    assert grant["inputs"]["bucket"] == "site-bucket" and "condition" not in grant["inputs"]  # the whole bucket is the store
    # a named store under a prefix of a site's bucket: the grant reaches that prefix only (issue 64, finding 12)
    under = placing.in_store(placement, policy.parse("stores: {named: {'gcp:us-central1': 'gs://site-bucket/burst'}}"))
    (grant,) = of_type(targets.get("gcp").render("t", under, Lease(hours=1))["resources"], "bucketIAMMember:BucketIAMMember")
    assert grant["inputs"]["bucket"] == "site-bucket"
    assert grant["inputs"]["condition"]["expression"] == ('resource.type == "storage.googleapis.com/Bucket" || '
                                                          'resource.name.startsWith("projects/_/buckets/site-bucket/objects/burst/")')


@pytest.mark.parametrize("provider, accelerator, gpus, region", [("gcp", "V100", 16, "us-central1"), ("azure", "T4", 4, "eastus")])
def test_every_kuberay_head_carries_its_keeper_and_may_delete_its_own_raycluster_only(provider, accelerator, gpus, region):
    """The keeper (infra.keeper, its source run with python -c) beside the head deletes the cluster's
    own RayCluster at the lease's end or when idle, with a Role that names that one object; the GPU
    pools scale to zero after (GKE: autoscaling min 0; AKS: auto scaling, min count 0)."""
    from infra import keeper
    from infra.spec import RAY_CLUSTER_NAME, RAY_NAMESPACE

    lay = layout.resolve(OFFERS, provider, accelerator, gpus, region=region, preemptible=True)
    target = targets.get(provider)
    spec = target.build_spec("t", lay, True, hours=2, lease_id="lease0123456", project="proj", idle_minutes=20)
    resources = target.rendering(spec, lay)["resources"]
    head = ray_groups(resources)["headGroupSpec"]["template"]["spec"]
    (side,) = [c for c in head["containers"] if c["name"] == "burst-keeper"]
    assert side["command"][:3] == ["python", "-c", keeper.source()]
    args = side["command"][3:]
    assert args[:6] == ["--end", "kube", "--namespace", RAY_NAMESPACE, "--name", RAY_CLUSTER_NAME]
    assert args[args.index("--expires") + 1] == str(spec.expires) and args[args.index("--idle-minutes") + 1] == "20"
    assert args[args.index("--dashboard") + 1] == "http://127.0.0.1:8265" and {"name": "RAY_AUTH_TOKEN", "valueFrom": {
        "secretKeyRef": {"name": "burst-ray-auth", "key": "auth_token"}}} in side["env"]
    (role,) = of_type(resources, "rbac.authorization.k8s.io/v1:Role")
    assert role["inputs"]["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "resourceNames": [RAY_CLUSTER_NAME],
                                        "verbs": ["get", "delete"]}]
    (binding,) = of_type(resources, "rbac.authorization.k8s.io/v1:RoleBinding")
    assert binding["inputs"]["subjects"] == [{"kind": "ServiceAccount", "name": head["serviceAccountName"], "namespace": RAY_NAMESPACE}]
    if provider == "azure":
        for pool in of_type(resources, "AgentPool"):
            assert pool["inputs"]["enableAutoScaling"] is True and pool["inputs"]["minCount"] == 0
