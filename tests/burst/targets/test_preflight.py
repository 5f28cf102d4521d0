"""The cloud pre-flight: quotas, zones and runtime images asked of the providers before anything
is created, against the providers' HTTP APIs answered from files (``tests/support/cloud_api.py``)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from burst.home import state
from burst import targets
from burst.errors import BurstError
from burst.catalog import offers as catalog
from burst.placement import layout, planner, policy, profile
from burst.placement.request import PlacementRequest
from burst.targets import azure_cloud, google_cloud
from burst.targets.base import Lease
from tests.support import cloud_api
from tests.fakes.pulumi_cli import RecordingPulumi, pulumi_command

OFFERS = catalog.load()
ROOT = Path(__file__).resolve().parents[3]


def recorded(overrides=None):
    return cloud_api.session(overrides)


def lay(provider, accelerator, gpus, region=None, preemptible=True):
    return layout.resolve(OFFERS, provider, accelerator, gpus, region=region, preemptible=preemptible)


def test_gke_quota_shortfalls_are_one_line_each_with_need_limit_and_where_to_raise_them():
    session, api = recorded()
    problems = google_cloud.gke_problems(session, "proj", lay("gcp", "V100", 128, "us-central1"), preemptible=True)
    assert problems == [
        "quota PREEMPTIBLE_NVIDIA_V100_GPUS in us-central1: the layout needs 128, the limit is 16 with 0 in use; "
        "raise it at https://console.cloud.google.com/iam-admin/quotas?project=proj",
        # Spot N1 VMs count against CPUS when the project has no PREEMPTIBLE_CPUS quota
        "quota CPUS in us-central1: the layout needs 512, the limit is 96 with 0 in use; "
        "raise it at https://console.cloud.google.com/iam-admin/quotas?project=proj",
        "quota GPUS_ALL_REGIONS in all regions: the layout needs 128, the limit is 32 with 4 in use; "
        "raise it at https://console.cloud.google.com/iam-admin/quotas?project=proj",
    ]
    # both zones of the spread layout were asked for their accelerator list
    assert sum("/zones/us-central1-a/acceleratorTypes" in u for u in api.asked) == 1
    assert sum("/zones/us-central1-b/acceleratorTypes" in u for u in api.asked) == 1


def test_gke_layout_within_quota_passes_and_on_demand_reads_the_on_demand_metric():
    session, _ = recorded()
    assert google_cloud.gke_problems(session, "proj", lay("gcp", "V100", 8, "us-central1"), preemptible=True) == []
    (line,) = google_cloud.gke_problems(session, "proj", lay("gcp", "V100", 8, "us-central1", preemptible=False), preemptible=False)
    assert line.startswith("quota NVIDIA_V100_GPUS in us-central1: the layout needs 8, the limit is 0")


def test_a_zone_that_does_not_offer_the_accelerator_is_named():
    zone_b = json.loads((cloud_api.FILES / "gcp-zone-us-central1-b-acceleratorTypes.json").read_text())
    zone_b["items"] = [i for i in zone_b["items"] if i["name"] != "nvidia-tesla-v100"]
    session, _ = recorded({"gcp-zone-us-central1-b-acceleratorTypes": zone_b})
    problems = google_cloud.gke_problems(session, "proj", lay("gcp", "V100", 128, "us-central1"), preemptible=True)
    assert problems[0].startswith("zone us-central1-b does not offer nvidia-tesla-v100 (it offers: nvidia-h100-80gb, nvidia-l4")


def test_tpu_slice_and_runtime_image_are_checked_in_the_zone():
    session, _ = recorded()
    v3 = lay("gcp-tpu", "v3-32", None)
    assert google_cloud.tpu_problems(session, "proj", v3, "tpu-vm-tf-2.18.0-pod-pjrt-v5p-and-below") == []
    (line,) = google_cloud.tpu_problems(session, "proj", v3, "tpu-vm-tf-2.18.0-pod-pjrt")
    assert line.startswith("TPU runtime tpu-vm-tf-2.18.0-pod-pjrt is not offered in europe-west4-a (TensorFlow runtimes there:")
    missing = {"acceleratorTypes": [{"type": "v2-8"}]}
    (line,) = google_cloud.tpu_problems(recorded({"tpu-europe-west4-a-acceleratorTypes": missing})[0], "proj", v3,
                                     "tpu-vm-tf-2.18.0-pod-pjrt-v5p-and-below")
    assert line == "zone europe-west4-a does not offer TPU v3-32 (it offers: v2-8)"


def test_aks_size_restrictions_and_vcpu_family_quota():
    session, api = recorded()
    problems = azure_cloud.aks_problems(session, "sub-1", lay("azure", "A100-80GB", 16, "eastus", preemptible=False), preemptible=False)
    assert problems == [
        "Standard_ND96amsr_A100_v4 is restricted for this subscription in eastus; request access at "
        "https://portal.azure.com/#view/Microsoft_Azure_Capacity/QuotaMenuBlade/~/myQuotas",
        "quota standardNDAMSv4_A100Family (vCPUs) in eastus: the layout needs 192, the limit is 0 with 0 in use; "
        "raise it at https://portal.azure.com/#view/Microsoft_Azure_Capacity/QuotaMenuBlade/~/myQuotas",
    ]
    assert any("$filter=location" in u or "%24filter=location" in u for u in api.asked)
    # Spot draws from lowPriorityCores (100 here): 4 T4 on one NC64as = 64 vCPUs fit
    assert azure_cloud.aks_problems(session, "sub-1", lay("azure", "T4", 4, "eastus"), preemptible=True) == []


def test_an_api_that_refuses_or_is_unreachable_is_one_line():
    import requests

    class Refuse(requests.adapters.BaseAdapter):
        def send(self, request, **kwargs):
            r = requests.Response()
            r.status_code, r._content, r.request, r.url = 403, b'{"error": "denied"}', request, request.url
            return r

        def close(self):
            pass

    session = requests.Session()
    session.mount("https://", Refuse())
    with pytest.raises(BurstError, match=r"answered 403 \(not allowed\): the account needs read access"):
        google_cloud.gke_problems(session, "proj", lay("gcp", "V100", 8, "us-central1"), True)
    with pytest.raises(BurstError, match="answered 404: the project, subscription or location does not exist"):
        google_cloud.gke_problems(recorded()[0], "proj", lay("gcp", "V100", 8, "europe-west4"), True)


def test_up_stops_at_the_preflight_before_anything_is_created(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj")
    monkeypatch.setattr(targets.get("gcp"), "missing_prerequisites", lambda: [])
    monkeypatch.setattr(google_cloud, "google_session", lambda: recorded()[0])
    placement = planner.pin(policy.load(None), profile.load("gan3d"), OFFERS, PlacementRequest(provider="gcp", gpus=128, accelerator="V100", preemptible=True, region="us-central1"))
    fake = RecordingPulumi()
    with pulumi_command(fake) as gke, pytest.raises(BurstError) as err:
        gke.up("big", placement, Lease(hours=2))
    assert str(err.value).startswith("pre-flight for gcp found 3 problems, nothing was created: quota PREEMPTIBLE_NVIDIA_V100_GPUS")
    assert fake.calls == []  # Pulumi never ran
    assert state.load(state.ClusterHandle, "big") is None  # nothing recorded


def test_check_without_credentials_stops_at_the_credential_boundary(tmp_path):
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "BURST_HOME": str(tmp_path / "b")}
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "up", "--provider", "gcp", "--gpus", "128", "--preemptible", "--check"],
                          capture_output=True, text=True, env=clean, cwd=ROOT, timeout=120)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and len(errors) == 1 and "Traceback" not in proc.stderr
    assert "cannot check a cluster on gcp" in errors[0] and "gcloud auth application-default login" in errors[0]
    assert "Pulumi" not in errors[0]  # the check asks the provider's APIs: no Pulumi CLI needed
    assert not (tmp_path / "b" / "clusters").exists() or not list((tmp_path / "b" / "clusters").iterdir())


def test_google_session_without_credentials_is_one_line(monkeypatch, tmp_path):
    import google.auth._default

    # the last link of google-auth's chain asks the GCE metadata server (off this machine): not here
    monkeypatch.setattr(google.auth._default, "_get_gce_credentials", lambda *a, **k: (None, None))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    with pytest.raises(BurstError, match="pre-flight: no Google Cloud credentials .*run `gcloud auth application-default login`"):
        google_cloud.google_session()


def test_azure_without_a_subscription_is_one_line_before_any_token_is_asked(monkeypatch, tmp_path):
    monkeypatch.delenv("ARM_SUBSCRIPTION_ID", raising=False)
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))
    monkeypatch.setattr(azure_cloud, "azure_session", lambda: pytest.fail("a token was asked for"))
    aks = targets.get("azure")
    with pytest.raises(BurstError, match="no Azure subscription: set ARM_SUBSCRIPTION_ID"):
        aks.preflight_problems(lay("azure", "T4", 4, "eastus"), True)
    (tmp_path / "azureProfile.json").write_text(json.dumps({"subscriptions": [{"id": "sub-9", "isDefault": True}]}))
    assert azure_cloud.azure_subscription() == "sub-9"


def test_api_check_asks_the_provider_and_creates_nothing(tmp_path, monkeypatch):
    from burst import api

    monkeypatch.setenv("BURST_HOME", str(tmp_path))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj")
    monkeypatch.setattr(targets.get("gcp"), "missing_credentials", lambda: [])
    session, calls = recorded()
    monkeypatch.setattr(google_cloud, "google_session", lambda: session)
    said = []

    class Report:
        def say(self, message):
            said.append(message)

    api.check("gcp", gpus=8, accelerator="V100", preemptible=True, region="us-central1", report=Report())
    assert said[-1] == "pre-flight: quotas, zones and images of gcp hold the layout"
    with pytest.raises(BurstError, match="pre-flight for gcp found 3 problems"):
        api.check("gcp", gpus=128, accelerator="V100", preemptible=True, region="us-central1")
    assert calls.asked and not list(tmp_path.glob("clusters/*"))  # asked the APIs, recorded nothing


def test_float16_needs_gpus_and_bfloat16_runs_everywhere():
    from burst.targets.base import JobResources

    JobResources(workers=1, gpus_per_worker=1).runs_precision("mixed_float16", "c")
    for resources, has in ((JobResources(workers=2), "none"), (JobResources(workers=1, tpu=True), "TPUs")):
        with pytest.raises(BurstError, match=f"mixed_float16 needs NVIDIA GPUs, and cluster c has {has}"):
            resources.runs_precision("mixed_float16", "c")
        for fine in (None, "auto", "float32", "mixed_bfloat16"):
            resources.runs_precision(fine, "c")


def test_a_tpu_slice_the_tpu_api_says_is_preempted_or_gone_is_lost_and_no_answer_is_no_verdict(monkeypatch):
    """Issue 86: a controller that cannot reach a slice's head asks the Cloud TPU API (nodes.get, its
    Node.State) before it waits out the blind grace: PREEMPTED, TERMINATED, RESTARTING ... or a node
    that is no longer there is a loss now, in the API's words; READY and REPAIRING are not; an API
    that does not answer is no verdict."""
    import requests

    from burst.home.state import ClusterHandle
    from burst.targets.tpu_vm import TpuVmTarget

    target = TpuVmTarget()
    handle = ClusterHandle(name="slice", provider="gcp-tpu", cluster_id="0123456789ab", state="running", accelerator="tpu-v3-32",
                           storage_uri="gs://team-bucket/burst",
                           outputs={"tpu_name": "burst-slice", "zone": "europe-west4-a", "project": "proj"})
    node = json.loads((cloud_api.FILES / "tpu-europe-west4-a-node-burst-slice.json").read_text())

    def answering(overrides=None):
        session, api = recorded(overrides)
        monkeypatch.setattr(target, "preflight_session", lambda: session)
        return api

    api = answering()
    assert not target.is_gone(handle)
    assert api.asked == ["https://tpu.googleapis.com/v2/projects/proj/locations/europe-west4-a/nodes/burst-slice"]
    answering({"tpu-europe-west4-a-node-burst-slice": {**node, "state": "PREEMPTED", "health": None}})
    assert target.is_gone(handle) and target.stopped_reason(handle) == "TPU node burst-slice preempted (PREEMPTED)"
    answering({"tpu-europe-west4-a-node-burst-slice": {**node, "state": "TERMINATED", "healthDescription": "host maintenance"}})
    assert target.stopped_reason(handle) == ("TPU node burst-slice terminated (maintenance, or a preemptible slice's end of life) "
                                             "(TERMINATED; host maintenance)")
    answering({"tpu-europe-west4-a-node-burst-slice": {**node, "state": "REPAIRING"}})
    assert not target.is_gone(handle)  # may come back: the blind grace judges it
    gone = handle.model_copy(update={"outputs": {**handle.outputs, "tpu_name": "burst-deleted"}})
    answering()
    assert target.is_gone(gone) and target.stopped_reason(gone) == "the TPU node is gone (the Cloud TPU API has no node of its name)"

    def no_answer(*args, **kwargs):
        raise requests.ConnectionError("connection refused")

    session, _ = recorded()
    monkeypatch.setattr(session, "get", no_answer)
    monkeypatch.setattr(target, "preflight_session", lambda: session)
    assert not target.is_gone(handle)
    assert not target.is_gone(handle.model_copy(update={"state": "starting"}))
