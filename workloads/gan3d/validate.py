"""Physics validation: GAN showers against Monte Carlo on a held-out set, as the authors validate.

For each Ep bin and θ bin: sampling fraction and its relative error, longitudinal and transverse
(x, y) profiles, first and second shower moments, measured-angle error, hit counts and the
cell-energy spectrum; plus the authors' optimisation metric (moment + profile + angle error,
averaged over energy bins) with the moment term counted once (the authors' ``GANutils.metric`` adds it twice, a bug).
Writes ``metrics.json``, paper-style figures (GAN and MC overlaid, linear and log scale) and one
self-contained ``report.html``.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import numpy as np

from ..common.gate import BROKEN, finite_part, gate_verdict
from .features import hit_counts, measured_angle, moments, profiles
from .metrics import EPOCH_METRICS, GATE_METRICS, VERDICT_METRICS  # noqa: F401  (the tables, kept importable from here)
from .synthetic import STORED_PER_GEV

ANGLE_BINS_DEG = (62.0, 90.0, 118.0)
ANGLE_TOLERANCE_RAD = 0.1
HIT_THRESHOLD_GEV = 3e-4
TAIL_DEPTH = 1e-3  # transverse cells down to this fraction of the peak cell count as the shower's tails


def _rel(mc: float, gan: float) -> float:
    return float(abs(mc - gan) / abs(mc)) if mc != 0 else float(abs(gan))


def energy_bins(energy: np.ndarray, n_bins: int = 3) -> list[tuple[str, np.ndarray]]:
    """'all' plus ``n_bins`` equal-width Ep bins over the sample's range."""
    lo, hi = float(energy.min()), float(energy.max())
    edges = np.linspace(lo, hi, n_bins + 1)
    bins = [("all", np.ones(len(energy), bool))]
    for a, b in zip(edges[:-1], edges[1:]):
        mask = (energy >= a) & (energy <= b)
        if mask.sum() >= 2:
            bins.append((f"{a:.0f}-{b:.0f} GeV", mask))
    return bins


def angle_bins(theta: np.ndarray) -> list[tuple[str, np.ndarray]]:
    bins = [("all", np.ones(len(theta), bool))]
    for deg in ANGLE_BINS_DEG:
        mask = np.abs(theta - np.radians(deg)) <= ANGLE_TOLERANCE_RAD
        if mask.sum() >= 2:
            bins.append((f"{deg:.0f} deg", mask))
    return bins


def transverse_worst_factor(p_mc: dict, p_gan: dict, depth: float = TAIL_DEPTH) -> float:
    """The largest factor between the mean GAN and MC transverse profiles (x and y) over the cells
    where MC holds at least ``depth`` of its peak cell: 1 is perfect, 2 means some cell of the
    core or tails is off by a factor 2 (either way); capped at 1e6 (a cell the GAN leaves empty)."""
    worst = 1.0
    for axis in ("x", "y"):
        a, b = p_mc[axis].mean(0), p_gan[axis].mean(0)
        cells = a >= depth * a.max() if a.max() > 0 else np.zeros_like(a, bool)
        if not cells.any():
            continue
        ratio = np.maximum(b[cells], 1e-6 * a[cells]) / a[cells]
        worst = max(worst, float(np.max(np.maximum(ratio, 1 / ratio))))
    return min(worst, 1e6)


