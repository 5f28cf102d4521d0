"""The classifier as its authors test it: its data, its checks, and a run through burst's command
line on this machine (burst's public interface only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    import keras_classifier  # noqa: F401 - installed (pip install -e .)
except ImportError:  # run from a checkout: the package's own source
    sys.path.insert(0, str(SRC))

from keras_classifier.workload import FEATURES, WORKLOAD



def test_the_data_it_makes_is_the_same_for_a_seed_and_checked_file_by_file(tmp_path):
    train, test = WORKLOAD.make_data(tmp_path / "a", 2500, seed=3)
    again, _ = WORKLOAD.make_data(tmp_path / "b", 2500, seed=3)
    files = WORKLOAD.list_files(train)
    assert [f.name for f in files] == ["points-0000.npz", "points-0001.npz", "points-0002.npz"]
    assert sum(WORKLOAD.check_file(f) for f in files) == 2500
    assert all(np.array_equal(np.load(a)["x"], np.load(b)["x"]) for a, b in zip(files, WORKLOAD.list_files(again)))
    assert sum(WORKLOAD.check_file(f) for f in WORKLOAD.list_files(test)) == 1000
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((3, FEATURES + 1)), y=np.zeros(3))
    with pytest.raises(ValueError, match="needs x of shape"):
        WORKLOAD.check_file(bad)


@pytest.mark.slow  # a real Ray cluster on this machine (burst's suite runs it; `-m "not slow"` leaves it out)
def test_burst_trains_and_judges_it_on_this_machine(tmp_path):
    env = {**os.environ, "BURST_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "burst.cli", "run", "keras_classifier.workload:WORKLOAD", "--provider", "local",
                           "--epochs", "2", "--synthetic", "2000", "--val-events", "300", "--name", "kc-own"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = next((tmp_path / "burst-runs").glob("keras-classifier-*/report/metrics.json"))
    assert json.loads(report.read_text())["summary"]["test_error_rate"] < 0.2


@pytest.mark.slow  # trains for real, in TensorFlow (a process of its own)
def test_burst_profile_counts_its_parameters_and_times_it_at_each_batch(tmp_path):
    """`burst profile` of the classifier, into a file of its own (the package ships its measured
    profile.yaml, which the plan keeps reading): Keras' own count of its weights, each batch timed."""
    env = {**os.environ, "BURST_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "burst.cli", "profile", "keras_classifier.workload:WORKLOAD", "--batches", "32,256",
                           "--events", "2048", "--out", str(tmp_path / "measured.yaml"), "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    width = 32  # the small preset: 16 -> 32 -> 32 -> 4, as Keras' count_params counts it
    assert result["measured"]["parameters"] == FEATURES * width + width + width * width + width + width * 4 + 4
    assert [row["batch"] for row in result["measured"]["batches"]] == [32, 256] and result["measured"]["flops_per_event"] is None
    assert not result["used_by_plan"] and "names a profile of its own" in result["note"]
    assert (tmp_path / "measured.yaml").read_text().startswith("# Placement profile of keras-classifier (keras, preset small)")
