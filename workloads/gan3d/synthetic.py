"""Synthetic Monte Carlo of electron showers in a CLIC-like Si–W ECAL, in the real file format.

An offline stand-in for the CERN Geant4 samples: the Grindhammer–Peters (GFlash, hep-ex/0001020)
parameterisation with Geant4's sampling-calorimeter tuning. Per shower, ln T and ln α are drawn
correlated; energy spots are drawn from the longitudinal Gamma profile and the two-component
(core + tail) radial profile, placed along an inclined axis in a 17 × (2.4 mm W + Si) +
8 × (4.8 mm W + Si) layer stack, and sampled with the per-layer sampling fraction and Gamma
fluctuations that reproduce a 16.6 %/√E stochastic term. Images land in 51 × 51 × 25 cells of
5.1 mm and are written exactly like the real files: ECAL in 50 × GeV, energy in GeV, θ and the
measured angle ``mtheta`` in radians, ``eta``, ``sum``, ``bins``.

Everything is vectorised NumPy and deterministic for a given seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .features import measured_angle
from .presets import FULL_GRID

STORED_PER_GEV = 50.0  # the CERN files store ECAL as 50 × GeV
CELL_MM = 5.1
SI_MM = 0.5
E_S_MEV = 21.2

# (W thickness mm, number of layers): CLIC ECAL barrel stack.
LAYER_STACK = ((2.4, 17), (4.8, 8))

# Materials: Z, A, density g/cm³, X0 g/cm², critical energy MeV (PDG / GFlash).
W = dict(Z=74.0, A=183.84, rho=19.3, X0=6.76, Ec=7.97)
SI = dict(Z=14.0, A=28.09, rho=2.33, X0=21.82, Ec=40.2)

# Active (Si) energy over total deposited energy per layer kind, MIP ratio × e/mip ≈ 0.7.
SAMPLING_FRACTION = {2.4: 0.025, 4.8: 0.0126}
STOCHASTIC_TERM = 0.166  # CALICE Si–W: 16.6 % / √E


@dataclass(frozen=True)
class LayerMaterial:
    """Effective material of one W + Si layer (mass-weighted mixture, as GFlash treats sampling layers)."""

    thickness_mm: float
    z_eff: float
    x0_mm: float
    rm_mm: float
    ec_mev: float
    fs: float  # sampling frequency F_S = X0_eff / (d_abs + d_act)
    e_hat: float  # 1 / (1 + 0.007 (Z_abs − Z_act))
    sampling_fraction: float


def layer_material(w_mm: float) -> LayerMaterial:
    d = np.array([w_mm, SI_MM])
    rho = np.array([W["rho"], SI["rho"]])
    mass = d * rho
    frac = mass / mass.sum()
    rho_eff = mass.sum() / d.sum()
    z_eff = float(frac @ np.array([W["Z"], SI["Z"]]))
    x0_gcm2 = np.array([W["X0"], SI["X0"]])
    x0_eff_gcm2 = 1.0 / float(frac @ (1.0 / x0_gcm2))
    x0_mm = x0_eff_gcm2 / rho_eff * 10.0
    ec = x0_eff_gcm2 * float(frac @ (np.array([W["Ec"], SI["Ec"]]) / x0_gcm2))
    rm_mm = E_S_MEV / float(frac @ (np.array([W["Ec"], SI["Ec"]]) / x0_gcm2)) / rho_eff * 10.0
    return LayerMaterial(
        thickness_mm=float(d.sum()),
        z_eff=z_eff,
        x0_mm=x0_mm,
        rm_mm=rm_mm,
        ec_mev=ec,
        fs=x0_mm / float(d.sum()),
        e_hat=1.0 / (1.0 + 0.007 * (W["Z"] - SI["Z"])),
        sampling_fraction=SAMPLING_FRACTION[w_mm],
    )


@dataclass(frozen=True)
class Geometry:
    """Layer boundaries in mm and in X0 along the normal, and per-layer material."""

    materials: tuple[LayerMaterial, ...]
    z_edges_mm: np.ndarray  # (26,)
    t_edges_x0: np.ndarray  # (26,)

    @classmethod
    def clic(cls) -> "Geometry":
        mats = tuple(layer_material(w) for w, n in LAYER_STACK for _ in range(n))
        thick = np.array([m.thickness_mm for m in mats])
        x0 = np.array([m.x0_mm for m in mats])
        z_edges = np.concatenate([[0.0], np.cumsum(thick)])
        t_edges = np.concatenate([[0.0], np.cumsum(thick / x0)])
        return cls(mats, z_edges, t_edges)

    def depth_mm(self, t_x0: np.ndarray) -> np.ndarray:
        """Normal depth in mm reached after ``t_x0`` radiation lengths (linear beyond the stack)."""
        last = self.materials[-1].x0_mm
        inside = np.interp(t_x0, self.t_edges_x0, self.z_edges_mm)
        beyond = self.z_edges_mm[-1] + (t_x0 - self.t_edges_x0[-1]) * last
        return np.where(t_x0 > self.t_edges_x0[-1], beyond, inside)


GEOMETRY = Geometry.clic()
_THIN = GEOMETRY.materials[0]  # longitudinal parameters use the front (thin-W) section,
# where the shower starts and peaks; radial ones use each spot's own layer.


def _longitudinal_means(energy_gev: np.ndarray) -> tuple[np.ndarray, ...]:
    """Mean ln T, ln α and their widths and correlation for a sampling calorimeter (Geant4 tuning)."""
    m = _THIN
    ln_y = np.log(energy_gev * 1000.0 / m.ec_mev)
    t_hom = ln_y - 0.812
    a_hom = 0.81 + (0.458 + 2.26 / m.z_eff) * ln_y
    ln_t = np.log(t_hom - 0.55 / m.fs - 0.69 * (1.0 - m.e_hat))
    ln_a = np.log(a_hom - 0.476 / m.fs)
    sigma_t = np.minimum(1.0 / (-2.5 + 1.25 * ln_y), 0.5)
    sigma_a = np.minimum(1.0 / (-0.82 + 0.79 * ln_y), 0.5)
    rho = 0.784 - 0.023 * ln_y
    return ln_t, ln_a, sigma_t, sigma_a, rho


def _radial_parameters(energy_gev: np.ndarray, tau: np.ndarray, mat_z: np.ndarray, fs: np.ndarray, e_hat: np.ndarray):
    """Core radius, tail radius (units of R_M) and core probability (GFlash, sampling-corrected)."""
    ln_e = np.log(energy_gev)
    r_core = 0.0251 + 0.00319 * ln_e + (0.1162 - 0.000381 * mat_z) * tau
    r_core += -0.0203 * (1 - e_hat) + 0.0397 / fs * np.exp(-tau)
    k1 = 0.659 - 0.00309 * mat_z
    k4 = 0.3585 + 0.0412 * ln_e
    r_tail = k1 * (np.exp(-2.59 * (tau - 0.645)) + np.exp(k4 * (tau - 0.645)))
    r_tail += -0.14 * (1 - e_hat) - 0.495 / fs * np.exp(-tau)
    p1, p2, p3 = 2.632 - 0.00094 * mat_z, 0.401 + 0.00187 * mat_z, 1.313 - 0.0686 * ln_e
    arg = (p2 - tau) / p3
    p_core = p1 * np.exp(arg - np.exp(arg))
    p_core += (1 - e_hat) * (0.348 - 0.642 / fs * np.exp(-((tau - 1) ** 2)))
    return np.maximum(r_core, 1e-3), np.maximum(r_tail, 1e-2), np.clip(p_core, 0.0, 1.0)


def simulate_showers(energy_gev: np.ndarray, theta_rad: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Images (N, 51, 51, 25) of deposited (active-layer) energy in GeV."""
    n = len(energy_gev)
    nx, ny, nz = FULL_GRID
    ln_t, ln_a, sig_t, sig_a, rho = _longitudinal_means(energy_gev)
    r1, r2 = rng.standard_normal(n), rng.standard_normal(n)
    c1, c2 = np.sqrt((1 + rho) / 2), np.sqrt((1 - rho) / 2)
    t_max = np.maximum(np.exp(ln_t + sig_t * (c1 * r1 + c2 * r2)), 1.0)
    alpha = np.maximum(np.exp(ln_a + sig_a * (c1 * r1 - c2 * r2)), 1.1)
    # Spot longitudinal profile (Geant4: T_s, α_s scaled with Z).
    t_spot = t_max * (0.813 + 0.0019 * _THIN.z_eff)
    a_spot = alpha * (0.844 + 0.0026 * _THIN.z_eff)
    b_spot = (a_spot - 1.0) / t_spot

    n_spots = np.maximum((10.3 / 0.11 * energy_gev**0.959).astype(np.int64), 10)
    owner = np.repeat(np.arange(n), n_spots)
    # Depth along the shower axis in X0, and its mean for τ.
    t = rng.gamma(a_spot[owner], 1.0 / b_spot[owner])
    tau = t / t_max[owner]

    sin_t, cos_t = np.sin(theta_rad), np.cos(theta_rad)
    # Normal depth reached when ``t`` X0 are traversed along an axis inclined by θ.
    depth = GEOMETRY.depth_mm(t * sin_t[owner])
    layer = np.searchsorted(GEOMETRY.z_edges_mm, depth, side="right") - 1
    layer_c = np.clip(layer, 0, nz - 1)
    thin = layer_c < LAYER_STACK[0][1]
    mats = (GEOMETRY.materials[0], GEOMETRY.materials[-1])
    pick = lambda attr: np.where(thin, getattr(mats[0], attr), getattr(mats[1], attr))  # noqa: E731

    r_core, r_tail, p_core = _radial_parameters(energy_gev[owner], tau, pick("z_eff"), pick("fs"), pick("e_hat"))
    radius = np.where(rng.random(len(t)) < p_core, r_core, r_tail)
    u = rng.random(len(t))
    r_mm = radius * np.sqrt(u / (1.0 - u)) * pick("rm_mm")
    phi = rng.random(len(t)) * 2 * np.pi

    # Axis direction (0, cos θ, sin θ); transverse basis e1 = x̂, e2 = (0, −sin θ, cos θ).
    # The axis crosses the window centre at the shower's mean depth so events are centred.
    along_mm = depth / sin_t[owner]
    centre_depth = GEOMETRY.depth_mm(alpha / ((alpha - 1.0) / t_max) * sin_t)
    y0 = -centre_depth / sin_t * cos_t
    x = r_mm * np.cos(phi)
    y = y0[owner] + along_mm * cos_t[owner] - r_mm * np.sin(phi) * sin_t[owner]
    z = depth + r_mm * np.sin(phi) * cos_t[owner]
    ix = np.floor(x / CELL_MM + nx / 2).astype(np.int64)
    iy = np.floor(y / CELL_MM + ny / 2).astype(np.int64)
    iz = np.searchsorted(GEOMETRY.z_edges_mm, z, side="right") - 1
    keep = (ix >= 0) & (ix < nx) & (iy >= 0) & (iy < ny) & (iz >= 0) & (iz < nz)

    # Deposit per spot: E/N × sampling fraction of its layer × Gamma(k, 1/k) fluctuation. The sum
    # of N spots then has relative variance 1/(N k); k = E / (N S²) makes that S²/E, the 16.6 %/√E
    # stochastic term. (k = E^0.04 / 2.6, 0.43 to 0.48 from 10 to 200 GeV: single spots vary a lot, as a particle's deposit
    # in 0.5 mm of Si does, so cell energies are continuous rather than multiples of one spot.)
    shape_k = energy_gev / (STOCHASTIC_TERM**2 * n_spots)
    fluct = rng.gamma(shape_k[owner], 1.0 / shape_k[owner])
    sf = np.where(iz < LAYER_STACK[0][1], mats[0].sampling_fraction, mats[1].sampling_fraction)
    deposit = (energy_gev / n_spots)[owner] * fluct * sf

    # the same sums as np.add.at, in the same order (bit for bit), five times faster
    cell = np.ravel_multi_index((owner[keep], ix[keep], iy[keep], iz[keep]), (n, nx, ny, nz))
    return np.bincount(cell, weights=deposit[keep], minlength=n * nx * ny * nz).reshape(n, nx, ny, nz)