def _bin_metrics(mc: np.ndarray, gan: np.ndarray, energy: np.ndarray, mc_angle: np.ndarray, gan_angle: np.ndarray,
                 gan_energy: np.ndarray) -> dict:
    """Comparison of two samples paired event by event with (nearly) the same conditions (images in GeV)."""
    sf_mc = mc.sum(axis=(1, 2, 3)) / energy
    sf_gan = gan.sum(axis=(1, 2, 3)) / gan_energy
    out = {
        "events": int(len(energy)),
        "sf_mc": float(sf_mc.mean()),
        "sf_gan": float(sf_gan.mean()),
        "sf_rel_error": _rel(sf_mc.mean(), sf_gan.mean()),
    }
    p_mc, p_gan = profiles(mc), profiles(gan)
    prof_err = {}
    shape_err = {}
    for axis in ("x", "y", "z"):
        a, b = p_mc[axis].mean(0), p_gan[axis].mean(0)
        nz = a > 0
        # authors' per-bin relative error, over the bins where MC has energy
        prof_err[axis] = float(np.mean(np.abs((a[nz] - b[nz]) / a[nz]))) if nz.any() else 0.0
        # energy-weighted absolute difference: robust to near-empty tail bins
        shape_err[axis] = float(np.abs(a - b).sum() / a.sum()) if a.sum() > 0 else 0.0
    out["profile_rel_error"] = prof_err
    out["profile_abs_error"] = shape_err
    out["transverse_worst_factor"] = transverse_worst_factor(p_mc, p_gan)
    m_mc, m_gan = moments(mc), moments(gan)
    mom = {k: _rel(m_mc[k].mean(), m_gan[k].mean()) for k in m_mc}
    out["moment_rel_error"] = mom
    out["moment_error"] = float(sum((mom[f"m{m}_x"] + mom[f"m{m}_y"] + mom[f"m{m}_z"]) / 3 for m in (1, 2)) / 2)
    safe = np.where(mc_angle == 0, 1.0, mc_angle)
    out["angle_rel_error"] = float(np.mean(np.abs((mc_angle - gan_angle) / safe)))
    out["angle_mc_mean"] = float(mc_angle.mean())
    out["angle_gan_mean"] = float(gan_angle.mean())
    h_mc, h_gan = hit_counts(mc, HIT_THRESHOLD_GEV), hit_counts(gan, HIT_THRESHOLD_GEV)
    out["hits_mc"] = float(h_mc.mean())
    out["hits_gan"] = float(h_gan.mean())
    out["hits_rel_error"] = _rel(h_mc.mean(), h_gan.mean())
    out["profile_error"] = float(np.mean(list(prof_err.values())))
    return out


def compare(mc_stored: np.ndarray, gan_stored: np.ndarray, energy_gev: np.ndarray, theta_rad: np.ndarray,
            gan_energy_gev: np.ndarray | None = None) -> dict:
    """All validation metrics of GAN vs MC images (stored units, same grid), paired event by event.

    The GAN's showers are generated with the MC events' conditions; ``gan_energy_gev`` is given
    when the second sample's events only nearly share them (the MC-vs-MC noise floor)."""
    if mc_stored.shape != gan_stored.shape:
        raise ValueError(f"MC images {mc_stored.shape} and GAN images {gan_stored.shape} differ in shape")
    mc = np.asarray(mc_stored, np.float64) / STORED_PER_GEV
    gan = np.asarray(gan_stored, np.float64) / STORED_PER_GEV
    gan_energy = energy_gev if gan_energy_gev is None else gan_energy_gev
    mc_angle, gan_angle = measured_angle(mc), measured_angle(gan)

    def metrics(m: np.ndarray) -> dict:
        return _bin_metrics(mc[m], gan[m], energy_gev[m], mc_angle[m], gan_angle[m], gan_energy[m])

    by_energy = {name: metrics(m) for name, m in energy_bins(energy_gev)}
    by_angle = {name: metrics(m) for name, m in angle_bins(theta_rad)}
    e_bins = [v for k, v in by_energy.items() if k != "all"] or [by_energy["all"]]
    metric_p = float(np.mean([b["moment_error"] for b in e_bins]))
    metric_e = float(np.mean([b["profile_error"] for b in e_bins]))
    metric_a = float(np.mean([b["angle_rel_error"] for b in e_bins]))
    overall = by_energy["all"]
    return {
        "summary": {
            "events": overall["events"],
            "sf_mc": overall["sf_mc"],
            "sf_gan": overall["sf_gan"],
            "sf_rel_error": float(np.mean([b["sf_rel_error"] for b in e_bins])),
            "profile_abs_error": float(np.mean(list(overall["profile_abs_error"].values()))),
            "moment_error": metric_p,
            "profile_error": metric_e,
            "angle_rel_error": metric_a,
            "hits_rel_error": overall["hits_rel_error"],
            "transverse_worst_factor": overall["transverse_worst_factor"],
            "optimisation_metric": metric_p + metric_e + metric_a,
        },
        "by_energy": by_energy,
        "by_angle": by_angle,
    }


# --------------------------------------------------------------------------- figures


