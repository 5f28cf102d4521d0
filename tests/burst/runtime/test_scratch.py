"""A node's scratch space for a run (copies of the data, checkpoints before Ray takes them, the job's
work copy): private to the user, and a copy is used only when complete."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import pytest

from burst.errors import BurstError
from burst.runtime import scratch, training


@pytest.fixture
def node_tmp(tmp_path, monkeypatch):
    """The node's temp directory (shared by every user of the node)."""
    shared = tmp_path / "node-tmp"
    shared.mkdir(mode=0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    return shared


def test_scratch_is_made_private_to_the_user(node_tmp):
    where = training.node_data_dir("run-1")
    root = node_tmp / f"burst-{os.getuid()}"
    assert where == root / "data" / "run-1"
    for d in (root, root / "data"):
        assert d.stat().st_mode & 0o777 == 0o700 and d.stat().st_uid == os.getuid()


def test_a_scratch_root_prepared_by_someone_else_is_refused(node_tmp):
    root = node_tmp / f"burst-{os.getuid()}"
    root.mkdir(mode=0o777)
    root.chmod(0o777)  # another user made it first, open to all: they could read or swap our copies
    with pytest.raises(BurstError, match="is not a directory private to this user"):
        training.node_data_dir("run-1")
    root.rmdir()
    elsewhere = node_tmp / "theirs"
    elsewhere.mkdir()
    root.symlink_to(elsewhere)  # a link to a directory of theirs
    with pytest.raises(BurstError, match="a symlink"):
        training.node_scratch_dir("run-1")
    if os.geteuid() == 0:  # a directory owned by another user (root can make one to test with)
        root.unlink()
        root.mkdir(mode=0o700)
        os.chown(root, 65534, 65534)
        with pytest.raises(BurstError, match="owner uid 65534"):
            training.node_data_dir("run-1")


def _bucket(tmp_path: Path) -> list[str]:
    data = tmp_path / "bucket" / "data" / "run-1" / "train"
    data.mkdir(parents=True)
    for i in range(3):
        (data / f"part{i}.h5").write_bytes(bytes([i]) * 100_000)
    return [f"{data.as_uri()}/part{i}.h5" for i in range(3)]


def test_a_partial_copy_left_by_a_killed_worker_is_copied_again(node_tmp, tmp_path):
    files = _bucket(tmp_path)
    partial = training.node_data_dir("run-1")
    partial.mkdir()
    (partial / "part0.h5").write_bytes(b"\0" * 10)  # the worker died while copying: one file, cut short
    local = training.local_files(tuple(files), "run-1")
    assert [p.read_bytes() for p in local] == [bytes([i]) * 100_000 for i in range(3)]
    assert (partial / scratch.COMPLETE).exists()
    (local[0]).write_bytes(b"changed")  # a complete copy is reused as it is, not copied again
    assert training.local_files(tuple(files), "run-1")[0].read_bytes() == b"changed"


def test_workers_of_one_node_copying_at_once_share_one_complete_copy(node_tmp, tmp_path):
    files = _bucket(tmp_path)
    results, errors = [], []

    def worker():
        try:
            results.append(training.local_files(tuple(files), "run-1"))
        except Exception as exc:  # noqa: BLE001 - checked below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 4
    assert all(r == results[0] for r in results)
    assert [p.read_bytes() for p in results[0]] == [bytes([i]) * 100_000 for i in range(3)]
    assert sorted(p.name for p in results[0][0].parent.parent.iterdir()) == ["run-1"]  # no temporary copy left


def test_fresh_empties_what_an_earlier_attempt_left(node_tmp):
    work = scratch.run_path("work", "run-1")
    work.mkdir()
    (work / "half.h5").write_bytes(b"x")
    assert list(scratch.fresh(work).iterdir()) == []
    assert work.stat().st_mode & 0o777 == 0o700


HOLDER = """
import sys, time
from burst.runtime import scratch
for kind, run in (("checkpoints", sys.argv[1]), ("data", sys.argv[1]), ("data", sys.argv[1] + "-val")):
    path = scratch.run_path(kind, run)
    path.mkdir()
    (path / "part.h5").write_bytes(b"x")
print("ready", flush=True)
time.sleep(120)
"""


def _holder(node_tmp, run_id):
    """A process of a run on this node (a driver, a worker) that made its scratch and still runs."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", HOLDER, run_id], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(node_tmp)})
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_sweep_removes_the_scratch_of_runs_whose_processes_were_killed_and_keeps_the_rest(node_tmp):
    root = node_tmp / f"burst-{os.getuid()}"
    alive, killed = _holder(node_tmp, "alive"), _holder(node_tmp, "killed")
    try:
        killed.kill()  # SIGKILL: as Slurm after a cancelled allocation's KillWait; nothing of it ran its clean-up
        killed.wait()
        assert (root / "data" / "killed" / "part.h5").exists()
        older = root / "work" / "older"  # a run's scratch from before runs held theirs
        older.mkdir(parents=True)
        half = root / "data" / ".killed.x1y2"  # a copy the killed worker was filling
        half.mkdir()
        (root / "synthetic" / "synthetic-gan3d-200").mkdir(parents=True)  # events kept across runs
        (root / "0123456789ab" / "session_latest").mkdir(parents=True)  # Ray's session directory (XDG_RUNTIME_DIR unset)
        assert scratch.sweep() == ["killed", "killed-val", "older"]
        assert not (root / "data" / "killed").exists() and not (root / "checkpoints" / "killed").exists() and not half.exists()
        assert not older.exists() and sorted(p.name for p in (root / "held").iterdir()) == ["alive", "alive-val"]
        assert (root / "data" / "alive" / "part.h5").exists() and (root / "checkpoints" / "alive" / "part.h5").exists()
        assert (root / "synthetic" / "synthetic-gan3d-200").exists() and (root / "0123456789ab" / "session_latest").exists()
    finally:
        alive.kill()
        alive.wait()
    assert scratch.sweep() == ["alive", "alive-val"]  # its last process gone
    assert [list((root / kind).iterdir()) for kind in ("checkpoints", "data", "work", "held")] == [[], [], [], []]


def test_a_run_taken_up_again_after_a_sweep_holds_its_scratch_anew(node_tmp):
    root = node_tmp / f"burst-{os.getuid()}"
    killed = _holder(node_tmp, "run-1")
    killed.kill()
    killed.wait()
    assert "run-1" in scratch.sweep()
    restarted = _holder(node_tmp, "run-1")  # Ray Train restarts the run's worker on this node
    try:
        assert scratch.sweep() == [] and (root / "checkpoints" / "run-1" / "part.h5").exists()
    finally:
        restarted.kill()
        restarted.wait()


def test_this_process_s_own_run_is_never_swept(node_tmp):
    work = scratch.run_path("work", "mine")
    work.mkdir()
    assert scratch.sweep() == [] and work.exists()


def test_a_driver_that_ends_leaves_no_lock_and_keeps_what_its_run_did_not_remove(node_tmp):
    import subprocess
    import sys

    root = node_tmp / f"burst-{os.getuid()}"
    worker = _holder(node_tmp, "still-trains")  # another run's worker on this node
    try:
        (root / "held" / "ended-worker").touch()  # a lock its worker, now ended, held
        code = ("from burst.runtime import scratch; import shutil\n"
                "for run in ('done', 'unpublished'): scratch.run_path('work', run).mkdir()\n"
                "shutil.rmtree(scratch.run_path('work', 'done'))\n"  # a run removes its copies when it ends well
                "scratch.release_all()")
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(node_tmp)}, check=True)
        # the locks of what ended are gone; the running worker's stay, and so does the work copy
        # whose results could not be published, with its lock, until the next sweep
        assert sorted(p.name for p in (root / "held").iterdir()) == ["still-trains", "still-trains-val", "unpublished"]
        assert (root / "work" / "unpublished").exists()
    finally:
        worker.kill()
        worker.wait()
