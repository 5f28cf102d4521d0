"""The CLI's contract for bad input: one clear line, exit code 2, no traceback; lazy imports."""

import os
import subprocess
import sys

import pytest


def burst(*args, home, cwd=None, timeout=60):
    env = {**os.environ, "BURST_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["up", "--provider", "mars"], "unknown provider 'mars'"),
        (["up", "--provider", "gcp", "--accelerator", "V100", "--gpus", "8", "--region", "us-central1"], "cannot create a cluster on gcp"),
        (["up", "--cpus", "0"], "--cpus must be a positive"),
        (["up", "--provider", "local", "--gpus", "64"], "--gpus 64: this machine has"),
        (["train", "nope"], "unknown workload 'nope'"),
        (["train", "gan3d", "--cluster", "ghost"], "no cluster named 'ghost'"),
        (["train", "gan3d", "--epochs", "0"], "--epochs must be a positive"),
        (["train", "gan3d", "--preset", "huge"], "unknown preset 'huge'"),
        (["train", "gan3d", "--data", "/no/such/dir"], "no such file or directory"),
        (["run", "gan3d", "--provider", "mars"], "unknown provider 'mars'"),
        (["up", "--provider", "gcp", "--accelerator", "V100", "--gpus", "8", "--region", "us-central1", "--policy", "policies/eu-only.yaml",
          "--dry-run"], "region us-central1 is not allowed by the policy"),
        (["up", "--provider", "gcp", "--accelerator", "V100", "--gpus", "256", "--region", "us-central1", "--dry-run"], "over the policy's max_gpus 128"),
        (["up", "--provider", "gcp", "--accelerator", "V100", "--gpus", "8", "--region", "us-central1", "--preemptible", "--policy",
          "policies/deadline.yaml", "--dry-run"], "preemptible: never"),
        (["up", "--provider", "gcp", "--accelerator", "B200", "--gpus", "8", "--region", "us-central1", "--dry-run"], "has no accelerator 'B200'"),
        (["up", "--provider", "gcp", "--accelerator", "V100", "--gpus", "0"], "--gpus must be a positive"),
        (["up", "--provider", "local", "--dry-run"], "--dry-run renders cloud stacks"),
        (["run", "nope"], "unknown workload 'nope'"),
        (["down", "ghost"], "no cluster named 'ghost'"),
        (["logs", "no-run"], "no run named 'no-run'"),
        (["report", "no-run"], "no run named 'no-run'"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, args, fragment):
    proc = burst(*args, home=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1
    assert not list(tmp_path.glob("clusters/*.json"))  # nothing half-created


def test_non_numeric_option_is_rejected_by_typer(tmp_path):
    proc = burst("train", "gan3d", "--epochs", "many", home=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_cli_startup_imports_no_heavy_frameworks():
    code = "import sys, burst.cli; heavy = [m for m in ('tensorflow', 'ray', 'keras', 'h5py', 'matplotlib', 'psutil') if m in sys.modules]; print(heavy)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_status_with_nothing_running(tmp_path):
    proc = burst("status", "--json", home=tmp_path)
    assert proc.returncode == 0
    import json

    assert json.loads(proc.stdout) == {"clusters": [], "runs": []}
