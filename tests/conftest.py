"""Shared fixtures: small real-format data sets written once per test session."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

# No test may reach a cloud (scrubbed environment + a guard that fails any test that tried);
# pytester runs the guard's own tests.
pytest_plugins = ["tests.support.cloud_guard", "pytester"]


@pytest.fixture(scope="session")
def tiny_h5(tmp_path_factory):
    """Two synthetic files of 48 events each, in the CERN layout."""
    from workloads.gan3d.synthetic import write_dataset

    out = tmp_path_factory.mktemp("tiny_h5")
    write_dataset(out, 96, seed=11, events_per_file=48)
    return out
