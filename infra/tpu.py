"""A Cloud TPU VM slice running Ray, with access to the region's store (``--provider gcp-tpu``).

``TensorflowTrainer`` cannot drive TPUs, so the workload runs as a Ray task with
``TPUStrategy`` on host 0, which drives every host's chips on a pod slice (burst.runtime.tpu).
Every host of the slice runs a startup script that installs burst from the wheel in the bucket
and starts Ray: the head on host 0 (dashboard on 127.0.0.1 only, reached through an SSH tunnel;
``TPU_SLICE_HEAD``, where the TensorFlow client runs), the others join it (``TPU_HOST`` on each).
A firewall rule lets the slice's hosts reach each other on every TCP port (Ray's GCS, raylets
and object transfers, and the TPU runtime TensorFlow's client on host 0 talks to), whatever the
network's own rules allow. No external
IP unless asked: the tunnel goes through Identity-Aware Proxy (a firewall rule lets IAP's range
reach port 22 on the slice's network tag), and the hosts reach the bucket and PyPI through a
Cloud Router with Cloud NAT of their own (without it the startup script cannot download
anything, Ray never starts, and `pulumi up` still reports success).

Every host runs Ray with its token authentication: the token is a Secret Manager secret that only
the slice's own service account may read (it may also use the bucket, and nothing else), fetched
at boot into a root-only file. The GCS listens on the host's address, where the other hosts join
it, and refuses any request without the token.
"""

from __future__ import annotations

import shlex

import pulumi
import pulumi_gcp as gcp

from .notice_hook import notice_root
from .spec import StackSpec

METADATA = "http://metadata.google.internal/computeMetadata/v1/instance/attributes"
NETWORK = "default"
IAP_RANGE = "35.235.240.0/20"  # where Identity-Aware Proxy's TCP forwarding connects from
TOKEN_FILE = "/run/burst/ray_token"  # on the host, root-only: where the startup script puts Ray's token
GCS_PORT = 6379
DASHBOARD_PORT = 8265
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]  # what the service account's roles allow is the limit


def runtime_version(spec: StackSpec) -> str:
    """The TPU VM image: chosen by the caller for the TensorFlow version and TPU generation
    (names differ per generation from TF 2.18 on); there is no safe default to guess."""
    if not spec.tpu_runtime:
        raise ValueError("a TPU stack needs spec.tpu_runtime (the TPU VM image for its TensorFlow version and generation)")
    return spec.tpu_runtime


def token_secret_id(spec: StackSpec) -> str:
    return f"{spec.slug}-ray-token"


KEEPER_PERMISSIONS = ["tpu.nodes.get", "tpu.nodes.delete", "tpu.operations.get"]  # the slice's keeper: ending a node, nothing more


def keeper_condition(spec: StackSpec) -> dict:
    """The IAM condition of the keeper's grant: this slice's own node (and the operations its delete
    starts, in its zone), by resource name, so that code on any host of any slice cannot delete
    another TPU with it. Names as Cloud TPU's API gives them: projects/P/locations/ZONE/nodes/NAME."""
    where = f"projects/{spec.project}/locations/{spec.pools[0].zone}"
    return {"title": f"burst keeper of {spec.slug}"[:100],
            "description": "only this slice's own node and its zone's operations",
            "expression": f'resource.name == "{where}/nodes/{spec.slug}" || resource.name.startsWith("{where}/operations/")'}


def keeper_args(spec: StackSpec) -> str:
    """The keeper's command line on host 0: its own node (the slice's name, in its zone), its lease, its idle time."""
    args = ["--end", "tpu", "--project", str(spec.project), "--zone", spec.pools[0].zone, "--name", spec.slug, "--expires", str(spec.expires),
            "--dashboard", f"http://127.0.0.1:{DASHBOARD_PORT}", "--token-file", TOKEN_FILE]
    if spec.idle_minutes is not None:
        args += ["--idle-minutes", str(spec.idle_minutes)]
    return " ".join(shlex.quote(a) for a in args)


