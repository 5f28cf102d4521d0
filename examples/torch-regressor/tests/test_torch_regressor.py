"""The regressor as its authors test it: its data, and a run through burst's command line on this
machine (burst's public interface only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    import torch_regressor  # noqa: F401 - installed (pip install -e .)
except ImportError:  # run from a checkout: the package's own source
    sys.path.insert(0, str(SRC))

pytest.importorskip("torch", reason="PyTorch is not installed: the regressor's tests skip")

from torch_regressor.workload import WORKLOAD  # noqa: E402



def test_the_data_it_makes_is_the_same_for_a_seed(tmp_path):
    import numpy as np

    train, _ = WORKLOAD.make_data(tmp_path / "a", 1500, seed=5)
    again, _ = WORKLOAD.make_data(tmp_path / "b", 1500, seed=5)
    assert sum(WORKLOAD.check_file(f) for f in WORKLOAD.list_files(train)) == 1500
    assert all(np.array_equal(np.load(a)["y"], np.load(b)["y"]) for a, b in zip(WORKLOAD.list_files(train), WORKLOAD.list_files(again)))


@pytest.mark.slow  # a real Ray cluster on this machine (burst's suite runs it; `-m "not slow"` leaves it out)
def test_burst_trains_and_judges_it_on_this_machine(tmp_path):
    env = {**os.environ, "BURST_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "burst.cli", "run", "torch_regressor.workload:WORKLOAD", "--provider", "local",
                           "--epochs", "2", "--synthetic", "2000", "--val-events", "300", "--name", "tr-own"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    metrics = next((tmp_path / "burst-runs").glob("torch-regressor-*/report/metrics.json"))
    assert json.loads(metrics.read_text())["summary"]["test_mse"] < 0.5
