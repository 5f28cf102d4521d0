import shutil

import h5py
import numpy as np
import pytest

from workloads.gan3d import data
from workloads.gan3d.data import DataError
from workloads.gan3d.presets import PAPER, SMALL


def _first(tiny_h5):
    return sorted(tiny_h5.glob("*.h5"))[0]


def test_reader_accepts_a_real_format_file_and_applies_the_reference_preprocessing(tiny_h5):
    path = _first(tiny_h5)
    with h5py.File(path) as f:
        ecal = f["ECAL"][:]
        energy = f["energy"][:]
        mtheta = f["mtheta"][:]
    b = data.load(path, PAPER)
    keep = ecal.sum(axis=(1, 2, 3)) > 10
    assert len(b) == keep.sum()
    np.testing.assert_allclose(b.ecal, ecal[keep].sum(axis=(1, 2, 3)), rtol=1e-5)  # sum before the power
    np.testing.assert_allclose(b.x, np.power(ecal[keep], 0.85), rtol=1e-5)
    np.testing.assert_allclose(b.y, energy[keep] / 100, rtol=1e-6)
    np.testing.assert_allclose(b.ang, mtheta[keep], rtol=1e-6)


def test_small_preset_sums_cells_and_keeps_the_energy(tiny_h5):
    full = data.load(_first(tiny_h5), PAPER)
    small = data.load(_first(tiny_h5), SMALL)
    assert small.x.shape[1:] == (17, 17, 25)
    np.testing.assert_allclose(small.ecal, full.ecal, rtol=1e-4)
    # each preset's own power transform: undone, the cells add up to the ECAL sum again
    np.testing.assert_allclose(np.power(small.x, 1 / SMALL.power).sum(axis=(1, 2, 3)), small.ecal, rtol=1e-3)
    assert SMALL.power == 0.5 and PAPER.power == 0.85


def test_ecal_cut_drops_low_energy_events(tmp_path):
    from workloads.gan3d.synthetic import generate_events, write_file

    ev = generate_events(4, seed=1)
    ev["ECAL"][1] *= 1e-3  # stored sum ≈ 0.15 < 10
    write_file(tmp_path / "a.h5", ev)
    assert len(data.load(tmp_path / "a.h5", PAPER)) == 3


@pytest.fixture
def good(tmp_path, tiny_h5):
    dst = tmp_path / "f.h5"
    shutil.copy(_first(tiny_h5), dst)
    return dst


def _expect(path, *fragments):
    with pytest.raises(DataError) as info:
        data.load(path, PAPER)
    msg = str(info.value)
    assert str(path) in msg
    for frag in fragments:
        assert frag in msg
    assert "\n" not in msg


def test_corrupt_bytes_are_a_clear_error(tmp_path):
    bad = tmp_path / "corrupt.h5"
    bad.write_bytes(b"this is not hdf5" * 100)
    _expect(bad, "not a readable HDF5 file")


