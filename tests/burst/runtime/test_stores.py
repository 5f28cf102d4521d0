"""Stores served by real storage servers: a directory, an emulated ``gs://`` bucket (PyPI's
gcp-storage-emulator) and an emulated ``abfs://`` container (Azurite), through the same code as
the clouds' (``burst.runtime.storage``). What money and data rest on is checked on each of them:
files round-trip, trees copy both ways and between clouds, a run's newest complete checkpoint is
found in a bucket (an incomplete newer one is not taken), a managed move stages it from one cloud's
store to another's, and a run stopped by its budget on a bucket resumes on another cluster from its
final checkpoint."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.support.checkpoints import checkpoint as _checkpoint, tree as _tree
from tests.support.storage_servers import azure_store, azurite_server, gcs_server, gcs_store  # noqa: F401 (fixtures)

STORES = ["directory", "gs", "abfs"]


@pytest.fixture(params=STORES)
def store(request, tmp_path) -> str:
    if request.param == "directory":
        return str(tmp_path / "store")
    return request.getfixturevalue("gcs_store" if request.param == "gs" else "azure_store")


def _showers(tmp_path: Path, files: int, size: int) -> Path:
    """A run's dataset directory (``--data``): ``files`` random files of ``size`` bytes under ``train/``."""
    data = tmp_path / "showers"
    (data / "train").mkdir(parents=True)
    for i in range(files):
        (data / "train" / f"ele_{i}.h5").write_bytes(os.urandom(size))
    return data


def _recorder():
    """(the lines said, a Reporter that says them there)."""
    from burst.targets.base import Reporter

    said: list[str] = []
    return said, type("Said", (Reporter,), {"say": lambda self, m: said.append(m)})()


def test_files_round_trip_and_are_removed(store):
    from burst.runtime import storage

    uri = storage.join(store, "runs", "r1", "STOP")
    assert not storage.exists(uri)
    storage.write_text(uri, "budget\n")
    assert storage.exists(uri) and storage.read_text(uri) == "budget\n"
    storage.remove(uri)
    storage.remove(uri)  # absent: nothing happens
    assert not storage.exists(uri)


def test_a_tree_goes_up_and_comes_back_byte_for_byte(store, tmp_path):
    from burst.runtime import storage

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(os.urandom(300_000))
    (src / "sub" / "b.json").write_text('{"epoch": 2}')
    storage.copy_dir(str(src), storage.join(store, "tree"))
    assert storage.list_dirs(store) == ["tree"] and storage.list_dirs(storage.join(store, "tree")) == ["sub"]
    back = tmp_path / "back"
    storage.copy_dir(storage.join(store, "tree"), str(back))
    assert _tree(back) == _tree(src)
    assert storage.list_dirs(storage.join(store, "nothing-here")) == []


def test_a_tree_copies_from_one_cloud_s_store_to_the_other_s(gcs_store, azure_store, tmp_path):
    from burst.runtime import storage

    src = tmp_path / "src"
    src.mkdir()
    (src / "w.data").write_bytes(os.urandom(100_000))
    storage.copy_dir(str(src), storage.join(gcs_store, "ckpt"))
    storage.copy_dir(storage.join(gcs_store, "ckpt"), storage.join(azure_store, "ckpt"))
    back = tmp_path / "back"
    storage.copy_dir(storage.join(azure_store, "ckpt"), str(back))
    assert _tree(back) == _tree(src)


def test_the_newest_complete_checkpoint_is_found_in_any_store(store, tmp_path):
    """A bucket's checkpoints were never listed: a resume from a bucket started again at epoch 0."""
    from burst.lifecycle.runs import last_checkpoint
    from burst.runtime import storage
    from burst.runtime.job import RunFiles
    from burst.runtime.training import checkpoints_here, latest_checkpoint, progress_in

    local = tmp_path / "written"
    _checkpoint(local, "checkpoint_000000", 1)
    _checkpoint(local, "checkpoint_000001", 2, step=4)
    _checkpoint(local, "checkpoint_000002", 3, complete=False)  # a copy cut short: never resumed from
    where = RunFiles(store, "r1").ray_train_dir
    storage.copy_dir(str(local), where)
    newest = latest_checkpoint(checkpoints_here([where], tmp_path / "copies"))
    assert newest is not None and newest.name == "checkpoint_000001" and progress_in(newest) == (2, 4)
    assert last_checkpoint(store, "r1") == f"{storage.join(where, 'checkpoint_000001')} (epoch 2, step 4 of epoch 3)"


