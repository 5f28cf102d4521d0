"""`burst logs RUN` of a run whose Ray head was killed (issue 64, finding 16): before, it failed with
"cannot reach the Ray cluster" for as long as the dead cluster's record remained (until `burst
down`), though the job's log was still on this machine. Tried as a user would: a real local
cluster, a real job on it, every process of the cluster SIGKILLed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def burst(*args, home: Path, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, "BURST_HOME": str(home)})


@pytest.mark.slow
def test_the_log_of_a_run_whose_head_was_killed_is_read_from_this_machine(tmp_path):
    from burst.home import state
    from burst.home.state import ClusterHandle, RunRecord
    from burst.client import jobs
    from burst.runtime.ray_head import cluster_processes
    from tests.support.cli_runs import wait_until

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    up = burst("up", "--provider", "local", "--name", "h", "--cpus", "1", "--json", home=home, cwd=cwd)
    assert up.returncode == 0, up.stderr
    handle = ClusterHandle(**json.loads(up.stdout))
    try:
        client = jobs.client(handle)
        job_id = client.submit_job(entrypoint="python -c \"print('epoch 1 of the run, said by its driver', flush=True); "
                                              "import time; time.sleep(600)\"")
        wait_until(lambda: "epoch 1 of the run" in client.get_job_logs(job_id), 60, "the job's first line")
        os.environ["BURST_HOME"] = str(home)
        try:
            with state.locked():
                state.save(RunRecord(run_id="r1", workload="gan3d", cluster="h", provider="local", state="RUNNING", job_id=job_id,
                                     storage_uri=handle.storage_uri))
        finally:
            del os.environ["BURST_HOME"]
        for p in cluster_processes(handle.cluster_id, handle.temp_dir):  # a crash: nothing of the cluster runs its clean-up
            try:
                p.kill()
            except Exception:  # noqa: BLE001 - gone already
                pass
        time.sleep(1)
        logs = burst("logs", "r1", home=home, cwd=cwd)
        assert logs.returncode == 0, logs.stderr
        assert "epoch 1 of the run, said by its driver" in logs.stdout
        assert logs.stderr.startswith("note: cluster 'h' does not answer; the log below is the copy kept at ")
        assert f"job-driver-{job_id}.log" in logs.stderr
    finally:
        burst("down", "h", home=home, cwd=cwd)
