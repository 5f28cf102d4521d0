"""Synthetic events made once per node: a second run's storage gets a copy of the first's events,
a changed generator makes new ones, and a run that spoils its copy does not spoil the next."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from burst.runtime import synthetic_cache
from workloads.gan3d import pipeline

GAN3D = Path(pipeline.__file__).parent


@pytest.fixture
def node_tmp(tmp_path, monkeypatch):
    """This node's temp directory (where the cache lives), empty."""
    path = tmp_path / "node-tmp"
    path.mkdir()
    monkeypatch.setenv("TMPDIR", str(path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return path


def counting(make):
    calls = []

    def wrapped(root: Path):
        if not (Path(root) / "synthetic.json").exists():
            calls.append(root)
        return make(root)

    return wrapped, calls


def test_a_second_run_copies_the_first_run_s_events_byte_for_byte(node_tmp, tmp_path):
    make, generated = counting(lambda root: pipeline.prepare_synthetic(root, 40, seed=3))
    (train, test), fresh = synthetic_cache.prepared(tmp_path / "a" / "data", "synthetic-gan3d-40-s3", GAN3D, make)
    assert fresh and len(generated) == 1 and train == tmp_path / "a" / "data" / "train"
    (train2, test2), fresh2 = synthetic_cache.prepared(tmp_path / "b" / "data", "synthetic-gan3d-40-s3", GAN3D, make)
    assert not fresh2 and len(generated) == 1  # copied, not generated again
    first = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    second = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert first == second and any(p.suffix == ".h5" for p in first)
    assert all((tmp_path / "a" / p).read_bytes() == (tmp_path / "b" / p).read_bytes() for p in first)
    assert json.loads((tmp_path / "b" / "data" / "synthetic.json").read_text())["events"] == 40
    (cached,) = (node_tmp / f"burst-{os.getuid()}" / "synthetic").iterdir()
    assert cached.name.startswith("synthetic-gan3d-40-s3-") and (cached.stat().st_mode & 0o077) == 0


def test_a_changed_generator_makes_new_events(node_tmp, tmp_path):
    package = tmp_path / "package"
    shutil.copytree(GAN3D, package, ignore=shutil.ignore_patterns("__pycache__"))
    make, generated = counting(lambda root: pipeline.prepare_synthetic(root, 30, seed=1))
    synthetic_cache.prepared(tmp_path / "a", "synthetic-gan3d-30-s1", package, make)
    (package / "synthetic.py").write_text((package / "synthetic.py").read_text() + "\nSTOCHASTIC_TERM = 0.2\n")
    _, fresh = synthetic_cache.prepared(tmp_path / "b", "synthetic-gan3d-30-s1", package, make)
    assert fresh and len(generated) == 2


def test_a_spoiled_run_copy_does_not_reach_the_next_run(node_tmp, tmp_path):
    make, generated = counting(lambda root: pipeline.prepare_synthetic(root, 30, seed=2))
    (train, _), _ = synthetic_cache.prepared(tmp_path / "a", "synthetic-gan3d-30-s2", GAN3D, make)
    victim = sorted(train.glob("*.h5"))[0]
    original = victim.read_bytes()
    victim.write_bytes(b"spoiled")
    (train2, _), fresh = synthetic_cache.prepared(tmp_path / "b", "synthetic-gan3d-30-s2", GAN3D, make)
    assert not fresh and (train2 / victim.name).read_bytes() == original


def test_a_run_whose_storage_holds_its_events_uses_them_and_a_different_dataset_is_refused(node_tmp, tmp_path):
    make, generated = counting(lambda root: pipeline.prepare_synthetic(root, 30, seed=2))
    synthetic_cache.prepared(tmp_path / "a", "synthetic-gan3d-30-s2", GAN3D, make)
    _, fresh = synthetic_cache.prepared(tmp_path / "a", "synthetic-gan3d-30-s2", GAN3D, make)  # a resumed run, same storage
    assert not fresh and len(generated) == 1
    with pytest.raises(FileExistsError, match="holds a different synthetic dataset"):
        synthetic_cache.prepared(tmp_path / "a", "synthetic-gan3d-30-s2", GAN3D, lambda root: pipeline.prepare_synthetic(root, 31, seed=2))


def test_where_the_cache_cannot_be_made_the_events_are_made_in_the_run_s_storage(node_tmp, tmp_path):
    (node_tmp / f"burst-{os.getuid()}").write_text("")  # the scratch root's name taken by a file: mkdir fails (root ignores modes)
    make, generated = counting(lambda root: pipeline.prepare_synthetic(root, 30, seed=4))
    (train, _), fresh = synthetic_cache.prepared(tmp_path / "a", "synthetic-gan3d-30-s4", GAN3D, make)
    assert fresh and generated == [tmp_path / "a"] and list(train.glob("*.h5"))