def _figures(mc: np.ndarray, gan: np.ndarray, energy: np.ndarray, theta: np.ndarray, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    style = {"MC": dict(color="tab:blue", lw=2), "GAN": dict(color="tab:red", lw=1.5, ls="--")}
    paths: list[Path] = []

    def save(fig, name, **margins):
        # margins fixed per figure: matplotlib's tight_layout measured every tick label for them, half
        # of the figures' CPU (1 to 1.5 of 2.7 to 3.2 CPU-s a report, in every run's validation)
        path = out_dir / name
        fig.subplots_adjust(**margins)
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)

    # Sampling fraction vs Ep with relative error panel.
    edges = np.linspace(energy.min(), energy.max(), 9)
    centres = (edges[:-1] + edges[1:]) / 2
    idx = np.clip(np.digitize(energy, edges) - 1, 0, len(centres) - 1)
    fig, (ax, ax_err) = plt.subplots(2, 1, figsize=(6, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    sf = {}
    for label, img in (("MC", mc), ("GAN", gan)):
        ratio = img.sum(axis=(1, 2, 3)) / energy
        sf[label] = np.array([ratio[idx == i].mean() if (idx == i).any() else np.nan for i in range(len(centres))])
        ax.plot(centres, sf[label], marker="o", label=label, **style[label])
    ax.set_ylabel("ECAL sum / Ep")
    ax.set_title("Sampling fraction")
    ax.legend()
    ax_err.plot(centres, (sf["MC"] - sf["GAN"]) / sf["MC"], marker="o", color="k")
    ax_err.axhline(0, color="grey", lw=0.5)
    ax_err.set_xlabel("Ep [GeV]")
    ax_err.set_ylabel("(MC-GAN)/MC")
    save(fig, "sampling_fraction.png", left=0.16, right=0.97, top=0.94, bottom=0.09, hspace=0.08)

    # Profiles, linear and log.
    p_mc, p_gan = profiles(mc), profiles(gan)
    fig, axes = plt.subplots(3, 2, figsize=(10, 10))
    for row, (axis, title) in enumerate((("z", "Longitudinal (layer)"), ("x", "Transverse x"), ("y", "Transverse y"))):
        for col, scale in enumerate(("linear", "log")):
            ax = axes[row, col]
            for label, p in (("MC", p_mc), ("GAN", p_gan)):
                ax.step(np.arange(p[axis].shape[1]), p[axis].mean(0), where="mid", label=label, **style[label])
            ax.set_yscale(scale)
            ax.set_title(f"{title} ({scale})")
            ax.set_ylabel("mean energy [GeV]")
        axes[row, 0].legend()
    save(fig, "profiles.png", left=0.09, right=0.98, top=0.96, bottom=0.04, hspace=0.32, wspace=0.28)

    # Moments.
    m_mc, m_gan = moments(mc), moments(gan)
    fig, axes = plt.subplots(2, 3, figsize=(12, 6))
    for i, m in enumerate((1, 2)):
        for j, axis in enumerate("xyz"):
            key = f"m{m}_{axis}"
            ax = axes[i, j]
            bins = np.histogram_bin_edges(np.concatenate([m_mc[key], m_gan[key]]), 30)
            ax.hist(m_mc[key], bins, histtype="step", label="MC", **style["MC"])
            ax.hist(m_gan[key], bins, histtype="step", label="GAN", **style["GAN"])
            ax.set_title(f"{'first' if m == 1 else 'second'} moment {axis}")
    axes[0, 0].legend()
    save(fig, "moments.png", left=0.05, right=0.98, top=0.93, bottom=0.06, hspace=0.32, wspace=0.22)

    # Measured angle per θ bin.
    a_mc, a_gan = measured_angle(mc), measured_angle(gan)
    bins = angle_bins(theta)
    fig, axes = plt.subplots(1, len(bins), figsize=(4 * len(bins), 3.5), squeeze=False)
    for ax, (name, mask) in zip(axes[0], bins):
        edges_a = np.linspace(np.degrees(min(a_mc[mask].min(), a_gan[mask].min())), np.degrees(max(a_mc[mask].max(), a_gan[mask].max())), 25)
        ax.hist(np.degrees(a_mc[mask]), edges_a, histtype="step", label="MC", **style["MC"])
        ax.hist(np.degrees(a_gan[mask]), edges_a, histtype="step", label="GAN", **style["GAN"])
        ax.set_title(f"measured angle, θ {name}")
        ax.set_xlabel("degrees")
    axes[0, 0].legend()
    save(fig, "angle.png", left=0.2 / len(bins), right=0.98, top=0.88, bottom=0.16, wspace=0.25)

    # Cell-energy spectrum and hit counts.
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    cells = np.logspace(-6, 1, 50)
    for label, img in (("MC", mc), ("GAN", gan)):
        vals = img[img > 0]
        ax1.hist(vals, cells, histtype="step", label=label, **style[label])
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("cell energy [GeV]")
    ax1.set_title("Cell-energy spectrum")
    ax1.legend()
    h_mc, h_gan = hit_counts(mc, HIT_THRESHOLD_GEV), hit_counts(gan, HIT_THRESHOLD_GEV)
    hb = np.histogram_bin_edges(np.concatenate([h_mc, h_gan]), 30)
    ax2.hist(h_mc, hb, histtype="step", label="MC", **style["MC"])
    ax2.hist(h_gan, hb, histtype="step", label="GAN", **style["GAN"])
    ax2.set_xlabel(f"hits > {HIT_THRESHOLD_GEV:g} GeV")
    ax2.set_title("Number of hits")
    save(fig, "hits.png", left=0.07, right=0.98, top=0.92, bottom=0.13, wspace=0.22)
    return paths


def _floor_table(metrics: dict) -> str:
    floor, same = metrics["noise_floor"], metrics["gan_same_size"]
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{floor[k]:.4g}</td><td>{same[k]:.4g}</td></tr>"
                   for k in floor if isinstance(floor[k], float) and k in same)
    return f"<table><tr><th>metric</th><th>MC vs MC</th><th>GAN vs MC</th></tr>{rows}</table>"


def _html(metrics: dict, figures: list[Path], title: str, extra: dict | None) -> str:
    def table(d: dict) -> str:
        rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{v:.4g}</td></tr>" if isinstance(v, float) else f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in d.items())
        return f"<table>{rows}</table>"

    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;margin:1em 0}"
             "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}img{max-width:100%}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>",
             f"<p class='verdict'><b>Verdict:</b> {html.escape(metrics['verdict']['line'])}</p>",
             "<h2>Summary (GAN vs MC)</h2>", table(metrics["summary"]),
             f"<h2>Noise floor: MC vs MC, two halves of {metrics['noise_floor']['events']} events paired by condition</h2>",
             "<p>What sampling fluctuation alone gives; the GAN against the same half of MC, at the same sample size, beside it.</p>",
             _floor_table(metrics)]
    if metrics.get("initial"):
        parts += ["<h2>At initialisation (untrained generator, same conditions)</h2>", table(metrics["initial"]["summary"])]
    for key, name in (("by_energy", "Per energy bin"), ("by_angle", "Per angle bin")):
        parts.append(f"<h2>{name}</h2>")
        for bin_name, m in metrics[key].items():
            flat = {k: v for k, v in m.items() if not isinstance(v, dict)}
            parts += [f"<h3>{html.escape(bin_name)}</h3>", table(flat)]
    if extra:
        parts += ["<h2>Run</h2>", table(extra)]
    for fig in figures:
        data = base64.b64encode(fig.read_bytes()).decode()
        parts.append(f"<h2>{html.escape(fig.stem.replace('_', ' '))}</h2><img alt='{fig.stem}' src='data:image/png;base64,{data}'>")
    parts.append("</body></html>")
    return "".join(parts)


