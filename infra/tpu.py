"""A Cloud TPU VM slice running Ray, and a bucket (``--provider gcp-tpu``).

``TensorflowTrainer`` cannot drive TPUs, so the workload runs as a Ray task with
``TPUStrategy`` on the TPU host. Every host of the slice runs a startup
script that installs burst from the wheel in the bucket and starts Ray: the head on host 0
(dashboard on 127.0.0.1 only, reached through an SSH tunnel), the others join it. No external
IP unless asked: the tunnel goes through Identity-Aware Proxy.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from .spec import StackSpec

METADATA = "http://metadata.google.internal/computeMetadata/v1/instance/attributes"


def runtime_version(spec: StackSpec, accelerator: str) -> str:
    """TensorFlow TPU VM runtime (cloud.google.com/tpu/docs/runtimes): tpu-vm-tf-x.y.z[-pod]-pjrt."""
    if "runtime_version" in spec.extra:
        return spec.extra["runtime_version"]
    multi_host = int(accelerator.rsplit("-", 1)[1]) > 8
    return f"tpu-vm-tf-{spec.tf_version}{'-pod' if multi_host else ''}-pjrt"


def startup_script(spec: StackSpec, wheel_uri: str) -> str:
    return f"""#!/bin/bash
# burst {spec.cluster} lease {spec.lease_id}: install burst, start Ray (head on host 0).
set -euo pipefail
md() {{ curl -sf -H 'Metadata-Flavor: Google' "{METADATA}/$1"; }}
WORKER=$(md agent-worker-number || echo 0)
HEAD_IP=$(md worker-network-endpoints | cut -d, -f1 | cut -d: -f3)
gcloud storage cp '{wheel_uri}' /tmp/
python3 -m pip install --quiet /tmp/$(basename '{wheel_uri}') 'ray[default,train]=={spec.ray_version}'
if [ "$WORKER" = "0" ]; then
  ray start --head --port=6379 --dashboard-host=127.0.0.1 --dashboard-port=8265 --resources='{{"TPU_HOST": 1}}'
else
  ray start --address="$HEAD_IP:6379" --resources='{{"TPU_HOST": 1}}'
fi
"""


def program(spec: StackSpec) -> dict:
    labels = spec.labels()
    pool = spec.pools[0]
    accelerator = pool.accelerator.removeprefix("tpu-")
    bucket = gcp.storage.Bucket("storage", name=f"{spec.slug}-data", project=spec.project, location=spec.region.upper(),
                                force_destroy=True, uniform_bucket_level_access=True, labels=labels)
    wheel_name = (spec.wheel_path or "burst-0.1.0-py3-none-any.whl").rsplit("/", 1)[-1]
    wheel = gcp.storage.BucketObject("burst-wheel", bucket=bucket.name, name=f"dist/{wheel_name}",
                                     source=pulumi.FileAsset(spec.wheel_path) if spec.wheel_path else pulumi.StringAsset(""),
                                     metadata=labels)
    wheel_uri = pulumi.Output.concat("gs://", bucket.name, "/", wheel.name)
    tpu = gcp.tpu.V2Vm(
        "tpu", name=spec.slug, project=spec.project, zone=pool.zone,
        accelerator_type=accelerator, runtime_version=runtime_version(spec, accelerator),
        scheduling_config=gcp.tpu.V2VmSchedulingConfigArgs(spot=True) if spec.preemptible else None,
        network_config=gcp.tpu.V2VmNetworkConfigArgs(network="default", enable_external_ips=spec.external_ip),
        labels=labels, metadata={"startup-script": wheel_uri.apply(lambda uri: startup_script(spec, uri))},
        opts=pulumi.ResourceOptions(custom_timeouts=pulumi.CustomTimeouts(create="60m", delete="30m")),
    )
    hosts = tpu.network_endpoints.apply(lambda eps: [e.ip_address for e in eps])
    pulumi.export("tpu_name", tpu.name)
    pulumi.export("zone", pool.zone)
    pulumi.export("tpu_hosts", hosts)
    pulumi.export("storage_uri", bucket.name.apply(lambda n: f"gs://{n}"))
    return {"tpu": tpu, "bucket": bucket, "wheel": wheel}
