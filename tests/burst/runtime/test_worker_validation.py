"""A run's validation is made by the worker that trained the weights, inside the final checkpoint,
and the job publishes it; a checkpoint without one (a TPU host's, a worker whose validation
failed) is validated by the job from the checkpoint, with the same physics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burst.runtime import entry
from burst.runtime.job import JobConfig
from burst.runtime.training import VALIDATION_DIR, validate_into_checkpoint, validation_made_with


@pytest.fixture(scope="module")
def trained(tiny_h5, tmp_path_factory):
    """One epoch of two steps of the small preset, its checkpoint saved as a worker saves it."""
    from workloads.gan3d import data, pipeline

    files = data.list_files(tiny_h5)
    trainer, dataset_fn, steps = pipeline.prepare_training(files[:1], "small", 8, steps_per_epoch=2)
    trainer.fit(dataset_fn, 1, steps)
    cfg = JobConfig(workload="gan3d", epochs=1, batch_per_replica=8, steps_per_epoch=2, val_events=40, run_id="r",
                    storage=str(tmp_path_factory.mktemp("store")), val_files=(str(files[1]),))
    return trainer, cfg, [files[1]]


def _finish(checkpoint: Path, out: Path, cfg: JobConfig, test_files: list[Path], capsys) -> tuple[dict, dict, str]:
    timings: dict = {}
    assert entry._finish(checkpoint, out, cfg, timings, [], test_files) == 0
    said = capsys.readouterr().out
    done = json.loads([line for line in said.splitlines() if '"type": "done"' in line][-1].split("BURST_EVENT ", 1)[1])
    return json.loads((out / "report" / "metrics.json").read_text()), timings, said


def test_the_worker_s_report_is_published_and_a_checkpoint_without_one_is_validated_by_the_job_alike(trained, tmp_path, capsys):
    trainer, cfg, test_files = trained
    made = tmp_path / "made"
    trainer.save(made)
    validate_into_checkpoint(trainer, cfg, made)
    assert validation_made_with(made) is not None

    metrics, timings, said = _finish(made, tmp_path / "out-made", cfg, test_files, capsys)
    assert timings["validated_in_worker_s"] > 0
    assert "validating against held-out Monte Carlo" not in said  # the job did not validate again
    assert not (made / VALIDATION_DIR).exists()  # the published checkpoint holds weights, not a second report
    report = tmp_path / "out-made" / "report"
    assert (report / "report.html").exists() and (report / "tensorboard").is_dir() and not (report / "made.json").exists()

    plain = tmp_path / "plain"
    trainer.save(plain)
    again, timings, said = _finish(plain, tmp_path / "out-plain", cfg, test_files, capsys)
    assert "validating against held-out Monte Carlo" in said and "validated_in_worker_s" not in timings
    # the same showers, whoever made them: the same physics to the last digit that matters
    assert again["summary"].keys() == metrics["summary"].keys()
    for key, value in metrics["summary"].items():
        assert again["summary"][key] == pytest.approx(value, rel=1e-4, abs=1e-9), key


def test_a_worker_whose_validation_fails_leaves_none_and_says_so(trained, tmp_path, capsys):
    trainer, cfg, _ = trained
    broken = tmp_path / "broken.h5"
    broken.write_bytes(b"not HDF5")
    trainer.save(tmp_path / "ckpt")
    validate_into_checkpoint(trainer, cfg.model_copy(update={"val_files": (str(broken),)}), tmp_path / "ckpt")
    assert validation_made_with(tmp_path / "ckpt") is None and not (tmp_path / "ckpt" / VALIDATION_DIR).exists()
    assert "the job validates from the checkpoint" in capsys.readouterr().out


def test_the_worker_validates_where_it_reads_the_held_out_files_in_place(tmp_path):
    """This machine's or a site's files, yes; a bucket store, a dataset staged in a store or a TPU
    host, no: the held-out files would be uploaded and copied to a node for a few hundred events."""
    def cfg(**kw):
        return JobConfig(run_id="r", **{"storage": str(tmp_path), **kw})

    assert entry.worker_validates(cfg()) and entry.worker_validates(cfg(data=str(tmp_path / "data")))
    assert not entry.worker_validates(cfg(storage="gs://bucket/burst"))
    assert not entry.worker_validates(cfg(data="abfs://container/datasets/abc"))
    assert not entry.worker_validates(cfg(tpu=True))