def test_a_resume_names_the_checkpoint_it_uses_checks_it_and_falls_back_to_the_final_one(store, tmp_path, monkeypatch):
    """Issue 64, finding 3, on every kind of store: a stopped run's Ray Train checkpoints were
    deleted by the store's lifecycle, its final checkpoint (runs/<id>/checkpoint, the one the stop
    message named) is still there. Before, a resume on the same store returned ray-train/<id>
    unchecked, the job started at epoch 0, and the CLI said "resuming ... from the checkpoints in".
    Now the resume checks what is there, names the checkpoint, and goes on from the final one;
    with nothing left it says it starts again; with Ray Train's own there, it reads them in place."""
    from burst.home.state import ClusterHandle, RunRecord
    from burst.lifecycle.runs import stage_checkpoint
    from burst.runtime import storage
    from burst.runtime.job import RunFiles

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    files = RunFiles(store, "r1")
    written = tmp_path / "written"
    _checkpoint(written / "ray-train", "checkpoint_000002", 3)
    final = _checkpoint(written / "run", "checkpoint", 3)  # the job copies the furthest one there when it stops
    storage.copy_dir(str(written / "ray-train"), files.ray_train_dir)
    storage.copy_dir(str(final), storage.join(files.run_dir, "checkpoint"))
    record = RunRecord(run_id="r1", workload="gan3d", cluster="a", provider="local", state="STOPPED", storage_uri=store)
    same = ClusterHandle(name="b", provider="local", cluster_id="b1", storage_uri=store)

    point = stage_checkpoint(record, same)  # Ray Train's own checkpoint is there: read in place, nothing copied
    assert point.uri == files.ray_train_dir and (point.epochs, point.step) == (3, 0)
    assert point.describe() == f"{storage.join(files.ray_train_dir, 'checkpoint_000002')} (epoch 3)"
    assert storage.list_dirs(storage.join(store, "resume")) == []

    storage.remove_tree(files.ray_train_dir)  # the lifecycle's days are over for what Ray Train wrote
    point = stage_checkpoint(record, same)
    assert point is not None and point.uri == storage.join(store, "resume", "r1") and point.epochs == 3
    assert point.describe().endswith(f"(staged from {storage.join(files.run_dir, 'checkpoint')}) (epoch 3)")
    back = tmp_path / "back"
    storage.copy_dir(storage.join(point.uri, "checkpoint_final"), str(back))
    assert _tree(back) == _tree(final)

    storage.remove_tree(point.uri)
    storage.remove_tree(storage.join(files.run_dir, "checkpoint"))
    assert stage_checkpoint(record, same) is None  # nothing left: said as such, never "resuming from" an empty directory


def test_a_move_stages_the_newest_checkpoint_from_a_gs_store_to_an_abfs_store(gcs_store, azure_store, tmp_path, monkeypatch):
    from burst.lifecycle.runs import stage_checkpoint
    from burst.runtime import storage
    from burst.runtime.job import RunFiles
    from burst.home.state import ClusterHandle, RunRecord

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    local = tmp_path / "written"
    _checkpoint(local, "checkpoint_000000", 1)
    newest = _checkpoint(local, "checkpoint_000001", 2, step=3)
    storage.copy_dir(str(local), RunFiles(gcs_store, "r1").ray_train_dir)
    record = RunRecord(run_id="r1", workload="gan3d", cluster="a", provider="local", state="LOST", storage_uri=gcs_store)
    handle = ClusterHandle(name="b", provider="local", cluster_id="b1", storage_uri=azure_store)
    staged = stage_checkpoint(record, handle).uri
    assert staged == storage.join(azure_store, "resume", "r1")
    assert storage.list_dirs(staged) == ["checkpoint_000001"]
    back = tmp_path / "back"
    storage.copy_dir(storage.join(staged, "checkpoint_000001"), str(back))
    assert _tree(back) == _tree(newest)


def test_a_tpu_run_s_checkpoints_move_and_a_tpu_run_resumes_from_a_staged_one(gcs_store, azure_store, tmp_path):
    """TPU checkpoints (epoch_0002, epoch_0002_step_000004 under tpu-checkpoints/) were never staged,
    and the TPU driver ignored a staged checkpoint: a move to or from a TPU slice started at epoch 0."""
    from burst.lifecycle.runs import stage_checkpoint
    from burst.runtime import storage
    from burst.runtime.job import JobConfig, RunFiles
    from burst.runtime.tpu import resume_point
    from burst.home.state import ClusterHandle, RunRecord

    written = tmp_path / "tpu"
    _checkpoint(written, "epoch_0001", 1)
    newest = _checkpoint(written, "epoch_0001_step_000004", 1, step=4)
    storage.copy_dir(str(written), RunFiles(gcs_store, "r1").tpu_checkpoints)
    record = RunRecord(run_id="r1", workload="gan3d", cluster="tpu", provider="gcp-tpu", state="LOST", storage_uri=gcs_store)
    staged = stage_checkpoint(record, ClusterHandle(name="b", provider="azure", cluster_id="b1", storage_uri=azure_store)).uri
    assert storage.list_dirs(staged) == ["epoch_0001_step_000004"]
    # the next attempt on a TPU slice: its own storage holds an older checkpoint of its own; the staged one is further on
    own = tmp_path / "slice-storage"
    _checkpoint(Path(RunFiles(str(own), "r1").tpu_checkpoints), "epoch_0001", 1)
    cfg = JobConfig(workload="gan3d", run_id="r1", storage=str(own), synthetic=100, resume_from=staged)
    found = resume_point(cfg, tmp_path / "local")
    assert found is not None and _tree(found) == _tree(newest)


def _gke_run_with_checkpoints(gcs_store: str, tmp_path: Path, monkeypatch):
    """Managed run r1 on GKE cluster g whose store is ``gcs_store``, two checkpoints there: (handle, run, the newest here)."""
    from burst.home import state
    from burst.unattended.managed import Attempt, ManagedRun
    from burst.runtime import storage
    from burst.runtime.job import RunFiles
    from burst.home.state import ClusterHandle, RunRecord

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    local = tmp_path / "written"
    _checkpoint(local, "checkpoint_000000", 1)
    newest = _checkpoint(local, "checkpoint_000001", 2, step=6)
    storage.copy_dir(str(local), RunFiles(gcs_store, "r1").ray_train_dir)
    gke = ClusterHandle(name="g", provider="gcp", cluster_id="lease0001", state="running", storage_uri=gcs_store, created=1.0)
    state.save(gke)
    state.save(RunRecord(run_id="r1", workload="gan3d", cluster="g", provider="gcp", state="RUNNING", storage_uri=gcs_store))
    m = ManagedRun(run_id="r1", request={}, cluster="g", budget_usd=10.0,
                   attempts=[Attempt(number=1, cluster="g", provider="gcp", region="us-central1", started=1.0, cluster_created=1.0)])
    return gke, m, newest


