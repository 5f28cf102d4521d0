"""The run's final weights are those of the checkpoint holding the most epochs, whatever Ray's
bookkeeping says (a worker restart can leave ``result.checkpoint`` pointing at an older one)."""

import json
from pathlib import Path
from types import SimpleNamespace

from burst.runtime.job import JobConfig
from burst.runtime.ray_train import final_checkpoint as _final_checkpoint
from burst.runtime.training import latest_checkpoint


def _checkpoint(directory: Path, epochs: int, stopped: bool = False) -> Path:
    directory.mkdir(parents=True)
    (directory / "history.json").write_text(json.dumps({"history": [{"epoch": e} for e in range(1, epochs + 1)]}))
    (directory / "gan3d.index").write_text("i")
    (directory / "gan3d.data-00000-of-00001").write_text(f"weights after {epochs}")
    if stopped:
        (directory / "stopped.json").write_text("{}")
    return directory


class _RayCheckpoint:
    """The one method of ray.train.Checkpoint that _final_checkpoint uses."""

    def __init__(self, path: Path):
        self.path = path

    def to_directory(self, dest: str) -> str:
        import shutil

        shutil.copytree(self.path, dest)
        return dest


def test_storage_wins_over_a_lagging_ray_result(tmp_path):
    runs = tmp_path / "storage" / "ray-train" / "r1"
    one = _checkpoint(runs / "checkpoint_2026-11-23_10-00-01.000000", 1)
    _checkpoint(runs / "checkpoint_2026-11-23_10-00-09.000000", 3)
    result = SimpleNamespace(checkpoint=_RayCheckpoint(one), best_checkpoints=[(_RayCheckpoint(one), {})])
    dest = _final_checkpoint(result, JobConfig(storage=str(tmp_path / "storage"), run_id="r1"), tmp_path / "out" / "checkpoint")
    assert dest is not None
    assert (dest / "gan3d.data-00000-of-00001").read_text() == "weights after 3"


def test_incomplete_copies_are_ignored_and_none_means_none(tmp_path):
    cut = _checkpoint(tmp_path / "cut", 5)
    (cut / "gan3d.index").unlink()  # a copy cut short
    good = _checkpoint(tmp_path / "good", 2)
    assert latest_checkpoint([cut, good]) == good
    assert latest_checkpoint([cut]) is None
    result = SimpleNamespace(checkpoint=None, best_checkpoints=[])
    assert _final_checkpoint(result, JobConfig(storage=str(tmp_path / "empty"), run_id="r"), tmp_path / "dest") is None


def test_a_tie_goes_to_the_later_checkpoint(tmp_path):
    """A budget stop saves the weights mid-epoch with the same whole-epoch count as the last
    epoch checkpoint; the stop checkpoint is the newer one and must be the one kept."""
    runs = tmp_path / "storage" / "ray-train" / "r2"
    _checkpoint(runs / "checkpoint_2026-11-23_10-00-01.000000", 2)
    stop = _checkpoint(runs / "checkpoint_2026-11-23_10-00-05.000000", 2, stopped=True)
    result = SimpleNamespace(checkpoint=_RayCheckpoint(stop), best_checkpoints=[])
    dest = _final_checkpoint(result, JobConfig(storage=str(tmp_path / "storage"), run_id="r2"), tmp_path / "out")
    assert (dest / "stopped.json").exists()


class _Fits:
    """Ray Train's trainer as ``ray_train.train`` sees it: each ``fit`` raises the next error given,
    or returns the run's result once they are spent."""

    def __init__(self, errors: list, result):
        self.errors, self.result, self.fits = list(errors), result, 0

    def trainer(self, cfg, root):
        return self

    def fit(self):
        self.fits += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


def _actor_died():
    from ray.exceptions import ActorDiedError
    from ray.train.v2.api.exceptions import ControllerError

    return ControllerError(ActorDiedError())


