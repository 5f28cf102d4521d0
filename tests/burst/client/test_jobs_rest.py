"""burst reads a job's status and log over Ray's REST endpoints, without importing Ray: what it
reads is what Ray's own client reads, from a real head, refusals included."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from burst.client.jobs_rest import JobsAPI, JobsAuthError, token_headers
from burst.errors import BurstError


def _until(check, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(what)


@pytest.mark.slow
def test_a_job_read_over_rest_is_what_ray_s_client_reads_and_reading_it_imports_no_ray(tmp_path, monkeypatch):
    from ray.job_submission import JobSubmissionClient

    from burst.client import jobs
    from burst.home import state
    from burst.home.state import ClusterHandle
    from burst.runtime.ray_head import auth_headers
    from burst.targets import local
    from tests.support import census

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    before = census.snapshot()
    handle, _ = local.up("rest", cpus=1)
    try:
        ours = jobs.client(handle)
        theirs = JobSubmissionClient(handle.dashboard_url, headers=auth_headers(handle))
        said = ours.submit_job(entrypoint="echo burst-reads-this; echo and-this", submission_id="said")
        waits = ours.submit_job(entrypoint="sleep 300", submission_id="waits")
        _until(lambda: ours.get_job_status(said) == "SUCCEEDED", 120, "the short job never succeeded")
        _until(lambda: ours.get_job_status(waits) == "RUNNING", 120, "the long job never ran")

        assert ours.get_job_logs(said) == theirs.get_job_logs(said) and "burst-reads-this\nand-this" in ours.get_job_logs(said)
        assert ours.get_job_status(said) == theirs.get_job_status(said).value
        listed = {j.submission_id: j for j in ours.list_jobs()}
        assert {j.submission_id: j.status.value for j in theirs.list_jobs()} == {k: j.status for k, j in listed.items()}
        assert listed["said"].end_time and listed["waits"].end_time is None

        # a job the head never had: Ray's words, which `burst logs` reads to say the cluster was started again
        for client in (ours, theirs):
            with pytest.raises(RuntimeError, match="status code 404.*does not exist"):
                client.get_job_logs("never-submitted")

        assert ours.stop_job(waits) is True
        _until(lambda: ours.get_job_status(waits) == "STOPPED", 60, "the stopped job never showed STOPPED")
        assert ours.stop_job(waits) is False  # no longer running: as Ray's client answers
        assert theirs.get_job_status(waits).value == "STOPPED"

        # a wrong token: a refusal said in one line where any other refusal is
        with pytest.raises(JobsAuthError, match="Authentication failed by the Ray head"):
            JobsAPI(handle.dashboard_url, headers={"Authorization": "Bearer " + "0" * 64}).get_job_logs(said)
        with pytest.raises(JobsAuthError, match="Authentication required"):
            JobsAPI(handle.dashboard_url, headers={}).list_jobs()

        # what `burst status` and the web view's look do, in a process of their own: Ray never imported
        reader = ("import json, sys; from burst.client import jobs; from burst.home.state import ClusterHandle; "
                  "h = ClusterHandle.model_validate_json(sys.argv[1]); c = jobs.client(h); "
                  "print(json.dumps([jobs.job_status(c, 'said'), c.get_job_logs('said'), 'ray' in sys.modules]))")
        out = subprocess.run([sys.executable, "-c", reader, handle.model_dump_json()], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        assert json.loads(out.stdout) == ["SUCCEEDED", ours.get_job_logs(said), False]
    finally:
        local.down(handle)
    assert state.load(ClusterHandle, "rest") is None
    census.assert_none_left(before)


def test_a_head_that_does_not_answer_is_one_line_naming_the_cluster(tmp_path, monkeypatch):
    import socket

    from burst.client import jobs
    from burst.home.state import ClusterHandle

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    handle = ClusterHandle(name="gone", provider="local", cluster_id="0" * 12, state="running",
                           dashboard_url=f"http://127.0.0.1:{port}", storage_uri=str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(BurstError) as failure:
        jobs.client(handle)
    message = str(failure.value)
    assert "\n" not in message and "cannot reach the Ray cluster 'gone'" in message and "Failed to connect" in message, message


def test_the_token_is_found_where_ray_looks_for_it_and_never_over_the_caller_s(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-home\n")
    assert token_headers({}) == {}  # authentication off: nothing sent
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert token_headers({}) == {"Authorization": "Bearer from-home"}
    (tmp_path / "file").write_text("from-path")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "file"))
    assert token_headers({}) == {"Authorization": "Bearer from-path"}
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert token_headers({}) == {"Authorization": "Bearer from-env"}
    assert token_headers({"authorization": "Bearer the-caller-s"}) == {}  # the caller's own header wins
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(JobsAuthError, match="RAY_AUTH_TOKEN_PATH names .*missing, which cannot be read"):
        token_headers({})