def _attempt_ends(how: str, gke, m, take_down, monkeypatch) -> None:
    """The controller ends run r1's attempt on ``gke``: its cluster lost, or its job stopped by the
    budget at epoch 2 step 6; ``take_down`` stands for the target's teardown."""
    from burst import controller
    from burst.lifecycle.runs import load_run

    monkeypatch.setattr(controller.Controller, "take_down", take_down)
    monkeypatch.setattr(controller.Controller, "finish", lambda self, final, message: None)
    c = controller.Controller(m)
    if how == "lost":
        c.lost(m.attempts[0], "the spot pool was reclaimed")
    else:
        stopped = type("Stopped", (), {"on_notice": False, "epoch": 2, "step": 6})()
        c.job_ended(m.attempts[0], gke, gke, load_run("r1"), "SUCCEEDED", type("Tracker", (), {"stopped": stopped})(), budget=True, lease=False)


@pytest.mark.parametrize("how", ["lost", "budget"])
def test_a_checkpoint_is_kept_before_a_cluster_whose_storage_goes_with_it_is_taken_down(how, gcs_store, azure_store, tmp_path, monkeypatch):
    """A cluster whose storage is deleted with it (a site claim; the cloud stacks' own buckets were,
    before stores outlived clusters): a move (its cluster lost) or a budget stop copies the newest
    checkpoint to this machine first, and the next attempt, on another cloud's store, resumes from
    that copy. The teardown is the stand-in: it empties the storage, as deleting a claim does."""
    from burst.home import state
    from burst import targets

    monkeypatch.setattr(type(targets.get("gcp")), "storage_outlives", lambda self, handle: False)  # what a claim says
    from burst.lifecycle.runs import kept_checkpoints, load_run, stage_checkpoint
    from burst.runtime import storage
    from burst.home.state import ClusterHandle
    from pyarrow import fs

    gke, m, newest = _gke_run_with_checkpoints(gcs_store, tmp_path, monkeypatch)
    destroyed = []

    def destroy(self, handle):  # what `pulumi destroy` does to the stack's bucket
        bucket, inner = storage.filesystem(handle.storage_uri)
        for info in bucket.get_file_info(fs.FileSelector(inner, recursive=True)):
            if info.type == fs.FileType.File:
                bucket.delete_file(info.path)
        state.delete(ClusterHandle, handle.name)
        destroyed.append(handle.name)

    _attempt_ends(how, gke, m, destroy, monkeypatch)
    assert destroyed == ["g"] and not any(i.type == fs.FileType.File for i in _listing(gcs_store))  # the bucket holds nothing now
    assert [p.name for p in kept_checkpoints("r1").iterdir()] == ["checkpoint_000001"]
    for store in (azure_store, gcs_store):  # another cloud's store; a new cluster on a store of the same name, now empty
        handle = ClusterHandle(name="a", provider="azure", cluster_id="lease0002", storage_uri=store)
        staged = stage_checkpoint(load_run("r1"), handle).uri
        back = tmp_path / "back" / store.split(":")[0]
        storage.copy_dir(storage.join(staged, "checkpoint_000001"), str(back))
        assert _tree(back) == _tree(newest)


@pytest.mark.parametrize("how", ["lost", "budget"])
def test_a_cloud_cluster_s_store_outlives_it_and_the_next_attempt_reads_the_checkpoint_there(how, gcs_store, azure_store, tmp_path, monkeypatch):
    """A GKE cluster is granted its region's store and owns no bucket: taking it down (its stack's
    destroy, the stand-in here, removes the grant and the cluster) leaves every checkpoint in the
    store, nothing is copied to this machine, and the next attempt, on another cloud's store, stages
    the newest checkpoint straight from the bucket."""
    from burst.home import state
    from burst.lifecycle.runs import kept_checkpoints, load_run, stage_checkpoint
    from burst.runtime import storage
    from burst.runtime.job import RunFiles
    from burst.home.state import ClusterHandle

    gke, m, newest = _gke_run_with_checkpoints(gcs_store, tmp_path, monkeypatch)
    destroyed = []
    _attempt_ends(how, gke, m, lambda self, handle: (state.delete(ClusterHandle, handle.name), destroyed.append(handle.name)), monkeypatch)
    assert destroyed == ["g"] and not kept_checkpoints("r1").exists()  # nothing had to be copied off
    assert sorted(storage.list_dirs(RunFiles(gcs_store, "r1").ray_train_dir)) == ["checkpoint_000000", "checkpoint_000001"]
    staged = stage_checkpoint(load_run("r1"), ClusterHandle(name="a", provider="azure", cluster_id="lease0002", storage_uri=azure_store)).uri
    back = tmp_path / "back"
    storage.copy_dir(storage.join(staged, "checkpoint_000001"), str(back))
    assert _tree(back) == _tree(newest)


