"""The process census that every end-to-end test ends with, as the suite runs it on its workers:
it counts what this test process started however that process hid, and nothing that another
worker started."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from tests.support import census

needs_group = pytest.mark.skipif(census._group is None, reason="no control group for this test process here (needs root and cgroups)")

# a daemon as Ray's are: forks, leaves its session, its parent exits (re-parented to init), and it drops burst's marker
DAEMON = """
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
os.environ.pop("BURST_CLUSTER", None)
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def _start_daemon(tmp_path) -> int:
    pid_file = tmp_path / "daemon.pid"
    subprocess.run([sys.executable, "-c", DAEMON, str(pid_file)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=30, check=True)
    deadline = time.monotonic() + 30
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the daemon did not start"
        time.sleep(0.05)
    return int(pid_file.read_text())


def _kill(pid: int) -> None:
    try:
        psutil.Process(pid).kill()
    except psutil.Error:
        pass


@needs_group
def test_a_daemon_this_test_started_is_counted_however_it_hid(tmp_path):
    before = census.snapshot()
    pid = _start_daemon(tmp_path)
    try:
        assert psutil.Process(pid).ppid() != os.getpid()  # not our child any more
        assert any(line.split()[0] == str(pid) for line in census.survivors(before))
        with pytest.raises(AssertionError, match=str(pid)):
            census.assert_none_left(before, settle_s=0.5)
    finally:
        _kill(pid)
    census.assert_none_left(before, settle_s=5)


@needs_group
def test_a_process_in_another_worker_s_group_is_not_counted():
    before = census.snapshot()
    other = census._group.parent / f"{census.GROUP_PREFIX}other-{os.getpid()}"  # a second worker's group, beside ours
    other.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (other / "cgroup.procs").write_text(str(proc.pid))
        time.sleep(0.1)
        assert all(line.split()[0] != str(proc.pid) for line in census.survivors(before))
    finally:
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                other.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@needs_group
def test_a_group_below_ours_that_goes_while_the_census_looks_is_skipped():
    """A break's nested pytest makes a group below its parent's and removes it when it ends, while
    the parent's census may be walking the tree (two breaks run at a time): the census must count
    what is there, never fail on a group that went between its parent's listing and its own."""
    import threading

    stop = threading.Event()

    def churn() -> None:  # a nested group, two deep, made and removed as fast as the kernel allows
        n = 0
        while not stop.is_set():
            top = census._group / f"{census.GROUP_PREFIX}churn-{n}"
            inner = top / f"{census.GROUP_PREFIX}inner"
            try:
                inner.mkdir(parents=True)
                inner.rmdir()
                top.rmdir()
            except OSError:
                pass
            n += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        deadline, looks = time.monotonic() + 2, 0
        while time.monotonic() < deadline:
            assert os.getpid() in census.members()
            looks += 1
    finally:
        stop.set()
        worker.join()
    assert looks > 100
