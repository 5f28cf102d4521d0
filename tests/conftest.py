"""Shared fixtures: small real-format data sets written once per test session; and how the suite
shares this machine between pytest-xdist's workers (``pytest -n auto``, what the README runs)."""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

from tests.support import census

# No test may reach a cloud (scrubbed environment + a guard that fails any test that tried);
# pytester runs the guard's own tests.
pytest_plugins = ["tests.support.cloud_guard", "pytester"]

MAX_WORKERS = 4  # two workers already keep 2 cores busy (0 to 4 % idle by vmstat); more only queue
_runtime_dir: str | None = None  # this test process's Ray runtime root (pytest_configure)


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker per core (at most 4), and none where the census could not tell two
    workers' processes apart (no control groups here: the suite then runs one test at a time)."""
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2 or not census.groups_available():
        return 0
    return min(cpus, MAX_WORKERS)


def pytest_configure(config) -> None:
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 1 and not census.groups_available():
        raise pytest.UsageError(f"-n {workers}: the tests' process census needs a control group per worker, and this machine "
                                "gives none (it needs root and cgroup v2 or v1's pids); run with -n auto or without -n")
    if not (isinstance(workers, int) and workers > 0):  # a worker, or a run without workers: this process runs tests
        if census.join_own_group() is None and os.environ.get("PYTEST_XDIST_WORKER"):
            raise pytest.UsageError("a pytest-xdist worker could not make a control group of its own, so its process census would "
                                    "see the other workers' clusters; run without -n")
        # Ray's session directories of this process's clusters in a root of its own (short: Ray's
        # sockets live there), so that a test that looks at the root sees no other worker's cluster.
        global _runtime_dir
        _runtime_dir = tempfile.mkdtemp(prefix="bt", dir="/tmp")
        os.environ["XDG_RUNTIME_DIR"] = _runtime_dir


def pytest_unconfigure(config) -> None:
    census.leave_own_group()
    if _runtime_dir:
        shutil.rmtree(_runtime_dir, ignore_errors=True)


def pytest_collection_modifyitems(config, items) -> None:
    """The files with the most end-to-end tests first, so that the longest do not start last.

    Under ``-n``, pytest-xdist hands out whole files (``--dist loadfile``, in this order): a module
    fixture (a cluster, a Slurm site, a bundle) is set up once, on the one worker that runs the
    file. (pytest-xdist 3.8's ``xdist_group`` would do it per fixture, but it renames the test's
    node id, which pytest 9.2 no longer lets it do.)"""
    slow_in_file: dict[str, int] = {}
    for item in items:
        slow_in_file[item.nodeid.split("::")[0]] = slow_in_file.get(item.nodeid.split("::")[0], 0) + bool(item.get_closest_marker("slow"))
    items.sort(key=lambda item: (-slow_in_file[item.nodeid.split("::")[0]], item.get_closest_marker("slow") is None))


@pytest.fixture(scope="session")
def tiny_h5(tmp_path_factory):
    """Two synthetic files of 48 events each, in the CERN layout."""
    from workloads.gan3d.synthetic import write_dataset

    out = tmp_path_factory.mktemp("tiny_h5")
    write_dataset(out, 96, seed=11, events_per_file=48)
    return out