def matched_halves(energy_gev: np.ndarray, theta_rad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split events into two disjoint halves paired by condition, so that event i of one half has
    nearly the conditions of event i of the other (as a GAN sample generated for them would).

    Events are cut into about √(n/4) equal-count slices of θ, sorted by energy within a slice
    (alternately up and down, so consecutive slices meet at similar energies), and neighbours go
    one to each half."""
    n = len(energy_gev)
    slices = max(1, round(np.sqrt(n / 4)))
    slice_of = np.argsort(np.argsort(theta_rad, kind="stable"), kind="stable") * slices // max(n, 1)
    snake = np.where(slice_of % 2 == 0, energy_gev, -energy_gev)
    order = np.lexsort((snake, slice_of))
    pairs = order[: 2 * (n // 2)].reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def sample_distances(mc_gev: np.ndarray, other_gev: np.ndarray, mc_energy: np.ndarray, other_energy: np.ndarray, seed: int = 0) -> dict:
    """FPD, KPD and classifier AUC between two sets of showers (GeV), on their high-level features."""
    from .distances import distances, high_level_features

    return distances(high_level_features(mc_gev, mc_energy, HIT_THRESHOLD_GEV),
                     high_level_features(other_gev, other_energy, HIT_THRESHOLD_GEV), seed=seed)


def verdict(metrics: dict, gate: dict[str, float] | None) -> dict:
    """The run's physics verdict: against the gate (metric → largest accepted value) if there is
    one, and next to the MC-vs-MC noise floor at the same sample size always."""
    floor, same = metrics["noise_floor"], metrics["gan_same_size"]
    against = "; ".join(f"{k} {same[k]:.4g} (MC-vs-MC {floor[k]:.4g})" for k in VERDICT_METRICS if k in floor and k in same)
    context = f"at {floor['events']} events per sample: {against}"
    return gate_verdict(metrics["summary"], gate, context)


def evaluate(mc_stored: np.ndarray, gan_stored: np.ndarray, energy_gev: np.ndarray, theta_rad: np.ndarray,
             gate: dict[str, float] | None = None, seed: int = 0, model_facts: dict[str, float] | None = None) -> dict:
    """Every metric of the GAN against MC, the same against half of MC with the other half as the
    noise floor, the sample distances, and the verdict (NaN or infinite cells fail it, counted and set to 0).
    ``model_facts``: summary metrics of the model itself rather than of its showers (the energy
    calibration's offset), which a gate may bound too."""
    gan_stored, broken = finite_part(gan_stored)
    metrics = compare(mc_stored, gan_stored, energy_gev, theta_rad)
    metrics["summary"][BROKEN] = broken
    metrics["summary"].update(model_facts or {})
    mc, gan = np.asarray(mc_stored, np.float64) / STORED_PER_GEV, np.asarray(gan_stored, np.float64) / STORED_PER_GEV
    metrics["summary"].update(sample_distances(mc, gan, energy_gev, energy_gev, seed))
    # mean profiles (GeV per cell), so runs can be compared or averaged without their showers
    metrics["profiles"] = {name: {axis: p.mean(0).tolist() for axis, p in profiles(img).items()} for name, img in (("mc", mc), ("gan", gan))}
    # The floor: MC half A against MC half B. Like for like: the GAN against the same half A, with
    # the showers it generated for half B's conditions.
    a, b = matched_halves(energy_gev, theta_rad)
    metrics["noise_floor"] = compare(mc_stored[a], mc_stored[b], energy_gev[a], theta_rad[a], gan_energy_gev=energy_gev[b])["summary"]
    metrics["noise_floor"].update(sample_distances(mc[a], mc[b], energy_gev[a], energy_gev[b], seed))
    metrics["gan_same_size"] = compare(mc_stored[a], gan_stored[b], energy_gev[a], theta_rad[a], gan_energy_gev=energy_gev[b])["summary"]
    metrics["gan_same_size"].update(sample_distances(mc[a], gan[b], energy_gev[a], energy_gev[b], seed))
    metrics["verdict"] = verdict(metrics, gate)
    return metrics


def write_report(
    mc_stored: np.ndarray,
    gan_stored: np.ndarray,
    energy_gev: np.ndarray,
    theta_rad: np.ndarray,
    out_dir: Path,
    initial_stored: np.ndarray | None = None,
    title: str = "3DGAN physics validation",
    extra: dict | None = None,
    gate: dict[str, float] | None = None,
    model_facts: dict[str, float] | None = None,
) -> dict:
    """Compute metrics, draw figures, write ``metrics.json`` and ``report.html`` into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = evaluate(mc_stored, gan_stored, energy_gev, theta_rad, gate, model_facts=model_facts)
    gan_stored = finite_part(gan_stored)[0]
    if extra:
        metrics["run"] = extra  # the preset, the epochs and the precision the judged model was trained in
    if initial_stored is not None:
        metrics["initial"] = {"summary": compare(mc_stored, initial_stored, energy_gev, theta_rad)["summary"]}
    figures = _figures(np.asarray(mc_stored) / STORED_PER_GEV, np.asarray(gan_stored) / STORED_PER_GEV, energy_gev, theta_rad, out_dir)
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    (out_dir / "report.html").write_text(_html(metrics, figures, title, extra))
    return metrics
