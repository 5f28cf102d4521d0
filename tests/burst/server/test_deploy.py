"""`burst server deploy`: the server as a group installs it. The Kubernetes manifests pass the pinned
Kubernetes schemas; the systemd unit's command starts a real server; every rendering starts the
server with words the real command line takes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

from burst.runtime.ray_head import free_port
from tests.support.kube_schemas import invalid


def burst(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("flags", [(), ("--db", "postgresql+psycopg://burst:pw@db.physics:5432/burst", "--tls-secret", "burst-tls",
                                        "--replicas", "2", "--namespace", "physics")])
def test_the_kubernetes_manifests_pass_the_pinned_schemas_and_keep_the_database_url_in_a_secret(flags, tmp_path):
    proc = burst("server", "deploy", "kubernetes", "--image", "registry.cern.ch/burst/server:0.1.0", *flags)
    assert proc.returncode == 0, proc.stderr
    docs = list(yaml.safe_load_all(proc.stdout))
    assert {d["kind"]: invalid(d) for d in docs} == {d["kind"]: [] for d in docs}
    kinds = [d["kind"] for d in docs]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    if "--db" in flags:
        assert kinds == ["PersistentVolumeClaim", "Secret", "Deployment", "Service"]
        (secret,) = [d for d in docs if d["kind"] == "Secret"]
        assert secret["stringData"]["url"] == flags[1]
        assert flags[1] not in json.dumps(deployment)  # the pod reads it from the Secret
        assert container["env"] == [{"name": "BURST_SERVER_DB", "valueFrom": {"secretKeyRef": {"name": "burst-server-db", "key": "url"}}}]
        assert "--cert" in container["args"] and "--insecure-http" not in container["args"]
        assert deployment["spec"]["replicas"] == 2 and all(d["metadata"]["namespace"] == "physics" for d in docs)
    else:
        assert kinds == ["PersistentVolumeClaim", "Deployment", "Service"] and "--insecure-http" in container["args"]
    # the real command line takes the container's words (the mounted files here, in a directory of
    # this test's): they get as far as opening the database
    here = {"/var/lib/burst": str(tmp_path / "state"), "/etc/burst/tls/tls.crt": str(tmp_path / "tls.crt"),
            "/etc/burst/tls/tls.key": str(tmp_path / "tls.key")}
    for path in here.values():
        if path.endswith((".crt", ".key")):
            open(path, "w").close()
    proc = burst(*[here.get(a, a) for a in container["args"]], "--db", "nosuchdb://x")
    assert proc.returncode != 0 and "give --db postgresql+psycopg://USER@HOST/DB or sqlite:///PATH" in proc.stderr, proc.stderr
    assert not (tmp_path / "state").exists()  # nothing made before the database was known to be wrong


def test_the_systemd_unit_starts_a_server_that_answers(tmp_path):
    port = free_port()
    proc = burst("server", "deploy", "systemd", "--user", "burst", "--data", str(tmp_path / "srv"), "--port", str(port))
    assert proc.returncode == 0, proc.stderr
    unit = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert unit["User"] == "burst" and unit["Restart"] == "on-failure" and unit["EnvironmentFile"] == "/etc/burst/server.env"  # a missing file stops the start
    assert unit["KillMode"] == "process"  # stopping the server leaves the members' controllers and clusters running
    server = subprocess.Popen(shlex.split(unit["ExecStart"]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline, answer = time.time() + 60, None
        while time.time() < deadline and answer is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/me", timeout=5)
            except urllib.error.HTTPError as exc:
                answer = exc.code
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.3)
        assert answer == 401  # a server, asking for a token
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    refused = burst("server", "deploy", "systemd", "--host", "10.0.0.5")
    assert refused.returncode != 0 and "give --cert and --key" in refused.stderr


def test_the_container_runs_the_server_as_a_user_on_its_volume_and_says_it_speaks_plain_http():
    proc = burst("server", "deploy", "container")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "USER 10001" in lines and "VOLUME /var/lib/burst" in lines and "EXPOSE 8467" in lines
    cmd = json.loads(next(line for line in lines if line.startswith("CMD "))[4:])
    assert cmd[:2] == ["server", "start"] and "--insecure-http" in cmd  # told in so many words, as the server requires