def hit_bins(stored: np.ndarray) -> np.ndarray:
    """The 8-bin hit histogram of the ``bins`` key (the authors' bin edges, stored units)."""
    edges = [(0.05, np.inf), (0.03, 0.05), (0.02, 0.03), (0.0125, 0.02), (0.008, 0.0125), (0.003, 0.008), (0.0, 0.003)]
    counts = [((stored > lo) & (stored <= hi)).sum(axis=(1, 2, 3)) for lo, hi in edges]
    counts.append((stored == 0).sum(axis=(1, 2, 3)))
    return np.stack(counts, axis=1).astype(np.int32)


def generate_events(
    n: int,
    seed: int,
    energy_range: tuple[float, float] = (100.0, 200.0),
    theta_range_deg: tuple[float, float] = (60.0, 120.0),
    chunk: int = 100,
) -> dict[str, np.ndarray]:
    """``n`` events as the arrays of a CERN file (ECAL in stored units)."""
    if n <= 0:
        raise ValueError("number of events must be positive")
    lo, hi = energy_range
    if not 0 < lo <= hi:
        raise ValueError(f"bad energy range {energy_range}: need 0 < low <= high (GeV)")
    if not 0 < theta_range_deg[0] <= theta_range_deg[1] < 180:
        raise ValueError(f"bad angle range {theta_range_deg}: need 0 < low <= high < 180 degrees")
    rng = np.random.default_rng(seed)
    energy = rng.uniform(lo, hi, n)
    theta = np.radians(rng.uniform(*theta_range_deg, n))
    ecal = np.empty((n, *FULL_GRID), dtype=np.float32)
    for start in range(0, n, chunk):
        sl = slice(start, start + chunk)
        ecal[sl] = simulate_showers(energy[sl], theta[sl], rng) * STORED_PER_GEV
    return {
        "ECAL": ecal,
        "energy": energy.astype(np.float32),
        "theta": theta.astype(np.float32),
        "mtheta": measured_angle(ecal),
        "eta": (-np.log(np.tan(theta / 2))).astype(np.float32),
        "sum": ecal.sum(axis=(1, 2, 3), dtype=np.float64).astype(np.float32),
        "bins": hit_bins(ecal),
    }