def _listing(uri: str):
    from pyarrow import fs

    from burst.runtime import storage

    bucket, inner = storage.filesystem(uri)
    return bucket.get_file_info(fs.FileSelector(inner, recursive=True))


@pytest.mark.slow
def test_a_budget_stop_on_a_gs_store_resumes_on_a_cluster_whose_store_is_abfs(gcs_store, azure_store, tmp_path, monkeypatch):
    """The guard's clock is injected (no wall-clock bound anywhere): the run starts within budget,
    the next look finds the budget (less the checkpoint and tear-down reserve) spent; the workers
    agree on a step, write a final checkpoint into the emulated GCS bucket (Ray Train through the
    emulator) and stop; the cluster is torn down (exit 3). `--resume` on a cluster whose store is
    the Azure container reads that final checkpoint where it is and goes on from its step. (The
    same stop on a directory store, with the real clock: test_managed's detached run.)"""
    from tests.support import census
    from tests.support.cli_runs import burst, checkpoint_tensors, raw_events, stopped_by_budget

    home = tmp_path / "home"
    before = census.snapshot()
    handle, result = stopped_by_budget(home, tmp_path, monkeypatch, "on-gcs", "--storage", f"{gcs_store}/burst", epochs=2)
    assert handle["budget_usd"] == 1.3 and handle["hourly_usd"] == 36
    assert result.exit_code == 3, result.output[-3000:]
    assert "budget guard: $0.56 of $1.30 spent; taking a final checkpoint" in " ".join(result.output.split())
    assert "torn down" in result.output and "did not stop in time" not in result.output  # the workers stopped themselves
    assert not (home / "clusters" / "on-gcs.json").exists()  # torn down by the budget stop
    census.assert_none_left(before)  # the cluster's processes too
    (run,) = [json.loads(p.read_text()) for p in (home / "runs").glob("*.json")]
    assert run["state"] == "STOPPED_BUDGET" and run["storage_uri"] == f"{gcs_store}/burst"
    from burst.runtime import storage
    from burst.runtime.job import RunFiles

    run_dir = RunFiles(run["storage_uri"], run["run_id"]).run_dir
    stopped = json.loads(storage.read_text(storage.join(run_dir, "checkpoint", "stopped.json")))
    assert stopped["step"] % 5 == 0 and stopped["step"] >= 5  # an agreed step (the workers check every 5)
    final = tmp_path / "final-checkpoint"
    storage.copy_dir(storage.join(run_dir, "checkpoint"), str(final))
    assert list(final.glob("gan3d.data-*")) and checkpoint_tensors(final)  # whole weights, readable by TensorFlow
    # the stop request stays on the store with the checkpoint; the resume below removes it first
    # (tests/burst/lifecycle/test_budget.py checks that on its own)
    assert storage.exists(storage.join(run_dir, "STOP"))

    burst("up", "--provider", "local", "--name", "on-azure", "--cpus", "2", "--storage", f"{azure_store}/burst", home=home, cwd=tmp_path, check=True)
    try:
        resumed = burst("train", "gan3d", "--cluster", "on-azure", "--resume", run["run_id"], "--json", home=home, cwd=tmp_path, check=False)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        record = json.loads(resumed.stdout)
        assert record["state"] == "SUCCEEDED" and record["attempts"] == 2 and record["storage_uri"] == f"{azure_store}/burst"
        assert [h["epoch"] for h in json.loads((Path(record["run_dir"]) / "history.json").read_text())] == [1, 2]
        log = (Path(record["run_dir"]) / "job.log").read_text()
        starts = [e for e in raw_events(log) if e["type"] == "start"]
        assert starts and starts[0]["resumed"] is True, starts  # from the final checkpoint in the gs bucket, not from scratch
        steps = [e for e in raw_events(log) if e["type"] == "step"]
        assert steps and (steps[0]["epoch"], steps[0]["step"]) == (stopped["epoch"], stopped["step"] + 1), (steps[:2], stopped)
        # the results are in the Azure container the new cluster writes to
        assert storage.exists(storage.join(RunFiles(record["storage_uri"], run["run_id"]).run_dir, "history.json"))
    finally:
        burst("down", "on-azure", home=home, cwd=tmp_path, check=False)
    census.assert_none_left(before)


def test_a_resume_stages_the_data_the_user_gave_not_the_old_cluster_s_copy(tmp_path, monkeypatch):
    """A `--data` run on a cluster that copied the data onto its own storage (a Kubernetes claim,
    /mnt/burst/data/RUN/source) resumed with that path: every such resume failed."""
    from burst.lifecycle import runs
    from burst.home import state
    from burst.lifecycle.runs import TrainRequest
    from burst.home.state import RunRecord

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    config = {"workload": "gan3d", "epochs": 3, "data": "/mnt/burst/data/r1/source", "data_source": str(tmp_path / "showers"), "workers": 1}
    earlier = RunRecord(run_id="r1", workload="gan3d", cluster="lab", provider="kubernetes", state="LOST", storage_uri="kube://lab/ns/rc/mnt/burst",
                        config=config)
    state.save(earlier)
    request = runs._resumed(TrainRequest.of(cluster="next"), earlier)
    assert request.data == str(tmp_path / "showers") and request.epochs == 3
    older = earlier.model_copy(update={"config": {k: v for k, v in config.items() if k != "data_source"}})  # a record from before
    assert runs._resumed(TrainRequest.of(cluster="next"), older).data == "/mnt/burst/data/r1/source"


