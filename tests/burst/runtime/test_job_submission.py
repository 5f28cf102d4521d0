"""What a job is submitted with, as each target starts it."""

from __future__ import annotations

import pytest

from burst import targets
from burst.home.state import ClusterHandle, RunRecord
from burst.runtime import jobs
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