def write_file(path: Path, events: dict[str, np.ndarray], overwrite: bool = False) -> Path:
    """Write one file in the CERN layout; refuses to replace an existing file unless asked."""
    import h5py

    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; remove it or choose another output directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".part")
    with h5py.File(tmp, "w") as f:
        for key, arr in events.items():
            if arr.ndim == 4:  # one chunk per event, gzip: the showers are sparse
                f.create_dataset(key, data=arr, chunks=(1, *arr.shape[1:]), compression="gzip", compression_opts=1)
            else:
                f.create_dataset(key, data=arr)
    tmp.replace(path)
    return path


def file_name(energy_range: tuple[float, float], index: int) -> str:
    return f"Ele_VarAngleMeas_{energy_range[0]:g}_{energy_range[1]:g}_{index:03d}.h5"


def write_dataset(
    out_dir: Path,
    n_events: int,
    seed: int = 0,
    events_per_file: int = 5000,
    energy_range: tuple[float, float] = (100.0, 200.0),
    theta_range_deg: tuple[float, float] = (60.0, 120.0),
    overwrite: bool = False,
    processes: int = 1,
) -> list[Path]:
    """Write ``n_events`` into files of ``events_per_file`` events; file k uses seed (seed, k),
    up to ``processes`` files at a time (the same files either way).

    Existing files are never replaced unless ``overwrite``: the check covers every target file
    before anything is written, so a refused call leaves the directory untouched.
    """
    return write_files(dataset_files(out_dir, n_events, seed, events_per_file, energy_range, theta_range_deg, overwrite), processes)


