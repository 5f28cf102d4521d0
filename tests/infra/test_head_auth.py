"""Every cloud Ray head burst renders refuses a request without its token.

Each head is started for real on this machine from what its stack renders: the KubeRay head with
the RayCluster's ``rayStartParams`` and its container's environment (the token resolved from the
rendered Secret, as the kubelet would), the TPU host by running the rendered startup script itself
with stand-ins only at the cloud boundary (metadata server, ``gcloud``, ``pip``). Only ports and
directories are made local (a fixed port or path could collide with another Ray on this machine);
nothing about authentication comes from the test. Then, from 127.0.0.1: the Jobs API (job
submission is code execution) without a token is 401, with a wrong one 403, with the token 200.
The Slurm head is asked the same in tests/burst/targets/test_slurm.py.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from burst import targets
from burst.catalog import offers as catalog
from burst.placement import layout
from burst.runtime import ray_head
from burst.targets.local import RAY_STARTUP_TIMED_OUT
from infra import render as infra_render
from tests.fakes import tpu_vm
from tests.support.ray_auth import assert_refuses_strangers

pytestmark = pytest.mark.slow


def _raw_resources(provider: str, accelerator: str, gpus):
    """The stack's resources as the program registers them (secrets unmasked: the test needs the token)."""
    lay = layout.resolve(catalog.load(), provider, accelerator, gpus, preemptible=False)
    target = targets.get(provider)
    spec = target.build_spec("t", lay, False, hours=2, lease_id="lease0123456", project="proj")
    return spec, infra_render.render(target.program(spec), stack=spec.stack_name)


def _stop(cluster_id: str, temp_dir: Path) -> None:
    survivors = ray_head.stop_processes(cluster_id, str(temp_dir))
    shutil.rmtree(temp_dir, ignore_errors=True)  # the head's session directory is outside tmp_path (short socket paths), as `burst down` removes it
    assert not survivors, f"Ray processes left: {survivors}"


@pytest.mark.parametrize("provider, accelerator, gpus", [("gcp", "V100", 8), ("azure", "T4", 4)])
def test_the_rendered_kuberay_head_refuses_requests_without_the_token(provider, accelerator, gpus):
    spec, resources = _raw_resources(provider, accelerator, gpus)
    (cluster,) = [r for r in resources if r["type"].endswith("RayCluster")]
    head = cluster["inputs"]["spec"]["headGroupSpec"]
    params = head["rayStartParams"]
    assert params.get("dashboard-host") != "0.0.0.0"
    secrets = {r["inputs"]["metadata"]["name"]: r["inputs"]["stringData"] for r in resources if r["type"] == "kubernetes:core/v1:Secret"}
    rendered_env = {}
    for item in head["template"]["spec"]["containers"][0]["env"]:
        if "value" in item:
            rendered_env[item["name"]] = item["value"]
        elif "secretKeyRef" in item.get("valueFrom", {}):
            ref = item["valueFrom"]["secretKeyRef"]
            rendered_env[item["name"]] = secrets[ref["name"]][ref["key"]]  # what the kubelet injects
    assert spec.auth_token in rendered_env.values()  # the stack's token, from the Secret
    for group in cluster["inputs"]["spec"]["workerGroupSpecs"]:  # workers join with the same token
        names = {e["name"] for e in group["template"]["spec"]["containers"][0]["env"]}
        assert {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"} <= names

    cluster_id = uuid.uuid4().hex[:12]
    temp_dir = ray_head.runtime_root() / cluster_id
    ports = ray_head.choose_ports()
    cmd = ray_head.head_command(ports, 1, 0, temp_dir)
    for key, value in params.items():  # the rendered parameters win over burst's local ones
        flag = f"--{key}"
        if flag in cmd:
            cmd[cmd.index(flag) + 1] = str(value)
        else:
            cmd += [flag, str(value)]
    env = ray_head.head_env(cluster_id, "unused", ports)
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN"):
        env.pop(name, None)  # authentication comes from the rendering alone
    env.update(rendered_env)
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, start_new_session=True)
        if proc.returncode != 0 and RAY_STARTUP_TIMED_OUT in proc.stderr:  # a busy machine: the kubelet restarts a head container that exits
            _stop(cluster_id, temp_dir)
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, start_new_session=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert_refuses_strangers(f"http://127.0.0.1:{ports['dashboard']}", spec.auth_token)
    finally:
        _stop(cluster_id, temp_dir)


