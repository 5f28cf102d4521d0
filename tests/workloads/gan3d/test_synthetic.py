import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import psutil
import pytest

from workloads.gan3d import synthetic
from workloads.gan3d.features import moments


def test_files_have_the_real_layout(tiny_h5):
    files = sorted(tiny_h5.glob("*.h5"))
    assert [f.name for f in files] == ["Ele_VarAngleMeas_100_200_000.h5", "Ele_VarAngleMeas_100_200_001.h5"]
    with h5py.File(files[0]) as f:
        assert f["ECAL"].shape == (48, 51, 51, 25) and f["ECAL"].dtype == np.float32
        for key in ("energy", "theta", "mtheta", "eta", "sum"):
            assert f[key].shape == (48,)
        assert f["bins"].shape == (48, 8)
        e, th = f["energy"][:], f["theta"][:]
        assert e.min() >= 100 and e.max() <= 200
        assert th.min() >= np.radians(60) - 1e-6 and th.max() <= np.radians(120) + 1e-6
        np.testing.assert_allclose(f["sum"][:], f["ECAL"][:].sum(axis=(1, 2, 3)), rtol=1e-4)
        np.testing.assert_allclose(f["eta"][:], -np.log(np.tan(th / 2)), rtol=1e-5, atol=1e-6)
        # every cell's content is counted in exactly one of the 8 hit bins
        assert (f["bins"][:].sum(axis=1) == 51 * 51 * 25).all()


def test_deterministic_per_seed():
    a = synthetic.generate_events(4, seed=5)
    b = synthetic.generate_events(4, seed=5)
    c = synthetic.generate_events(4, seed=6)
    np.testing.assert_array_equal(a["ECAL"], b["ECAL"])
    assert not np.array_equal(a["ECAL"], c["ECAL"])


def test_sampling_fraction_near_two_percent():
    ev = synthetic.generate_events(40, seed=1, energy_range=(50, 200))
    sf = ev["ECAL"].sum(axis=(1, 2, 3)) / synthetic.STORED_PER_GEV / ev["energy"]
    assert 0.017 < sf.mean() < 0.025
    assert sf.std() / sf.mean() < 0.1


def test_shower_maximum_deepens_with_log_energy():
    depths = []
    for energy in (10.0, 50.0, 250.0):
        ev = synthetic.generate_events(30, seed=2, energy_range=(energy, energy), theta_range_deg=(90, 90))
        depths.append(moments(ev["ECAL"])["m1_z"].mean())
    assert depths[0] < depths[1] < depths[2]
    # roughly linear in ln E: equal ln-steps (×5) give similar depth steps
    step1, step2 = depths[1] - depths[0], depths[2] - depths[1]
    assert 0.5 < step1 / step2 < 2.0


def test_lateral_containment():
    ev = synthetic.generate_events(30, seed=3, energy_range=(100, 100), theta_range_deg=(90, 90))
    img = ev["ECAL"]
    proj_x = img.sum(axis=(2, 3))
    core = proj_x[:, 23:28].sum(axis=1) / proj_x.sum(axis=1)  # ±2 cells ≈ ±1 Molière radius
    assert core.mean() > 0.9
    # the window holds nearly all deposits: the GFlash tail carries only a few percent past 5 cells
    assert (proj_x[:, 20:31].sum(axis=1) / proj_x.sum(axis=1)).mean() > 0.97


def test_inclined_showers_move_along_y():
    """θ < 90° and θ > 90° tilt the shower in opposite y directions, and mtheta follows.

    The measured angle works in cell-index units (5.1 mm cells, 2.9–5.3 mm layers), so it is
    compressed towards 90° as in the real files; it must still order the angles and be symmetric.
    """
    lo = synthetic.generate_events(20, seed=4, theta_range_deg=(65, 65))
    mid = synthetic.generate_events(20, seed=4, theta_range_deg=(90, 90))
    hi = synthetic.generate_events(20, seed=4, theta_range_deg=(115, 115))
    m_lo, m_mid, m_hi = lo["mtheta"].mean(), mid["mtheta"].mean(), hi["mtheta"].mean()
    assert m_lo < np.radians(85) and m_hi > np.radians(95)
    assert abs(m_mid - np.pi / 2) < np.radians(2)
    assert abs((m_lo + m_hi) / 2 - np.pi / 2) < np.radians(2)


