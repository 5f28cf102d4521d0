"""What a job is submitted with, as each target starts it."""

from __future__ import annotations

import pytest

from burst import targets
from burst.home.state import ClusterHandle, RunRecord
from burst.client import jobs
from burst.runtime.job import JobConfig
from tests.support.job_submission import caught_submissions


@pytest.mark.parametrize("provider, outputs, watched", [("local", {}, False), ("slurm", {}, False), ("ray", {}, True),
                                                       ("kubernetes", {"image": "burst:1"}, True), ("gcp", {"image": "burst:1"}, True)])
def test_ray_train_watches_for_drained_nodes_only_where_something_drains_them(provider, outputs, watched, tmp_path, monkeypatch):
    """A cloud's spot notice or a Kubernetes autoscaler drains a node through Ray, and Ray Train's
    preemption watcher (an actor per run) acts on it; this machine and a Slurm allocation are never
    drained (an allocation ends by Slurm's signals), so their runs start no watcher."""
    sent = caught_submissions(monkeypatch)
    handle = ClusterHandle(name="c", provider=provider, cluster_id="c1", storage_uri=str(tmp_path), outputs=outputs)
    run = RunRecord(run_id="r", workload="gan3d", cluster="c", provider=provider)
    jobs.submit(handle, run, JobConfig(run_id="r", storage=str(tmp_path)), targets.get(provider).job_runtime(handle))
    env = sent["runtime_env"]["env_vars"]
    assert (env.get(jobs.PREEMPTION_WATCHER) != "0") is watched, env
    assert (env.get(jobs.FIXED_NODES) == "1") is not watched, env  # nor asks an autoscaler for nodes (ray_train.fixed_nodes)
    assert run.job_id == "r" and run.state == "RUNNING"


def test_a_handle_without_a_dashboard_address_reaches_no_other_cluster(tmp_path, monkeypatch):
    """Ray's Jobs client, given no address, takes RAY_ADDRESS (or the newest Ray started on this
    machine): a handle with none (a cluster still starting, a damaged record) sent burst's job
    questions, and its stop and submit, to whatever cluster that was. Here a stand-in answers at
    RAY_ADDRESS and must hear nothing."""
    from burst.errors import BurstError
    from tests.support.http_stub import Answering, serve

    heard = []

    class Other(Answering):
        def do_GET(self):
            heard.append(self.path)
            self.reply(200, b'{"ray_version": "2.60.0", "version": "4"}')

    other = serve(Other)
    try:
        monkeypatch.setenv("RAY_ADDRESS", f"http://127.0.0.1:{other.server_address[1]}")
        handle = ClusterHandle(name="c", provider="local", cluster_id="c1", storage_uri=str(tmp_path), state="starting")
        with pytest.raises(BurstError) as info:
            jobs.client(handle)
        assert str(info.value).startswith("cluster 'c' has no Ray dashboard address (state starting)")
        assert heard == []
        # the same client with the cluster's own address asks that address (the stand-in here)
        jobs.client(handle.model_copy(update={"dashboard_url": f"http://127.0.0.1:{other.server_address[1]}"}))
        assert heard
    finally:
        other.shutdown()


def test_a_head_without_an_agent_yet_is_asked_again_as_ray_asks_and_other_refusals_are_not():
    """Ray's head answers 500 "No available agent to submit job, please try again later" until a
    node's dashboard agent has registered (a run on a Slurm allocation on two busy cores met it in
    the suite). Ray's own Jobs client, against a head that says so twice: the job is submitted on
    the third try; a head that refuses for another reason is not asked again."""
    import json

    from ray.job_submission import JobSubmissionClient

    from tests.support.http_stub import Answering, serve

    posts = []

    class Head(Answering):
        def do_GET(self):
            self.reply(200, json.dumps({"version": "4", "ray_version": "2.60.0", "ray_commit": "x"}).encode())

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            posts.append(body["submission_id"])
            if body["submission_id"] == "refused":
                self.reply(500, b"Job with submission_id refused already exists.", "text/plain")
            elif len(posts) < 3:
                self.reply(500, b"No available agent to submit job, please try again later.", "text/plain")
            else:
                self.reply(200, json.dumps({"submission_id": body["submission_id"], "job_id": None}).encode())

    head = serve(Head)
    try:
        c = JobSubmissionClient(f"http://127.0.0.1:{head.server_address[1]}")
        assert jobs.submitted(c, entrypoint="true", submission_id="r1") == "r1" and posts == ["r1"] * 3
        with pytest.raises(RuntimeError, match="already exists"):
            jobs.submitted(c, entrypoint="true", submission_id="refused")
        assert posts.count("refused") == 1
    finally:
        head.shutdown()