def test_the_rendered_tpu_startup_script_starts_a_head_that_refuses_requests_without_the_token(tmp_path):
    from infra import tpu

    spec, resources = _raw_resources("gcp-tpu", "v3-8", None)
    (vm,) = [r for r in resources if r["type"] == "gcp:tpu/v2Vm:V2Vm"]
    (version,) = [r for r in resources if r["type"] == "gcp:secretmanager/secretVersion:SecretVersion"]
    (secret,) = [r for r in resources if r["type"] == "gcp:secretmanager/secret:Secret"]
    (reader,) = [r for r in resources if r["type"] == "gcp:secretmanager/secretIamMember:SecretIamMember"]
    assert version["inputs"]["secretData"] == spec.auth_token
    assert reader["inputs"]["role"] == "roles/secretmanager.secretAccessor"
    assert reader["inputs"]["member"] == f"serviceAccount:{vm['inputs']['serviceAccount']['email']}"  # the slice's own account only
    script = vm["inputs"]["metadata"]["startup-script"]

    cluster_id = uuid.uuid4().hex[:12]
    temp_dir = ray_head.runtime_root() / cluster_id
    ports = ray_head.choose_ports()
    token_file = tmp_path / "run" / "burst" / "ray_token"
    extra = " ".join(f"{flag} {ports[role]}" for flag, role in (
        ("--ray-client-server-port", "client server"), ("--dashboard-agent-listen-port", "dashboard agent (HTTP)"),
        ("--dashboard-agent-grpc-port", "dashboard agent (gRPC)"), ("--metrics-export-port", "metrics exporter"),
        ("--runtime-env-agent-port", "runtime-env agent"), ("--node-manager-port", "node manager"),
        ("--object-manager-port", "object manager")))
    localised = script
    for old, new in ((f"TOKEN_FILE={tpu.TOKEN_FILE}", f"TOKEN_FILE={token_file}"),
                     (f"--port={tpu.GCS_PORT}", f"--port={ports['GCS server']}"),
                     (f"--dashboard-port={tpu.DASHBOARD_PORT}", f"--dashboard-port={ports['dashboard']}"),
                     ("ray_start --head", f"ray_start --head --node-ip-address 127.0.0.1 --temp-dir {temp_dir} {extra}"),
                     ("/var/log/burst-ray.log", str(tmp_path / "ray.log")),
                     ("RAY_CHECK_S=30", "RAY_CHECK_S=3600")):  # the Ray watcher does not look during the test (test_stacks has it look)
        assert localised.count(old) == 1, old
        localised = localised.replace(old, new)
    # a second try's `ray stop`, and the watcher's, stop this head only, not every Ray on this machine; and
    # never the script itself, which carries the cluster's marker here (a VM's script does not): a first
    # `ray start` that timed out on the busy machine made the second try's stop kill the script (-15)
    stop = (f"{sys.executable} -c 'import os; from burst.runtime import ray_head; "
            f"ray_head.stop_processes(\"{cluster_id}\", \"{temp_dir}\", spare=os.getppid())'")
    assert localised.count("ray stop --force") == 2
    localised = localised.replace("ray stop --force", stop)
    env = ray_head.head_env(cluster_id, "unused", ports)
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN"):
        env.pop(name, None)  # authentication comes from the script alone
    env.update(tpu_vm.boundary(tmp_path / "vm", secret["inputs"]["secretId"], "proj", version["inputs"]["secretData"]))
    try:
        proc = subprocess.run(["bash", "-c", localised], env=env, capture_output=True, text=True, timeout=240, start_new_session=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        assert_refuses_strangers(f"http://127.0.0.1:{ports['dashboard']}", spec.auth_token)
    finally:
        tpu_vm.stop_watchers(tmp_path / "vm")
        _stop(cluster_id, temp_dir)
    assert f"gcloud secrets versions access latest --secret={secret['inputs']['secretId']} --project=proj" in tpu_vm.calls(tmp_path / "vm")