def startup_script(spec: StackSpec, wheel_uri: str) -> str:
    return f"""#!/bin/bash
# burst {spec.cluster} lease {spec.lease_id}: install burst, start Ray with token authentication (head on host 0).
set -euo pipefail
md() {{ curl -sf -H 'Metadata-Flavor: Google' "{METADATA}/$1"; }}
WORKER=$(md agent-worker-number || echo 0)
export BURST_TPU_WORKER="$WORKER"  # which shards of a pod slice's input this host reads (burst.runtime.tpu)
HEAD_IP=$(md worker-network-endpoints | cut -d, -f1 | cut -d: -f3)
TOKEN_FILE={TOKEN_FILE}
install -d -m 700 "$(dirname "$TOKEN_FILE")"
(umask 077; gcloud secrets versions access latest --secret='{token_secret_id(spec)}' --project='{spec.project}' > "$TOKEN_FILE")
test -s "$TOKEN_FILE"
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$TOKEN_FILE"
gcloud storage cp '{wheel_uri}' /tmp/
python3 -m pip install --quiet /tmp/$(basename '{wheel_uri}') 'ray[default,train]=={spec.ray_version}'
# Ray gives a new raylet a fixed 30 s to register; a host still busy booting can miss them, and
# `ray start` then exits 1 with part of the node still running: stop that and try once more.
# Once started, a raylet that dies (a crash, the OOM killer) would leave the host out of the slice
# for good: keep_ray, beside it for the slice's life, starts Ray again with the same arguments when
# no raylet has run for a check (the run waits for the host meanwhile, and moves if it never comes).
RAY_CHECK_S=30
keep_ray() {{ while sleep "$RAY_CHECK_S"; do pgrep -x raylet >/dev/null || {{ echo "$(date -Is) no raylet: starting Ray again"; ray stop --force || true; ray start "$@" || true; }}; done; }}
ray_start() {{
  ray start "$@" || {{ ray stop --force || true; sleep 5; ray start "$@"; }}
  export -f keep_ray; export RAY_CHECK_S
  nohup bash -c 'keep_ray "$@"' keep-ray "$@" >> /var/log/burst-ray.log 2>&1 &
}}
if [ "$WORKER" = "0" ]; then
  # the keeper (infra.keeper, installed with burst): deletes this slice at its lease's end or when
  # idle, whatever the user's machine does; started before Ray, so a slice whose head never comes
  # up is deleted at its lease's end too (the keeper takes no idle decision while the head is silent)
  nohup python3 -m infra.keeper {keeper_args(spec)} >> /var/log/burst-keeper.log 2>&1 &
  ray_start --head --port={GCS_PORT} --dashboard-host=127.0.0.1 --dashboard-port={DASHBOARD_PORT} --resources='{{"TPU_HOST": 1, "TPU_SLICE_HEAD": 1}}'
else
  ray_start --address="$HEAD_IP:{GCS_PORT}" --resources='{{"TPU_HOST": 1}}'
fi
"""


NOTICE_WAIT_S = 20  # of the ~30 s GCE gives a preempted VM's shutdown script


def shutdown_script(root: str) -> str:
    """GCE runs it when it preempts or stops the slice: host 0 (where the training task runs) posts a
    stop notice in the cluster's notice directory ``root`` and waits for the run's checkpoint at the
    step it reached."""
    return f"""#!/bin/bash
md() {{ curl -sf -H 'Metadata-Flavor: Google' "{METADATA}/$1"; }}
[ "$(md agent-worker-number || echo 0)" = "0" ] || exit 0
python3 -m burst.runtime.notice '{root}' --action stop --source 'GCE stops the TPU slice' --wait {NOTICE_WAIT_S}
"""


