"""Each provider fact the first rendered stacks broke (issue 11), against the mock-rendered stack.

Every test here failed on the stacks before the provider facts existed: no device plugin on AKS,
retired NCv3 sizes offered, TPU VMs without any way out, the workload-identity binding racing the
cluster, one zone per region whether it offers the accelerator or not, spot-only a3 shapes
bought on demand, a duplicate GPU taint on GKE, TPU runtime names without their generation
suffix, a LATEST driver on Volta, and pods that pip-install TensorFlow at every job start.
"""

import dataclasses
import re
from pathlib import Path

import pytest

from burst import targets
from burst.errors import BurstError
from burst.placement import layout, planner, policy, profile
from burst.catalog import facts
from burst.placement.request import PlacementRequest
from burst.home.state import ClusterHandle
from tests.support.stacks import OFFERS, of_type, render

ROOT = Path(__file__).resolve().parents[2]
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SPOT_TAINT = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}


@pytest.mark.parametrize("preemptible", [True, False])
def test_1_aks_runs_the_nvidia_device_plugin_on_gpu_nodes_tolerating_their_taints(preemptible):
    _, spec, resources, _ = render("azure", "A100-80GB", 8, preemptible, region="eastus")
    (plugin,) = of_type(resources, "apps/v1:DaemonSet")
    assert plugin["inputs"]["metadata"]["namespace"] == "kube-system"
    pod = plugin["inputs"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == facts.load("azure").device_plugin.image
    assert pod["containers"][0]["image"].startswith("nvcr.io/nvidia/k8s-device-plugin:v")  # pinned, not :latest
    assert GPU_TAINT in pod["tolerations"] and SPOT_TAINT in pod["tolerations"]
    assert pod["nodeSelector"] == {"burst-role": "gpu"}
    for pool in of_type(resources, "containerservice:AgentPool"):  # the selector matches the GPU pools' label
        assert pool["inputs"]["nodeLabels"]["burst-role"] == "gpu"
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"} in mounts


def test_2_retired_azure_v100_sizes_are_not_offered():
    assert not [o for o in OFFERS if o.instance_type in ("Standard_NC6s_v3", "Standard_NC12s_v3", "Standard_NC24s_v3")]
    with pytest.raises(BurstError, match="has no accelerator 'V100'"):
        layout.resolve(OFFERS, "azure", "V100", 4)
    retired = {r.instance_type: r.retired_on.isoformat() for r in facts.load("azure").retired}
    assert retired == dict.fromkeys(("Standard_NC6s_v3", "Standard_NC12s_v3", "Standard_NC24s_v3"), "2025-09-30")


def test_3_tpu_vm_without_external_ip_gets_nat_and_the_iap_ssh_rule():
    _, spec, resources, _ = render("gcp-tpu", "v3-8", None, True, region="us-central1")
    (router,) = of_type(resources, "compute/router:Router")
    (nat,) = of_type(resources, "compute/routerNat:RouterNat")
    (rule,) = [r for r in of_type(resources, "compute/firewall:Firewall") if r["name"] == "iap-ssh"]
    (tpu,) = of_type(resources, "v2Vm:V2Vm")
    assert router["inputs"]["network"] == tpu["inputs"]["networkConfig"]["network"] == "default"
    assert router["inputs"]["region"] == nat["inputs"]["region"] == "us-central1"
    assert nat["inputs"]["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert nat["inputs"]["natIpAllocateOption"] == "AUTO_ONLY"
    assert rule["inputs"]["sourceRanges"] == ["35.235.240.0/20"] and rule["inputs"]["allows"] == [{"protocol": "tcp", "ports": ["22"]}]
    assert rule["inputs"]["targetTags"] == tpu["inputs"]["tags"] == [spec.slug]
    assert {"nat", "nat-router", "iap-ssh"} <= set(tpu["dependsOn"])  # the hosts download at boot
    with_ip = targets.get("gcp-tpu").rendering(dataclasses.replace(spec, external_ip=True), layout.resolve(OFFERS, "gcp-tpu", "v3-8", region="us-central1"))
    assert [r["name"] for r in with_ip["resources"] if r["type"].startswith("gcp:compute/")] == ["slice-internal"]  # no NAT, no IAP rule


def test_4_gke_workload_identity_binding_waits_for_the_cluster():
    _, _, resources, _ = render("gcp", "V100", 8, True, region="us-central1")
    (cluster,) = of_type(resources, "container/cluster:Cluster")
    (binding,) = [r for r in resources if r["type"] == "gcp:serviceaccount/iAMMember:IAMMember"]
    assert cluster["name"] in binding["dependsOn"]
    assert binding["inputs"]["member"] == "serviceAccount:proj.svc.id.goog[burst/burst-ray]"


def test_5_every_pool_sits_in_a_zone_that_offers_its_accelerator():
    seen = set()
    for o in OFFERS:
        if o.provider not in ("gcp", "gcp-tpu") or (o.provider, o.accelerator, o.region) in seen:
            continue
        seen.add((o.provider, o.accelerator, o.region))
        gpus = None if o.is_tpu else 8
        _, spec, _, result = render(o.provider, o.accelerator, gpus, True, region=o.region)
        offered = facts.load(o.provider).zones_for(o.accelerator, o.region)
        assert offered and all(p.zone in offered for p in spec.pools), (o.accelerator, o.region, [p.zone for p in spec.pools])
    assert render("gcp-tpu", "v3-32", None, True)[1].pools[0].zone == "europe-west4-a"  # v3 pods: europe-west4-a only
    assert render("gcp", "H100", 8, True, region="europe-west4")[1].pools[0].zone in ("europe-west4-b", "europe-west4-c")


def test_6_on_demand_never_buys_a_spot_only_a3_shape():
    small = {"a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g"}
    _, _, resources, _ = render("gcp", "H100", 16, False, region="us-central1")
    assert {p["inputs"]["nodeConfig"]["machineType"] for p in of_type(resources, "nodePool:NodePool") if p["name"] != "system"} == {"a3-highgpu-8g"}
    pol = policy.parse("providers: [gcp]\npreemptible: never\naccelerators: [H100]\nmax_gpus: 64\n")
    plan = planner.plan(pol, profile.load("gan3d"), OFFERS, PlacementRequest(provider="gcp"))
    assert plan.candidates and not [p for c in plan.candidates for p in c.layout.pools if p.offer.instance_type in small]
    spot = planner.plan(policy.parse("providers: [gcp]\npreemptible: only\naccelerators: [H100]\n"), profile.load("gan3d"), OFFERS, PlacementRequest(provider="gcp", gpus=4))
    assert any(p.offer.instance_type == "a3-highgpu-4g" for c in spot.candidates for p in c.layout.pools)  # spot may use them


@pytest.mark.parametrize("accelerator", ["V100", "H100", "T4"])
def test_7_gke_gpu_pools_carry_no_explicit_gpu_taint(accelerator):
    _, _, resources, _ = render("gcp", accelerator, 8, True, region="us-central1")
    for pool in of_type(resources, "nodePool:NodePool"):
        taints = pool["inputs"]["nodeConfig"].get("taints") or []
        assert not [t for t in taints if t["key"] == "nvidia.com/gpu"], pool["name"]
    for group in of_type(resources, "RayCluster")[0]["inputs"]["spec"]["workerGroupSpecs"]:
        assert GPU_TAINT in group["template"]["spec"]["tolerations"]  # GKE's own taint is still tolerated


def test_8_tpu_runtime_names_match_the_generation():
    tpu = facts.load("gcp-tpu")
    for o in OFFERS:
        if not o.is_tpu:
            continue
        name = tpu.tpu_runtime("2.18.0", o.accelerator)
        generation = o.accelerator.removeprefix("tpu-").rsplit("-", 1)[0]
        suffix = "v5e-and-v6" if generation in ("v5litepod", "v6e") else "v5p-and-below"
        assert re.fullmatch(rf"tpu-vm-tf-2\.18\.0(-pod)?-pjrt-{suffix}", name), (o.accelerator, name)
    with pytest.raises(BurstError, match="no TPU runtime image is known for TensorFlow 2.99.0"):
        tpu.tpu_runtime("2.99.0", "tpu-v3-8")


@pytest.mark.parametrize("accelerator, driver", [("V100", "DEFAULT"), ("T4", "DEFAULT"), ("H100", "LATEST"), ("L4", "LATEST")])
def test_9_gpu_driver_branch_suits_the_generation(accelerator, driver):
    _, _, resources, _ = render("gcp", accelerator, 8, True, region="us-central1")
    for pool in of_type(resources, "nodePool:NodePool"):
        if pool["name"] != "system":
            config = pool["inputs"]["nodeConfig"]["guestAccelerators"][0]["gpuDriverInstallationConfig"]
            assert config["gpuDriverVersion"] == driver


def test_11_a_prebuilt_image_replaces_the_install_at_job_start():
    image = "us-central1-docker.pkg.dev/proj/burst/runtime:0.1.0"
    _, _, resources, result = render("gcp", "V100", 8, True, region="us-central1", image=image)
    spec = of_type(resources, "RayCluster")[0]["inputs"]["spec"]
    assert spec["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == image
    assert all(g["template"]["spec"]["containers"][0]["image"] == image for g in spec["workerGroupSpecs"])
    assert result["image"] == image
    gke = targets.get("gcp")
    handle = ClusterHandle(name="g", provider="gcp", cluster_id="c", storage_uri="gs://b", state="running", layout={"count": 8, "gpus_per_worker": 8})
    assert any(p.startswith("tensorflow") for p in gke.job_runtime(handle).runtime_env["pip"])  # stock image: installs
    handle.outputs["image"] = image
    assert not gke.job_runtime(handle).runtime_env  # prebuilt image: nothing to install, no source shipped

def test_11_the_dockerfile_pins_what_burst_runs_with():
    from importlib.metadata import version

    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert f"ARG TENSORFLOW_VERSION={version('tensorflow')}" in dockerfile  # the TensorFlow the suite ran with
    assert f"ARG RAY_VERSION={version('ray')}" in dockerfile and "FROM rayproject/ray:${RAY_VERSION}-py311-gpu" in dockerfile
    assert '"tensorflow[and-cuda]==${TENSORFLOW_VERSION}" /tmp/wheels/burst-*.whl' in dockerfile