def test_never_overwrites_silently(tmp_path):
    synthetic.write_dataset(tmp_path, 3, seed=0, events_per_file=3)
    before = (tmp_path / synthetic.file_name((100, 200), 0)).read_bytes()
    with pytest.raises(FileExistsError, match="already exists"):
        synthetic.write_dataset(tmp_path, 3, seed=1, events_per_file=3)
    assert (tmp_path / synthetic.file_name((100, 200), 0)).read_bytes() == before
    synthetic.write_dataset(tmp_path, 3, seed=1, events_per_file=3, overwrite=True)
    assert (tmp_path / synthetic.file_name((100, 200), 0)).read_bytes() != before


def test_files_written_side_by_side_are_the_files_written_one_after_the_other(tmp_path):
    """The first run writes its training and held-out files two processes at a time: each file
    draws from its own seed, so the dataset is byte for byte the one a single process writes."""
    one = synthetic.write_dataset(tmp_path / "one", 25, seed=3, events_per_file=10)
    two = synthetic.write_dataset(tmp_path / "two", 25, seed=3, events_per_file=10, processes=2)
    assert [p.name for p in one] == [p.name for p in two] == [synthetic.file_name((100, 200), i) for i in range(3)]
    assert [p.read_bytes() for p in one] == [p.read_bytes() for p in two]


def test_a_file_that_cannot_be_written_beside_others_is_named(tmp_path):
    (tmp_path / "blocked").write_text("a file where the directory should be")
    files = (synthetic.dataset_files(tmp_path / "fine", 4, seed=0, events_per_file=2)
             + synthetic.dataset_files(tmp_path / "blocked" / "sub", 2, seed=1, events_per_file=2))
    with pytest.raises(RuntimeError, match=r"could not write synthetic events: Ele_VarAngleMeas_100_200_000\.h5: .*(NotADirectory|FileExists)"):
        synthetic.write_files(files, processes=2)
    assert sorted(p.name for p in (tmp_path / "fine").glob("*.h5")) == [synthetic.file_name((100, 200), i) for i in range(2)]


def test_an_interrupted_dataset_leaves_no_writer_running(tmp_path):
    """Ctrl-C (or a cancelled job) while the files are written side by side: the writers stop with
    the caller, none goes on writing into a directory a retry will use."""
    script = ("import sys; from pathlib import Path; from workloads.gan3d import synthetic; "
              "synthetic.write_dataset(Path(sys.argv[1]), 800, seed=0, events_per_file=400, processes=2)")
    # SIGINT as a terminal's Ctrl-C delivers it: a suite started in the background (CI's) ignores
    # SIGINT, and a child inherits that, so the caller is given the default back
    parent = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "data")], stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    writers: list = []
    while len(writers) < 2 and time.monotonic() < deadline and parent.poll() is None:
        writers = psutil.Process(parent.pid).children()
        time.sleep(0.1)
    assert len(writers) == 2, "the two writers never started"
    parent.send_signal(signal.SIGINT)  # to the caller alone, not its process group
    assert parent.wait(timeout=60) != 0 and "KeyboardInterrupt" in parent.stderr.read()
    _, alive = psutil.wait_procs(writers, timeout=10)
    assert alive == []
    assert list((tmp_path / "data").glob("*.h5")) == []


def test_bad_ranges_are_rejected():
    with pytest.raises(ValueError, match="energy range"):
        synthetic.generate_events(2, seed=0, energy_range=(200, 100))
    with pytest.raises(ValueError, match="positive"):
        synthetic.generate_events(0, seed=0)


def test_resolution_has_the_stochastic_term():
    """At 10 GeV the 16.6 %/√E sampling term (5.2 %) dominates the shower's own fluctuations
    (leakage, depth), so the relative spread of the ECAL sum must be at least that large."""
    ev = synthetic.generate_events(300, seed=7, energy_range=(10, 10), theta_range_deg=(90, 90))
    total = ev["ECAL"].sum(axis=(1, 2, 3))
    resolution = total.std() / total.mean()
    assert 0.9 * synthetic.STOCHASTIC_TERM / np.sqrt(10) < resolution < 0.1


def test_cell_energies_are_continuous():
    """No single deposit size dominates the cells: a spike of equal-sized spots would sit on one
    side of the 0.3 MeV hit threshold or the other and make hit counts meaningless."""
    ev = synthetic.generate_events(20, seed=8, energy_range=(100, 200))
    cells_mev = ev["ECAL"][ev["ECAL"] > 0] / synthetic.STORED_PER_GEV * 1e3
    counts, _ = np.histogram(np.log(cells_mev), bins=np.log(np.geomspace(0.01, 100, 401)))  # 2.3 % wide bins
    assert counts.max() / len(cells_mev) < 0.02