@dataclass(frozen=True)
class PlannedFile:
    """One file of a dataset: where, how many events, the seed they are drawn with."""

    path: Path
    events: int
    seed: int
    energy_range: tuple[float, float]
    theta_range_deg: tuple[float, float]

    def write(self) -> Path:
        return write_file(self.path, generate_events(self.events, self.seed, self.energy_range, self.theta_range_deg), overwrite=True)


def dataset_files(out_dir: Path, n_events: int, seed: int = 0, events_per_file: int = 5000,
                  energy_range: tuple[float, float] = (100.0, 200.0), theta_range_deg: tuple[float, float] = (60.0, 120.0),
                  overwrite: bool = False) -> list[PlannedFile]:
    """The files ``write_dataset`` writes, none written yet (FileExistsError for one that exists unless ``overwrite``)."""
    out_dir = Path(out_dir)
    counts = [min(events_per_file, n_events - s) for s in range(0, n_events, events_per_file)]
    paths = [out_dir / file_name(energy_range, i) for i in range(len(counts))]
    clash = [p for p in paths if p.exists()]
    if clash and not overwrite:
        raise FileExistsError(f"{clash[0]} already exists; remove it or choose another output directory")
    return [PlannedFile(path, count, int(np.random.SeedSequence([seed, i]).generate_state(1)[0]), tuple(energy_range), tuple(theta_range_deg))
            for i, (path, count) in enumerate(zip(paths, counts))]