def test_truncated_file_is_a_clear_error(good):
    size = good.stat().st_size
    with open(good, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(DataError) as info:
        data.load(good, PAPER)
    assert str(good) in str(info.value)


def test_missing_key_names_the_key(good):
    with h5py.File(good, "a") as f:
        del f["energy"]
    _expect(good, "missing key 'energy'")


def test_wrong_shape_names_the_key(tmp_path):
    path = tmp_path / "shape.h5"
    with h5py.File(path, "w") as f:
        f["ECAL"] = np.zeros((2, 25, 25, 25), np.float32)
        f["energy"] = np.ones(2, np.float32)
    _expect(path, "'ECAL'", "(N, 51, 51, 25)")


def test_mismatched_lengths_name_the_key(tmp_path):
    path = tmp_path / "len.h5"
    with h5py.File(path, "w") as f:
        f["ECAL"] = np.zeros((2, 51, 51, 25), np.float32)
        f["energy"] = np.ones(3, np.float32)
    _expect(path, "'energy'")


def test_nan_is_a_clear_error(good):
    with h5py.File(good, "a") as f:
        ecal = f["ECAL"][:]
        ecal[0, 25, 25, 10] = np.nan
        f["ECAL"][...] = ecal
    _expect(good, "'ECAL'", "NaN")


def test_missing_directory_and_empty_directory(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        data.list_files(tmp_path / "nope")
    with pytest.raises(DataError, match=r"no \*\.h5 files"):
        data.list_files(tmp_path)


def test_tfrecords_roundtrip_matches_hdf5_pipeline(tiny_h5, tmp_path):
    import tensorflow as tf

    data.convert_to_tfrecords(tiny_h5, tmp_path / "tfr", SMALL)
    spec_tf = data.InputSpec.discover(tmp_path / "tfr", SMALL)
    spec_h5 = data.InputSpec.discover(tiny_h5, SMALL)
    assert spec_tf.kind == "tfrecord" and spec_h5.kind == "hdf5"
    assert spec_tf.events == spec_h5.events == len(data.load(tiny_h5, SMALL))

    def collect(spec):
        fn = data.make_dataset_fn(spec, SMALL, per_replica_batch=8, steps_per_epoch=spec.events // 8, seed=3)
        batches = list(fn(None, 0))
        return np.concatenate([b["ecal"].numpy() for b in batches]), np.concatenate([b["x"].numpy() for b in batches])

    ecal_tf, x_tf = collect(spec_tf)
    ecal_h5, x_h5 = collect(spec_h5)
    assert x_tf.shape[1:] == (17, 17, 25, 1)
    # same events (the shuffle order may differ by file interleaving): compare as sets
    np.testing.assert_allclose(np.sort(ecal_tf), np.sort(ecal_h5), rtol=1e-6)
    with pytest.raises(FileExistsError):
        data.convert_to_tfrecords(tiny_h5, tmp_path / "tfr", SMALL)
    with pytest.raises(DataError, match="made for preset 'small'"):
        data.InputSpec.discover(tmp_path / "tfr", PAPER)
    meta = tmp_path / "tfr" / "meta.json"  # records converted before the small preset's power changed
    meta.write_text(meta.read_text().replace(f'"power": {SMALL.power}', '"power": 0.85'))
    with pytest.raises(DataError, match=r"records hold images \*\* 0.85, preset 'small' trains on \*\* 0.5; convert"):
        data.InputSpec.discover(tmp_path / "tfr", SMALL)


def test_pipeline_shards_per_worker_without_overlap(tiny_h5):
    import tensorflow as tf

    spec = data.InputSpec.discover(tiny_h5, SMALL)
    steps = 2
    fn = data.make_dataset_fn(spec, SMALL, per_replica_batch=4, steps_per_epoch=steps, seed=0)
    shards = []
    for pid in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pid, num_replicas_in_sync=2)
        batches = list(fn(ctx, 0))
        assert len(batches) == steps  # every pipeline yields exactly steps × local replicas batches
        shards.append(set(np.concatenate([b["ecal"].numpy() for b in batches]).tolist()))
    assert not shards[0] & shards[1]


def test_epoch_order_is_reproducible_and_changes_between_epochs(tiny_h5):
    spec = data.InputSpec.discover(tiny_h5, SMALL)
    fn = data.make_dataset_fn(spec, SMALL, per_replica_batch=8, steps_per_epoch=3, seed=1)
    first = [b["ecal"].numpy() for b in fn(None, 0)]
    again = [b["ecal"].numpy() for b in fn(None, 0)]
    other = [b["ecal"].numpy() for b in fn(None, 1)]
    np.testing.assert_array_equal(np.concatenate(first), np.concatenate(again))
    assert not np.array_equal(np.concatenate(first), np.concatenate(other))


def test_pod_shards_hold_every_event_once_and_an_hdf5_input_is_refused_on_a_pod(tiny_h5, tmp_path):
    """A pod slice's input: every event in exactly one shard, host h's shards h, h + hosts, ...;
    its hosts run no Python, so HDF5 (a Python generator) is refused for it in one line."""
    import tensorflow as tf

    files = sorted(tiny_h5.glob("*.h5"))
    shards = data.write_pod_shards(files, tmp_path / "pod", SMALL, hosts=2, per_host=2)
    names = [p.name for p in shards]
    assert names == [f"shard-{i:05d}-of-00004.tfrecords" for i in range(4)]
    assert data.host_shards(names, 2, 0) == [names[0], names[2]] and data.host_shards(names, 2, 1) == [names[1], names[3]]
    spec = data.InputSpec.discover(tmp_path / "pod", SMALL, files=shards)
    assert spec.kind == "tfrecord" and spec.events == data.InputSpec.discover(tiny_h5, SMALL).events
    counted = sum(1 for p in shards for _ in tf.data.TFRecordDataset(str(p)))
    assert counted == spec.events
    with pytest.raises(ValueError, match="not one of the slice's 2"):
        data.host_shards(names, 2, 2)
    with pytest.raises(DataError, match="a TPU pod slice reads TFRecord shards on every host, not hdf5 files"):
        data.make_dataset_fn(data.InputSpec.discover(tiny_h5, SMALL), SMALL, 4, 2, seed=0, pipeline_files=lambda pid: [])