def program(spec: StackSpec) -> dict:
    labels = spec.labels()
    pool = spec.pools[0]
    accelerator = pool.accelerator.removeprefix("tpu-")
    bucket = spec.store_bucket  # the region's store (infra.store): outlives the slice; the stack grants access and uploads its wheel
    wheel_name = (spec.wheel_path or "burst-0.1.0-py3-none-any.whl").rsplit("/", 1)[-1]
    wheel = gcp.storage.BucketObject("burst-wheel", bucket=bucket, name=f"dist/{spec.lease_id}/{wheel_name}",
                                     source=pulumi.FileAsset(spec.wheel_path) if spec.wheel_path else pulumi.StringAsset(""),
                                     metadata=labels)
    wheel_uri = pulumi.Output.concat("gs://", bucket, "/", wheel.name)
    account, token = host_identity(spec, bucket, labels)
    network: list = []
    if not spec.external_ip:
        router = gcp.compute.Router("nat-router", name=f"{spec.slug}-router", project=spec.project, region=spec.region,
                                    network=NETWORK, description=_describe(labels))
        network.append(router)
        network.append(gcp.compute.RouterNat(
            "nat", name=f"{spec.slug}-nat", project=spec.project, region=spec.region, router=router.name,
            nat_ip_allocate_option="AUTO_ONLY", source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES"))
        network.append(gcp.compute.Firewall(
            "iap-ssh", name=f"{spec.slug}-iap-ssh", project=spec.project, network=NETWORK, direction="INGRESS",
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["22"])], source_ranges=[IAP_RANGE],
            target_tags=[spec.slug], description=_describe(labels)))
    # the hosts reach each other (Ray joins them to host 0's head; TensorFlow's client on host 0
    # drives every host's TPU runtime): source and target are the slice's own tag, nothing else
    network.append(gcp.compute.Firewall(
        "slice-internal", name=f"{spec.slug}-slice", project=spec.project, network=NETWORK, direction="INGRESS",
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp")], source_tags=[spec.slug], target_tags=[spec.slug],
        description=_describe(labels)))
    tpu = gcp.tpu.V2Vm(
        "tpu", name=spec.slug, project=spec.project, zone=pool.zone, tags=[spec.slug],
        accelerator_type=accelerator, runtime_version=runtime_version(spec),
        scheduling_config=gcp.tpu.V2VmSchedulingConfigArgs(spot=True) if spec.preemptible else None,
        network_config=gcp.tpu.V2VmNetworkConfigArgs(network="default", enable_external_ips=spec.external_ip),
        service_account=gcp.tpu.V2VmServiceAccountArgs(email=account.email, scopes=SCOPES),
        labels=labels, metadata={"startup-script": wheel_uri.apply(lambda uri: startup_script(spec, uri)),
                                 "shutdown-script": shutdown_script(notice_root(spec.require_store(), spec.lease_id))},
        # the hosts download and read the token at boot: the NAT and the token's grant must exist before they start
        opts=pulumi.ResourceOptions(custom_timeouts=pulumi.CustomTimeouts(create="60m", delete="30m"), depends_on=[*network, *token]),
    )
    hosts = tpu.network_endpoints.apply(lambda eps: [e.ip_address for e in eps])
    pulumi.export("tpu_name", tpu.name)
    pulumi.export("zone", pool.zone)
    pulumi.export("tpu_hosts", hosts)
    pulumi.export("storage_uri", spec.require_store())
    return {"tpu": tpu, "wheel": wheel, "network": network, "account": account, "token": token}


def host_identity(spec: StackSpec, bucket: str, labels: dict) -> tuple[gcp.serviceaccount.Account, list]:
    """The slice's own service account, allowed the region's store and the Ray token's secret, and the secret itself."""
    account = gcp.serviceaccount.Account("tpu-sa", account_id=f"{spec.slug[:24]}-tpu".strip("-"), project=spec.project,
                                         display_name=f"burst TPU hosts of {spec.cluster}", description=_describe(labels))
    member = account.email.apply(lambda e: f"serviceAccount:{e}")
    condition = spec.store_condition  # a named store under a prefix: that prefix only
    access = gcp.storage.BucketIAMMember("tpu-bucket-access", bucket=bucket, role="roles/storage.objectAdmin", member=member,
                                         condition=gcp.storage.BucketIAMMemberConditionArgs(**condition) if condition else None)
    secret = gcp.secretmanager.Secret("ray-token", secret_id=token_secret_id(spec), project=spec.project, labels=labels,
                                      replication=gcp.secretmanager.SecretReplicationArgs(auto=gcp.secretmanager.SecretReplicationAutoArgs()))
    version = gcp.secretmanager.SecretVersion("ray-token-value", secret=secret.id, secret_data=pulumi.Output.secret(spec.require_token()))
    reader = gcp.secretmanager.SecretIamMember("tpu-token-access", secret_id=secret.secret_id, project=spec.project,
                                               role="roles/secretmanager.secretAccessor", member=member)
    # the keeper on host 0 deletes the slice at its lease's end: a role of its own with the three
    # permissions that takes (Cloud TPU nodes take no IAM policy of their own, so it is granted on the
    # project, to this slice's own service account, with a condition naming this node: no other TPU)
    role = gcp.projects.IAMCustomRole("tpu-keeper-role", role_id=f"burstKeeper{spec.lease_id}"[:64], project=spec.project,
                                      title=f"burst keeper of {spec.cluster}", permissions=KEEPER_PERMISSIONS,
                                      description=_describe(labels))
    keeper = gcp.projects.IAMMember("tpu-keeper", project=spec.project, role=role.name, member=member,
                                    condition=gcp.projects.IAMMemberConditionArgs(**keeper_condition(spec)))
    return account, [access, secret, version, reader, role, keeper]


def _describe(labels: dict) -> str:
    """Routers and firewall rules take no labels: the lease goes in the description."""
    return " ".join(f"{k}={v}" for k, v in labels.items())
