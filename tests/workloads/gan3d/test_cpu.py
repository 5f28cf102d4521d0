"""oneDNN is on wherever the workload runs TensorFlow, unless the user said otherwise."""

import json
import os
import subprocess
import sys

import pytest

PROBE = ("import os, json, workloads.gan3d, tensorflow\n"
         "from workloads.common.cpu import machine_facts\n"
         "print(json.dumps({'env': os.environ.get('TF_ENABLE_ONEDNN_OPTS'), **machine_facts()}))")


@pytest.mark.parametrize("user_value, expect_env, expect_on", [(None, "1", True), ("0", "0", False)])
def test_importing_the_workload_turns_onednn_on_and_respects_an_explicit_choice(user_value, expect_env, expect_on):
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if user_value is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = user_value
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["env"] == expect_env
    assert facts["onednn_enabled"] is expect_on  # asked from TensorFlow, not read from the environment
    assert facts["cpu_model"] and "sse4_2" in facts["simd"]


def test_jobs_forward_the_setting_to_ray_workers(monkeypatch):
    from burst.client import jobs
    from burst.runtime.job import JobConfig
    from burst.home.state import ClusterHandle, RunRecord
    from burst.client.jobs import JobRuntime
    from tests.support.job_submission import caught_submissions

    sent = caught_submissions(monkeypatch)
    handle = ClusterHandle(name="c", provider="local", cluster_id="x", state="running", storage_uri="/s")
    for user_value, expected in ((None, "1"), ("0", "0")):
        if user_value is None:
            monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
        else:
            monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", user_value)
        jobs.submit(handle, RunRecord(run_id="r", workload="gan3d", cluster="c", provider="local"), JobConfig(run_id="r", storage="/s"),
                    JobRuntime())
        assert sent["runtime_env"]["env_vars"]["TF_ENABLE_ONEDNN_OPTS"] == expected
