"""The CaloChallenge file layout: what the synthetic showers write and what the reader accepts or refuses."""

import h5py
import numpy as np
import pytest

from workloads.calo import data, synthetic
from workloads.calo.geometry import ALPHA_BINS, LAYERS, RADIAL_BINS, VOXELS, cells
from workloads.calo.workload import WORKLOAD


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return synthetic.write_dataset(tmp_path_factory.mktemp("calo"), 250, seed=3, events_per_file=100)


def test_synthetic_files_have_the_calochallenge_keys_shapes_and_units(files):
    assert [f.name for f in files] == ["calo_ds2_000.h5", "calo_ds2_001.h5", "calo_ds2_002.h5"]
    with h5py.File(files[0]) as f:
        assert sorted(f.keys()) == ["incident_energies", "showers"]
        assert f["incident_energies"].shape == (100, 1) and f["showers"].shape == (100, VOXELS) == (100, 6480)
        energies, showers = f["incident_energies"][:, 0], f["showers"][:]
    assert 1e3 <= energies.min() and energies.max() <= 1e6  # MeV: 1 GeV to 1 TeV
    deposited = showers.sum(1) / energies
    assert 0.01 < np.median(deposited) < 0.02  # the sampling fraction
    assert 0.2 < (showers > 0).mean() < 0.8 and showers[showers > 0].min() >= synthetic.THRESHOLD_MEV  # sparse, with a readout threshold
    c = cells(showers)
    assert c.shape == (100, LAYERS, ALPHA_BINS, RADIAL_BINS)
    assert c.sum((1, 2))[:, 0].mean() > c.sum((1, 2))[:, -1].mean()  # the radial index runs fastest: the core is r = 0


def test_the_reader_returns_every_event_and_respects_a_limit(files):
    energies, showers = data.load(files)
    assert energies.shape == (250,) and showers.shape == (250, VOXELS)
    assert data.load(files, limit=130)[1].shape == (130, VOXELS)
    assert sum(data.check_file(f) for f in files) == 250


def test_the_model_representation_round_trips_above_the_threshold(files):
    energies, showers = data.load(files[:1])
    back = data.from_model(data.to_model(showers, energies), energies)
    kept = showers >= data.THRESHOLD_MEV
    np.testing.assert_allclose(back[kept], showers[kept], rtol=1e-3)
    assert (back[showers == 0] == 0).all()
    c = data.condition(np.array([1e3, 1e6]))
    np.testing.assert_allclose(c, [0.0, 1.0], atol=1e-6)


@pytest.mark.parametrize("write, message", [
    (lambda f: f.create_dataset("showers", data=np.zeros((4, VOXELS), np.float32)), "missing key 'incident_energies'"),
    (lambda f: (f.create_dataset("incident_energies", data=np.ones((4, 1), np.float32) * 1e4),
                f.create_dataset("showers", data=np.zeros((4, 368), np.float32))), "expected (N, 6480) (dataset-2 geometry)"),
    (lambda f: (f.create_dataset("incident_energies", data=np.ones((3, 1), np.float32) * 1e4),
                f.create_dataset("showers", data=np.zeros((4, VOXELS), np.float32))), "expected (4, 1) to match 'showers'"),
    (lambda f: (f.create_dataset("incident_energies", data=np.array([[1e4], [np.nan]], np.float32)),
                f.create_dataset("showers", data=np.zeros((2, VOXELS), np.float32))), "'incident_energies' contains NaN or infinite values"),
    (lambda f: (f.create_dataset("incident_energies", data=np.array([[1e4], [0.0]], np.float32)),
                f.create_dataset("showers", data=np.zeros((2, VOXELS), np.float32))), "'incident_energies' holds energies <= 0"),
])
def test_a_file_that_is_not_dataset_2_is_one_line_naming_the_file_and_key(tmp_path, write, message):
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        write(f)
    with pytest.raises(data.DataError) as err:
        WORKLOAD.check_file(path)
    assert str(path) in str(err.value) and message in str(err.value) and "\n" not in str(err.value)
    assert type(err.value).__name__ == "DataError"  # what the job turns into "bad input data: ..."


def test_not_hdf5_and_no_files_are_one_line(tmp_path):
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(data.DataError, match="not a readable HDF5 file"):
        WORKLOAD.check_file(tmp_path / "junk.h5")
    with pytest.raises(data.DataError, match="no \\*.h5 or \\*.hdf5 files found"):
        WORKLOAD.list_files(tmp_path / "empty" if (tmp_path / "empty").mkdir() is None else None)


def test_a_directory_splits_into_training_and_held_out_files(files):
    train, test = WORKLOAD.split_files(files[0].parent)
    assert train == files[:2] and test == files[2:]
