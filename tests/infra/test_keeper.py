"""The keeper that runs inside a cluster (``infra.keeper``), run for real from its source, as the
pods and TPU hosts run it (``python -c SOURCE``), against a recording stand-in for the APIs it
calls (the Kubernetes API server, GCE's metadata server and the Cloud TPU API, the Ray head's Jobs
API): it deletes its own cluster at the lease's end and after the idle time, and nothing else; it
decides idleness only on an answer; a failed delete is tried again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from infra import keeper


class Stand_in(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.calls: list[tuple[float, str, str, str]] = []  # (when, method, path, Authorization)
        self.jobs = lambda: []            # what the Jobs API answers (an exception: HTTP 500)
        self.delete_status = [200]        # answers to DELETE, in turn (the last repeats)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def deletes(self) -> list[tuple[float, str, str, str]]:
        return [c for c in self.calls if c[1] == "DELETE"]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.server.calls.append((time.time(), "GET", self.path, self.headers.get("Authorization", "")))
        if self.path == "/api/jobs/":
            try:
                return self._answer(200, self.server.jobs())
            except Exception:  # noqa: BLE001 - the head answers 500
                return self._answer(500, {"error": "head overloaded"})
        if self.path.endswith("/instance/service-accounts/default/token"):
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._answer(403, {"error": "missing Metadata-Flavor"})
            return self._answer(200, {"access_token": "tpu-sa-token", "expires_in": 3599, "token_type": "Bearer"})
        self._answer(404, {})

    def do_DELETE(self):
        self.server.calls.append((time.time(), "DELETE", self.path, self.headers.get("Authorization", "")))
        statuses = self.server.delete_status
        status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
        self._answer(status, {"kind": "Status", "status": "Success" if status < 300 else "Failure"})


@pytest.fixture
def api():
    server = Stand_in()
    yield server
    server.shutdown()


@pytest.fixture
def account(tmp_path):
    path = tmp_path / "serviceaccount"
    path.mkdir()
    (path / "token").write_text("pod-sa-token\n")
    return path


def start(args: list[str], api: Stand_in, account=None, **env) -> subprocess.Popen:
    """The keeper from its source, as a pod runs it."""
    environ = {**os.environ, "BURST_KEEPER_POLL_S": "0.1", "BURST_KEEPER_RETRY_S": "0.3", "BURST_KEEPER_KUBE_API": api.url,
               "BURST_KEEPER_METADATA": f"{api.url}/computeMetadata/v1", "BURST_KEEPER_TPU_API": f"{api.url}/v2", **env}
    if account is not None:
        environ["BURST_KEEPER_SERVICE_ACCOUNT"] = str(account)
    return subprocess.Popen([sys.executable, "-c", keeper.source(), *args], env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd="/")


def test_at_the_lease_s_end_it_deletes_its_own_raycluster_and_nothing_else(api, account):
    expires = time.time() + 1.5
    proc = start(["--end", "kube", "--namespace", "physics", "--name", "burst-lab", "--expires", str(expires)], api, account)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    (delete,) = api.deletes()
    assert delete[1:] == ("DELETE", "/apis/ray.io/v1/namespaces/physics/rayclusters/burst-lab", "Bearer pod-sa-token")
    assert delete[0] >= expires and [c for c in api.calls if c[1] != "DELETE"] == []
    assert "cluster ended: its lease ended" in out


def test_after_its_idle_time_it_deletes_its_cluster_but_never_while_a_job_runs(api, account):
    running_until = time.time() + 2.0
    api.jobs = lambda: ([{"status": "RUNNING", "end_time": None}] if time.time() < running_until else
                        [{"status": "SUCCEEDED", "end_time": int(running_until * 1000)}])
    proc = start(["--end", "kube", "--namespace", "physics", "--name", "burst-lab", "--idle-minutes", "0.02",
                  "--dashboard", api.url, "--token-env", "RAY_TOKEN"], api, account, RAY_TOKEN="the-ray-token")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    (delete,) = api.deletes()
    assert delete[0] >= running_until + 0.02 * 60  # idle for 1.2 s after the job ended, not while it ran
    asked = [c for c in api.calls if c[2] == "/api/jobs/"]
    assert asked and all(c[3] == "Bearer the-ray-token" for c in asked)
    assert "cluster ended: no job for 0.02 minute(s)" in out


def test_a_head_that_does_not_answer_is_never_taken_for_idle(api, account):
    def overloaded():
        raise RuntimeError("500")

    api.jobs = overloaded
    proc = start(["--end", "kube", "--namespace", "physics", "--name", "burst-lab", "--idle-minutes", "0.005",
                  "--dashboard", api.url], api, account)
    time.sleep(3.0)  # ten times its idle time, every look unanswered
    proc.kill()
    out, _ = proc.communicate(timeout=10)
    assert api.deletes() == [] and "no idle decision on this look" in out


def test_a_tpu_slice_deletes_its_own_node_with_its_own_service_account(api):
    expires = time.time() + 1.0
    proc = start(["--end", "tpu", "--project", "proj", "--zone", "us-central1-a", "--name", "burst-t-lease0", "--expires", str(expires)], api)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    (delete,) = api.deletes()
    assert delete[1:] == ("DELETE", "/v2/projects/proj/locations/us-central1-a/nodes/burst-t-lease0", "Bearer tpu-sa-token")


def test_a_delete_the_api_refuses_is_tried_again_until_it_takes(api, account):
    api.delete_status = [503, 503, 200]
    proc = start(["--end", "kube", "--namespace", "physics", "--name", "burst-lab", "--expires", str(time.time())], api, account)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert len(api.deletes()) == 3 and out.count("ending the cluster failed") == 2 and "HTTP 503" in out