def write_files(files: list[PlannedFile], processes: int = 1) -> list[Path]:
    """Write each planned file, up to ``processes`` at a time. Each file draws from its own seed, so
    the files are the same whichever process writes them and in whatever order (generation is
    single-threaded numpy: the first run's 3,000 events took 37 s on one core of two).

    With several at a time, each file is a ``python -c`` of its own, not a multiprocessing child: spawn and
    forkserver import the caller's main module again (a script without a ``__main__`` guard would
    run twice), and fork is unsafe in a Ray job's driver, whose threads run."""
    if processes <= 1 or len(files) <= 1:
        return [f.write() for f in files]
    import json
    import os
    import subprocess
    import sys

    package_root = str(Path(__file__).resolve().parents[2])  # the same workloads package as this process
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH"))))}
    code = ("import json, sys; from pathlib import Path; from workloads.gan3d.synthetic import PlannedFile; a = json.loads(sys.argv[1]); "
            "PlannedFile(Path(a['path']), a['events'], a['seed'], tuple(a['energy_range']), tuple(a['theta_range_deg'])).write()")
    pending = sorted(files, key=lambda f: -f.events)  # the largest first
    running: list[tuple[PlannedFile, subprocess.Popen]] = []
    failed: list[str] = []
    try:
        while pending or running:
            while pending and len(running) < processes:
                f = pending.pop(0)
                spec = {"path": str(f.path), "events": f.events, "seed": f.seed, "energy_range": list(f.energy_range),
                        "theta_range_deg": list(f.theta_range_deg)}
                running.append((f, subprocess.Popen([sys.executable, "-c", code, json.dumps(spec)], env=env,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
            f, proc = running[0]
            _, err = proc.communicate()
            running.pop(0)
            if proc.returncode != 0:
                failed.append(f"{f.path.name}: {(err.strip().splitlines() or ['exit ' + str(proc.returncode)])[-1]}")
    finally:  # interrupted (a cancelled job, Ctrl-C): no writer goes on alone
        for _, proc in running:
            proc.kill()
            proc.wait()
    if failed:
        raise RuntimeError("could not write synthetic events: " + "; ".join(failed))
    return [f.path for f in files]