def test_a_dataset_is_staged_once_per_store_and_a_cut_copy_is_never_taken_for_complete(store, tmp_path, monkeypatch):
    """Every run copied its dataset again. Now the second run (a scan's trial, a resume, a move into
    the same store) copies 0 bytes; a copy cut short before its marker is copied again."""
    from burst import targets
    from burst.runtime import storage
    from burst.home.state import ClusterHandle

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    data = _showers(tmp_path, 3, 200_000)
    said, report = _recorder()
    handle = ClusterHandle(name="g", provider="gcp", cluster_id="lease0001", storage_uri=store)
    gke = targets.get("gcp")  # a cloud target: its nodes cannot read this machine's disk
    real_write = storage.write_text
    monkeypatch.setattr(storage, "write_text", lambda uri, text: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # killed after the files, before the marker
        gke.stage_data(handle, str(data), "r1", report)
    monkeypatch.setattr(storage, "write_text", real_write)
    first = gke.stage_data(handle, str(data), "r1", report)
    assert "600,000 of 600,000 bytes copied" in said[-1]  # the cut copy was not taken for complete
    second = gke.stage_data(handle, str(data), "r2", report)
    assert second == first and "0 of 600,000 bytes copied (already on the store)" in said[-1]
    back = tmp_path / "back"
    storage.copy_dir(first, str(back))
    assert _tree(back) == _tree(data)
    (data / "train" / "ele_0.h5").write_bytes(os.urandom(200_000))  # one file changed: another dataset
    third = gke.stage_data(handle, str(data), "r3", report)
    assert third != first and "600,000 of 600,000 bytes copied" in said[-1]
    assert len(storage.list_dirs(storage.join(store, "datasets"))) == 2


def test_a_dataset_the_lifecycle_cut_is_copied_again_keeps_its_age_and_is_never_removed_under_a_run(store, tmp_path, monkeypatch):
    """Issue 64, finding 4, on every kind of store. The lifecycle deletes objects by their own age,
    so the marker (written last) outlived files: staging reused it and the run trained on what was
    left. Reuse reset the dataset's staging time, so the plan priced a deleted copy at 0 h. And
    `burst datasets --remove` deleted a dataset a running run was reading. Now a reuse checks every
    file the marker counts (else copies again), keeps the copy's own time, and removal is refused
    while a run, or a managed run not finished, reads it."""
    from typer.testing import CliRunner

    from burst import targets
    from burst.cli import app
    from burst.home import staged as index
    from burst.home import state
    from burst.home.state import ClusterHandle, RunRecord
    from burst.runtime import storage

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    data = _showers(tmp_path, 3, 100_000)
    said, report = _recorder()
    handle = ClusterHandle(name="g", provider="gcp", cluster_id="lease0001", storage_uri=store)
    gke = targets.get("gcp")
    first = gke.stage_data(handle, str(data), "r1", report)
    (when,) = [s.staged_at for s in index._load().stagings]
    time.sleep(0.05)
    gke.stage_data(handle, str(data), "r2", report)
    assert "0 of 300,000 bytes copied (already on the store)" in said[-1]
    assert [s.staged_at for s in index._load().stagings] == [when]  # the copy's own time, not the reuse's

    storage.remove(storage.join(first, "train", "ele_1.h5"))  # the lifecycle's days are over for one file, not yet for the marker
    again = gke.stage_data(handle, str(data), "r3", report)
    assert again == first and "300,000 of 300,000 bytes copied" in said[-1]  # copied again, never trained on two files of three
    back = tmp_path / "back"
    storage.copy_dir(again, str(back))
    assert _tree(back) == _tree(data)

    key = first.rstrip("/").split("/")[-2]
    with state.locked():
        state.save(RunRecord(run_id="r3", workload="gan3d", cluster="g", provider="gcp", state="RUNNING", storage_uri=store,
                             config={"data": again}))
    refused = CliRunner().invoke(app, ["datasets", "--store", store, "--remove", key])
    assert refused.exit_code == 1 and f"dataset {key} on {store} is being read by run(s) r3; nothing was removed" in refused.output
    assert storage.tree_stats(again) == (3, 300_000)
    with state.locked():
        state.save(state.load(RunRecord, "r3").model_copy(update={"state": "SUCCEEDED"}))
    assert CliRunner().invoke(app, ["datasets", "--store", store, "--remove", key]).exit_code == 0
    assert storage.tree_stats(again) == (0, 0)


def _file_times(uri: str) -> dict[str, float]:
    """Each file's modification time under ``uri`` on any kind of store: the time a lifecycle counts."""
    from pyarrow import fs

    from burst.runtime import storage

    where, inner = storage.filesystem(uri) if storage.is_remote(uri) else (fs.LocalFileSystem(), uri)
    infos = where.get_file_info(fs.FileSelector(inner, recursive=True))
    return {i.path[len(inner):]: i.mtime.timestamp() for i in infos if i.type == fs.FileType.File}


def test_a_dataset_that_would_expire_under_a_cluster_is_copied_again_before_its_run_reads_it(store, tmp_path, monkeypatch):
    """Issue 64's last rule, on every kind of store: expiring datasets are protected while in use.
    A copy staged 85 days ago on a store that deletes datasets after 90 was reused by a cluster whose
    lease ran 10 days more: the lifecycle would delete its files under the run. Now staging copies
    such a copy again (the same bytes, new objects: their age starts over) and says so; a copy that
    outlives the lease, or a store without burst's lifecycle, is reused as it is."""
    from burst import targets
    from burst.home import staged as index
    from burst.home.state import ClusterHandle
    from burst.client import datasets
    from burst.runtime import storage

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    data = _showers(tmp_path, 2, 50_000)
    said, report = _recorder()
    gke = targets.get("gcp")
    now = time.time()
    days = 86400
    first = gke.stage_data(ClusterHandle(name="g", provider="gcp", cluster_id="lease0001", storage_uri=store), str(data), "r1", report)
    marker = storage.join(first.rstrip("/").rsplit("/", 1)[0], datasets.MARKER)
    info = json.loads(storage.read_text(marker))
    storage.write_text(marker, json.dumps({**info, "staged_at": now - 85 * days}))  # as if staged 85 days ago
    before = _file_times(first)
    time.sleep(1.1)  # the stores keep modification times to the second

    for kept in (ClusterHandle(name="g2", provider="gcp", cluster_id="lease0002", storage_uri=store, expires=now + 2 * 3600,
                               datasets_days=90),  # 85 d + 2 h: before the rule's days are over
                 ClusterHandle(name="g3", provider="gcp", cluster_id="lease0003", storage_uri=store, expires=now + 10 * days)):
        assert gke.stage_data(kept, str(data), "r2", report) == first  # no lifecycle on the record: nothing to outlive
        assert "0 of 100,000 bytes copied (already on the store)" in said[-1]
    assert _file_times(first) == before

    renewing = ClusterHandle(name="g4", provider="gcp", cluster_id="lease0004", storage_uri=store, expires=now + 10 * days,
                             datasets_days=90)
    assert gke.stage_data(renewing, str(data), "r3", report) == first
    staged_day = time.strftime("%Y-%m-%d", time.gmtime(now - 85 * days))
    assert f"was staged {staged_day} and the store deletes datasets after 90 days, before this cluster's lease ends" in said[-2]
    assert "100,000 of 100,000 bytes copied" in said[-1]
    after = _file_times(first)
    assert after.keys() == before.keys() and all(after[f] > before[f] for f in before)  # every file's age starts over
    assert json.loads(storage.read_text(marker))["staged_at"] >= now
    assert max(s.staged_at for s in index._load().stagings) >= now  # the plan sees the new copy's time
    back = tmp_path / "back"
    storage.copy_dir(first, str(back))
    assert _tree(back) == _tree(data)
    assert gke.stage_data(renewing, str(data), "r4", report) == first and "(already on the store)" in said[-1]  # renewed once


def _plan(policy: Path, data: Path) -> dict:
    from typer.testing import CliRunner

    from burst.cli import app

    result = CliRunner().invoke(app, ["plan", "--policy", str(policy), "--provider", "gcp", "--accelerator", "V100", "--gpus", "8",
                                      "--data", str(data), "--all", "--json"])
    assert result.exit_code == 0, result.output
    return {(c["region"], c["preemptible"]): c for c in json.loads(result.stdout)["candidates"]}


def test_the_plan_prices_staging_at_zero_where_the_dataset_is_already_staged(gcs_store, tmp_path, monkeypatch):
    """A second run of the same data: the plan says the store already holds it (0 h, $0 of staging),
    the staging copies 0 bytes; elsewhere, a changed dataset, or one removed from the store, is copied again."""
    from typer.testing import CliRunner

    from burst import targets
    from burst.cli import app
    from burst.home.state import ClusterHandle

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    data = tmp_path / "showers"
    data.mkdir()
    (data / "ele_0.h5").write_bytes(os.urandom(300_000))
    policy = tmp_path / "p.yaml"
    policy.write_text(f"providers: [gcp]\ndata: {{location: local, size_gb: 200, uplink_gbps: 1}}\n"
                      f"stores:\n  named:\n    'gcp:us-central1': {gcs_store}\n")
    first = _plan(policy, data)
    here, there = first[("us-central1", True)], first[("europe-west4", True)]
    assert here["breakdown"]["staging_h"] == pytest.approx(200 * 8 / 1 / 3600, rel=1e-3)  # 200 GB over 1 Gb/s
    handle = ClusterHandle(name="g", provider="gcp", cluster_id="lease0001", storage_uri=gcs_store, region="us-central1")
    targets.get("gcp").stage_data(handle, str(data), "r1")  # the first run stages it
    second = _plan(policy, data)
    staged = second[("us-central1", True)]
    assert staged["breakdown"]["staging_h"] == 0 and staged["est_hours"] < here["est_hours"]
    assert any(r.startswith(f"dataset already staged on {gcs_store} (") and r.endswith("no copy, 0 h and $0 of staging")
               for r in staged["reasons"]), staged["reasons"]
    assert second[("europe-west4", True)]["breakdown"] == there["breakdown"]  # another region's store does not hold it
    said = []
    report = type("Said", (), {"say": lambda self, m: said.append(m)})()
    targets.get("gcp").stage_data(handle, str(data), "r2", report)  # the second run copies nothing
    assert "0 of 300,000 bytes copied (already on the store)" in said[-1]
    (data / "ele_0.h5").write_bytes(os.urandom(300_000))  # changed since: another dataset, copied again
    assert _plan(policy, data)[("us-central1", True)]["breakdown"]["staging_h"] > 0
    targets.get("gcp").stage_data(handle, str(data), "r3")
    from burst.client import datasets

    key = datasets.content_key(data)
    assert _plan(policy, data)[("us-central1", True)]["breakdown"]["staging_h"] == 0
    assert CliRunner().invoke(app, ["datasets", "--store", gcs_store, "--remove", key]).exit_code == 0
    assert _plan(policy, data)[("us-central1", True)]["breakdown"]["staging_h"] > 0  # removed: the plan knows


def test_burst_s_own_region_store_forgets_a_dataset_its_lifecycle_deleted():
    from burst.placement import estimate, policy

    pol = policy.parse("stores: {datasets_days: 10}")
    store = estimate.store_of("gcp", "us-central1", pol)
    assert store.startswith("gs://burst-us-central1-")
    now = 1_800_000_000.0
    assert estimate.already_staged("gcp", "us-central1", pol, ((store, now - 9 * 86400),), now=now) is not None
    assert estimate.already_staged("gcp", "us-central1", pol, ((store, now - 11 * 86400),), now=now) is None  # deleted by the rule
    assert estimate.already_staged("gcp", "us-east1", pol, ((store, now),), now=now) is None  # another region's store


def test_burst_datasets_lists_what_is_staged_where_what_it_costs_and_removes_it(gcs_store, azure_store, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from burst.cli import app
    from burst.client import datasets
    from burst.runtime import storage

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    data = tmp_path / "showers"
    data.mkdir()
    (data / "ele_0.h5").write_bytes(os.urandom(3 * 2**20))
    on_gcs, on_azure = datasets.stage(data, gcs_store), datasets.stage(data, azure_store)
    storage.write_text(storage.join(gcs_store, "datasets", "0" * datasets.KEY_HEX, "files", "part.h5"), "cut short")  # no marker
    result = CliRunner().invoke(app, ["datasets", "--store", gcs_store, "--store", azure_store, "--json"])
    assert result.exit_code == 0, result.output
    rows = {(r["store"], r["key"]): r for r in json.loads(result.stdout)}
    assert rows[(gcs_store, on_gcs.key)]["complete"] and rows[(gcs_store, on_gcs.key)]["bytes"] == 3 * 2**20
    assert rows[(gcs_store, on_gcs.key)]["usd_per_month"] == round(3 / 1024 * 0.020, 4)   # GCS Standard
    assert rows[(azure_store, on_azure.key)]["usd_per_month"] == round(3 / 1024 * 0.018, 4)  # Blob Hot LRS
    assert rows[(gcs_store, "0" * datasets.KEY_HEX)]["complete"] is False
    result = CliRunner().invoke(app, ["datasets", "--store", gcs_store, "--remove", on_gcs.key])
    assert result.exit_code == 0 and f"dataset {on_gcs.key} (3,145,728 bytes) removed from {gcs_store}" in result.stderr, result.output
    assert [d.key for d in datasets.listed(gcs_store)] == ["0" * datasets.KEY_HEX]
    for args, line in ((["--remove", on_gcs.key], "--remove KEY needs the one store it is on"),
                       (["--store", gcs_store, "--remove", "../x"], "--remove takes a dataset key"),
                       (["--store", gcs_store, "--remove", on_gcs.key], f"no dataset '{on_gcs.key}' on {gcs_store}")):
        result = CliRunner().invoke(app, ["datasets", *args])
        assert result.exit_code == 2 and line in result.stderr, (args, result.stderr)


@pytest.mark.slow
def test_a_managed_run_moves_from_a_killed_head_on_a_gs_store_to_a_cluster_on_an_abfs_store(gcs_store, azure_store, tmp_path):
    """A managed run on a local cluster whose store is the emulated gs:// bucket checkpoints inside
    its epochs; its Ray head is SIGKILLed (every process of the cluster, as in a machine crash); the
    controller moves it to a new local cluster whose store is the emulated Azure container (the
    policy's store for this machine), stages the newest checkpoint there from the bucket, and the
    run finishes with every epoch exactly once."""
    from burst.runtime import storage
    from burst.runtime.job import RunFiles
    from burst.runtime.ray_head import cluster_processes
    from burst.unattended.managed import FINAL_STATES
    from tests.support import census
    from tests.support.cli_runs import TRAIN, burst, finished, handed_over, history_of, managed, wait_until

    before = census.snapshot()
    home = tmp_path / "home"
    home.mkdir()
    policy = tmp_path / "stores.yaml"
    policy.write_text(f"providers: [local]\nstores:\n  named:\n    local: {azure_store}/burst\n"
                      "recovery:\n  max_restarts: 1\n  loss_grace_seconds: 5\n")  # a killed head is gone, not busy: a short grace
    gs, abfs = f"{gcs_store}/burst", f"{azure_store}/burst"
    proc = burst("run", "gan3d", "--provider", "local", "--name", "mg", "--cpus", "2", "--storage", gs, "--policy", str(policy),
                 "--managed", "--detach", "--epochs", "4", "--steps", "8", "--checkpoint-every", "3", *TRAIN, home=home, cwd=tmp_path)
    run_id = handed_over(proc)

    def progressed():
        ckpts = [d for d in storage.list_dirs(RunFiles(gs, run_id).ray_train_dir) if d.startswith("checkpoint_")]
        record = json.loads((home / "runs" / f"{run_id}.json").read_text())
        assert record["state"] not in FINAL_STATES, record  # ended before its head was killed: say why now, not in 400 s
        return ((record.get("progress") or {}).get("epoch") or 0) >= 1 and len(ckpts) >= 2

    wait_until(progressed, 400, "an epoch and a checkpoint after it in the gs:// store")
    head = json.loads((home / "clusters" / "mg.json").read_text())
    assert head["storage_uri"] == gs
    killed_at = time.time()
    for p in cluster_processes(head["cluster_id"], head["temp_dir"]):
        try:
            p.kill()
        except Exception:  # noqa: BLE001 - gone already
            pass

    run = finished(home, run_id, timeout=600)
    assert run["state"] == "SUCCEEDED", run
    assert history_of(run) == [1, 2, 3, 4]  # every epoch once, across both clusters and both stores
    m = managed(home, run_id)
    attempts = m["attempts"]
    assert [(a["provider"], a["cluster"]) for a in attempts] == [("local", "mg"), ("local", "mg-2")]
    assert attempts[0]["how"].startswith("lost") and m["avoid"] == []  # this machine lost a head, not the machine
    assert run["storage_uri"] == abfs  # the second cluster's store: the policy's for this machine
    # the newest checkpoint went from the bucket to the container before the run went on
    assert any(d.startswith("checkpoint_") for d in storage.list_dirs(storage.join(abfs, "resume", run_id)))
    assert storage.exists(storage.join(RunFiles(abfs, run_id).run_dir, "history.json"))
    job_log = (Path(run["run_dir"]) / "job.log").read_text()
    starts = [json.loads(line.split("BURST_EVENT ", 1)[1]) for line in job_log.splitlines() if '"type": "start"' in line]
    assert starts and all(s["resumed"] and s["epoch"] >= 1 for s in starts), starts
    cost = json.loads((Path(run["run_dir"]) / "cost.json").read_text())
    assert [a["provider"] for a in cost["attempts"]] == ["local", "local"] and 0 < cost["recovery_s"] < 400
    # the move as times, recorded by the controller: the head's last answer before the kill, the judgement
    # after it, the next cluster up, submitted and training after that
    lost, after = attempts
    assert lost["last_seen"] <= killed_at + 1 and killed_at <= lost["ended"] <= after["cluster_up"] <= after["submitted"] <= after["first_step"]
    (move,) = cost["moves"]
    assert move["lost_attempt"] == 1 and move["next_attempt"] == 2 and move["judged_to_first_step_s"] == round(after["first_step"] - lost["ended"], 1)
    assert Path(run["run_dir"], "report", "report.html").read_text().count("<section id='moves'>") == 1
    shown = burst("status", run_id, home=home, cwd=tmp_path)
    assert shown.returncode == 0 and [line for line in shown.stdout.splitlines() if line.startswith("moved: attempt 1 on local cluster mg, last answered ")], shown.stdout
    status = burst("status", "--json", home=home, cwd=tmp_path)
    lines = json.loads(status.stdout)["moves"][run_id]
    assert any("lost after" in line and "local cluster mg " in line for line in lines), lines
    assert any("run resumed on local cluster mg-2" in line for line in lines), lines
    print(burst("status", home=home, cwd=tmp_path).stdout)  # for the record (pytest -s)
    print(json.dumps(cost, indent=1))
    print(f"head killed to the loss seen: {attempts[0]['ended'] - killed_at:.1f} s; loss seen to the first step on mg-2: "
          f"{cost['recovery_s']:.1f} s; kill to the first step: {attempts[1]['first_step'] - killed_at:.1f} s")
    assert json.loads(status.stdout)["clusters"] == []  # both clusters taken down by the controller
    # the run lives on after every cluster of it is gone: its report, its log (with its moves)
    report = burst("report", run_id, home=home, cwd=tmp_path)
    assert report.returncode == 0 and report.stdout.strip().endswith("report.html") and Path(report.stdout.strip()).is_file(), report.stderr
    logs = burst("logs", run_id, home=home, cwd=tmp_path)
    assert logs.returncode == 0 and "managed: " in logs.stdout and "lost after" in logs.stdout, logs.stderr[-2000:]
    census.assert_none_left(before)


def test_a_job_reads_a_staged_dataset_where_it_is_and_uploads_no_copy_of_it(gcs_store, tmp_path, monkeypatch):
    """Every run uploaded its training split again (``<store>/data/<run>/train``) after the dataset
    was staged: now the workers read the staged files in the store, and the job uploads nothing."""
    import shutil

    from burst import workloads
    from burst.client import datasets
    from burst.runtime import storage, training
    from burst.runtime.entry import stage_inputs
    from burst.runtime.job import JobConfig

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    gan3d = workloads.get("gan3d")
    train_dir, test_dir = gan3d.prepare_synthetic(tmp_path / "made", 60, seed=1)
    data = tmp_path / "showers"
    shutil.copytree(train_dir, data / "train")
    shutil.copytree(test_dir, data / "test")
    staged = datasets.stage(data, gcs_store)
    cfg = JobConfig(workload="gan3d", run_id="r1", storage=gcs_store, data=staged.uri)
    job, _, train_files, test_files = stage_inputs(cfg, with_test_files=True)
    assert job.train_files and all(f.startswith(staged.uri + "/train/") for f in job.train_files)
    assert job.val_files and all(f.startswith(staged.uri + "/test/") for f in job.val_files)
    assert storage.list_dirs(storage.join(gcs_store, "data")) == []  # no per-run copy
    here = training.local_files(job.train_files, "r1")  # what a worker does on its node
    assert [p.name for p in here] == [Path(f).name for f in job.train_files]
    assert sum(gan3d.check_file(p) for p in here) == sum(gan3d.check_file(Path(f)) for f in train_files)