def test_a_run_whose_actor_died_while_its_workers_started_is_started_once_more_and_nothing_else_is(tmp_path, monkeypatch, capsys):
    """Ray Train raises a ControllerError at once when an actor of the run dies while the worker
    group starts (seen on a loaded 2-core machine); burst starts the workers once more, from the
    newest checkpoint on storage. A controller error of any other cause, or a second death, ends
    the run as before."""
    import pytest
    from ray.train.v2.api.exceptions import ControllerError

    from burst.runtime import ray_train

    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-tmp"))  # the node scratch it removes (and locks) is the test's
    runs = tmp_path / "storage" / "ray-train" / "r3"
    done = _checkpoint(runs / "checkpoint_2026-11-23_10-00-01.000000", 2)
    cfg = JobConfig(storage=str(tmp_path / "storage"), run_id="r3")
    fits = _Fits([_actor_died()], SimpleNamespace(checkpoint=_RayCheckpoint(done), best_checkpoints=[]))
    monkeypatch.setattr(ray_train, "tensorflow_trainer", fits.trainer)
    ckpt, failure = ray_train.train(cfg, str(tmp_path / "storage" / "ray-train"), tmp_path / "out")
    assert (failure, fits.fits) == (None, 2) and (ckpt / "gan3d.data-00000-of-00001").read_text() == "weights after 2"
    said = capsys.readouterr()
    assert "Ray Train lost an actor of the run (ControllerError: " in said.out
    assert said.err.startswith("Traceback") and "The actor died unexpectedly" in said.err  # the whole error, for the log

    for errors in ([ControllerError(ValueError("a callback's own bug"))], [_actor_died(), _actor_died()]):
        fits = _Fits(errors, None)
        monkeypatch.setattr(ray_train, "tensorflow_trainer", fits.trainer)
        with pytest.raises(ControllerError):
            ray_train.train(cfg, str(tmp_path / "storage" / "ray-train"), tmp_path / "out")
        assert fits.fits == len(errors)


def test_a_run_s_trainer_starts_no_helper_it_has_no_use_for_and_a_scan_s_keeps_its_placement_group_cleaner(tmp_path):
    """Each helper Ray Train starts is a Ray worker process importing Ray Train (about 2.5 CPU-s):
    Ray Data's DatasetManager (burst gives Ray Train no dataset) never; the placement-group cleaner
    only in a scan, whose driver outlives a trial's controller. Ray's own list is read, so a Ray
    that renames these callbacks fails here instead of starting them again unseen."""
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from burst.runtime import ray_train

    cfg = JobConfig(storage=str(tmp_path), run_id="r4")
    trainer = ray_train.tensorflow_trainer(cfg, str(tmp_path))
    ray_s = {type(c).__name__ for c in DataParallelTrainer._create_default_callbacks(trainer)}
    assert {"DatasetsCallback", "PlacementGroupCleanerCallback"} <= ray_s  # the names filtered out are Ray's
    run = {type(c).__name__ for c in ray_train.tensorflow_trainer(cfg, str(tmp_path))._create_default_callbacks()}
    scan = {type(c).__name__ for c in ray_train.tensorflow_trainer(cfg, str(tmp_path), keep_best="loss")._create_default_callbacks()}
    assert {"BackendSetupCallback", "AcceleratorSetupCallback"} <= run  # what a run needs is still there
    assert not run & {"DatasetsCallback", "PlacementGroupCleanerCallback"}
    assert "PlacementGroupCleanerCallback" in scan and "DatasetsCallback" not in scan
    assert scan - run == {"PlacementGroupCleanerCallback"}


def test_on_fixed_nodes_the_controller_asks_no_autoscaler_for_workers(tmp_path, monkeypatch):
    """Ray's fixed scaling policy sends every resize decision's resources to Ray Data's autoscaling
    coordinator, a detached actor it starts first; on this machine or a Slurm allocation (the job's
    environment says BURST_FIXED_NODES=1) the controller gets a policy that decides the same and
    asks nobody. Elsewhere, Ray's own policy."""
    import pytest
    from ray.train import ScalingConfig
    from ray.train.v2._internal.execution.scaling_policy import FixedScalingPolicy, ResizeDecision
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from burst.client import jobs
    from burst.runtime import ray_train

    config = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1.0})
    with pytest.raises(AssertionError):  # Ray's: no decision before its coordinator client exists
        FixedScalingPolicy(config).make_decision_for_non_running_worker_group()
    ours = ray_train.fixed_cluster_scaling_policy(config)
    ours.after_controller_start(None)
    decision = ours.make_decision_for_non_running_worker_group()
    assert isinstance(decision, ResizeDecision) and decision.num_workers == 2 and decision.resources_per_worker == {"CPU": 1.0}
    assert ours._coordinator_client is None  # nothing was asked of a coordinator

    given = []
    monkeypatch.setattr(DataParallelTrainer, "_initialize_and_run_controller", lambda self, **kw: given.append(kw["scaling_policy"]))
    trainer = ray_train.tensorflow_trainer(JobConfig(storage=str(tmp_path), run_id="r5"), str(tmp_path))
    for fixed, policy in (("1", "FixedClusterScalingPolicy"), (None, "FixedScalingPolicy")):
        if fixed:
            monkeypatch.setenv(jobs.FIXED_NODES, fixed)
        else:
            monkeypatch.delenv(jobs.FIXED_NODES, raising=False)
        type(trainer)._initialize_and_run_controller(trainer, scaling_policy=FixedScalingPolicy(config))
        assert type(given[-1]).__name__ == policy
