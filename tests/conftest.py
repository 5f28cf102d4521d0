"""Shared fixtures: small real-format data sets written once per test session; and how the suite
shares this machine between pytest-xdist's workers (``pytest -n auto``, what the README runs)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

from tests.support import census

# No test may reach a cloud (scrubbed environment + a guard that fails any test that tried);
# pytester runs the guard's own tests.
pytest_plugins = ["tests.support.cloud_guard", "pytester"]

MAX_WORKERS = 4
_runtime_dir: str | None = None  # this test process's Ray runtime root (pytest_configure)


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker more than the cores (at most 4), and none where the census could not
    tell two workers' processes apart (no control groups here: the suite then runs one test at a
    time). One per core left 10 to 13 % of the cores idle (`vmstat`): an end-to-end test waits on
    clocks, queues and process starts, and the spare worker's tests fill those stretches."""
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2 or not census.groups_available():
        return 0
    return min(cpus + 1, MAX_WORKERS)


def pytest_configure(config) -> None:
    # The stand-ins (kubectl, helm, ssh, pulumi, gcloud) are Python scripts started as
    # `#!/usr/bin/env python3`: the suite's own interpreter first on the path runs them directly,
    # where a version manager's shim (pyenv's is a bash script) would cost each call a shell.
    here = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != here:
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
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
    slow_in_file = Counter(_file(item.nodeid) for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: (-slow_in_file[_file(item.nodeid)], item.get_closest_marker("slow") is None))


def _file(nodeid: str) -> str:
    return nodeid.split("::")[0]


_CPU_START = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    cpu = census.cpu_seconds()
    if cpu is not None:
        item.stash[_CPU_START] = cpu


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test's CPU time, from its setup to its teardown, its clusters', daemons' and subprocesses'
    included (what its process's control group used meanwhile; a module fixture counts with the
    first test that uses it): it travels to the controller with the teardown's report."""
    outcome = yield
    if call.when == "teardown" and _CPU_START in item.stash and (now := census.cpu_seconds()) is not None:
        outcome.get_result().user_properties.append(("cpu_s", round(now - item.stash[_CPU_START], 1)))


def pytest_terminal_summary(terminalreporter) -> None:
    """Where the suite's CPU time goes (the 2 cores are busy through a run: the sum, not the wall
    clock, is what a shorter suite must cut): the heaviest tests and files."""
    cpu = {r.nodeid: props["cpu_s"] for reports in terminalreporter.stats.values() for r in reports
           if getattr(r, "when", None) == "teardown" and "cpu_s" in (props := dict(getattr(r, "user_properties", ())))}
    if not cpu:
        return
    files: Counter[str] = Counter()
    for nodeid, seconds in cpu.items():
        files[_file(nodeid)] += seconds
    if os.environ.get("BURST_TEST_CPU_JSON"):  # every test's figure, for a closer look than the 30 below
        Path(os.environ["BURST_TEST_CPU_JSON"]).write_text(json.dumps(dict(sorted(cpu.items(), key=lambda kv: -kv[1])), indent=0))
    terminalreporter.write_sep("=", f"CPU time: {sum(cpu.values()):.0f} s in {len(cpu)} tests")
    for nodeid, seconds in sorted(cpu.items(), key=lambda kv: -kv[1])[:30]:
        terminalreporter.write_line(f"{seconds:8.1f}s cpu {nodeid}")
    terminalreporter.write_line("by file:")
    for path, seconds in files.most_common(15):
        terminalreporter.write_line(f"{seconds:8.1f}s cpu {path}")


@pytest.fixture(scope="session")
def tiny_h5(tmp_path_factory):
    """Two synthetic files of 48 events each, in the CERN layout."""
    from workloads.gan3d.synthetic import write_dataset

    out = tmp_path_factory.mktemp("tiny_h5")
    write_dataset(out, 96, seed=11, events_per_file=48)
    return out
