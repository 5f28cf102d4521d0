"""The CaloChallenge evaluation of generated showers against reference (held-out) Monte Carlo.

* **High-level features** per shower, as the challenge's ``HighLevelFeatures`` computes them:
  energy per layer, total energy over the incident energy, per layer the centre of energy and the
  width in x and y (the challenge's eta and phi), and per layer the sparsity (share of cells
  with a deposit). 271 features for dataset 2.
* **Separation power** of each feature's histogram, S = 1/2 sum_i (h1_i - h2_i)^2 / (h1_i + h2_i)
  over normalised histograms (0: identical, 1: disjoint), binned on the reference's range;
  summarised by feature group and over all features.
* **Classifier AUC**: a network trained to tell generated from reference showers (two folds), on
  the cells (energy share per layer and radial ring, log scale, with the incident energy) and on
  the high-level features; 0.5 means it cannot tell them apart.
* **FPD / KPD** (``workloads.common.distances``) on a compact feature vector per shower: energy
  share of nine groups of five layers, total energy ratio, overall centre and width in x and y,
  overall sparsity.

Every figure is given next to its noise floor: the same metric for reference half A against
reference half B, and the model (for half B's energies) against half A, at the same size.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import numpy as np

from ..common.gate import BROKEN, finite_part, gate_verdict
from .geometry import LAYERS, R_CENTRES_MM, cell_xy_mm, cells
from .metrics import GROUPS, VERDICT_METRICS

BINS = 30


def high_level_features(showers_mev: np.ndarray, energies_mev: np.ndarray) -> dict[str, np.ndarray]:
    """Feature name -> (N,) values, for every layer's energy, centre, width and sparsity, and E_tot/E_inc."""
    c = cells(np.asarray(showers_mev, np.float64))                       # (N, layer, alpha, r)
    x, y = cell_xy_mm()                                                   # (alpha, r)
    e_layer = c.sum(axis=(2, 3))                                          # (N, layer)
    safe = np.where(e_layer > 0, e_layer, 1.0)
    ec_x = (c * x).sum(axis=(2, 3)) / safe
    ec_y = (c * y).sum(axis=(2, 3)) / safe
    width_x = np.sqrt(np.clip((c * x ** 2).sum(axis=(2, 3)) / safe - ec_x ** 2, 0, None))
    width_y = np.sqrt(np.clip((c * y ** 2).sum(axis=(2, 3)) / safe - ec_y ** 2, 0, None))
    sparsity = (c > 0).mean(axis=(2, 3))
    out = {"etot_ratio": e_layer.sum(1) / np.asarray(energies_mev, np.float64).reshape(-1)}
    for name, values in (("e_layer", e_layer), ("ec_x", ec_x), ("ec_y", ec_y), ("width_x", width_x), ("width_y", width_y),
                         ("sparsity", sparsity)):
        for layer in range(LAYERS):
            out[f"{name}_{layer:02d}"] = values[:, layer]
    return out


def separation_power(reference: np.ndarray, other: np.ndarray, bins: int = BINS, log: bool = False) -> float:
    """1/2 sum (h1 - h2)^2 / (h1 + h2) of the two normalised histograms on the reference's range."""
    a, b = np.asarray(reference, np.float64), np.asarray(other, np.float64)
    if log:
        floor = max(a[a > 0].min() if (a > 0).any() else 1e-6, 1e-6)
        a, b = np.log10(np.clip(a, floor, None)), np.log10(np.clip(b, floor, None))
    lo, hi = a.min(), a.max()
    if not hi > lo:
        hi = lo + 1e-9
    edges = np.linspace(lo, hi, bins + 1)
    h1, _ = np.histogram(np.clip(a, lo, hi), edges)
    h2, _ = np.histogram(np.clip(b, lo, hi), edges)
    h1, h2 = h1 / max(h1.sum(), 1), h2 / max(h2.sum(), 1)
    total = h1 + h2
    keep = total > 0
    return float(0.5 * ((h1[keep] - h2[keep]) ** 2 / total[keep]).sum())


def separation_powers(ref: dict[str, np.ndarray], other: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: separation_power(ref[k], other[k], log=k.startswith("e_layer")) for k in ref}


def compact_features(hlf: dict[str, np.ndarray], showers_mev: np.ndarray, energies_mev: np.ndarray) -> np.ndarray:
    """(N, 15): energy share of nine groups of five layers, E_tot/E_inc, overall centre and width in x and y, sparsity."""
    e_inc = np.asarray(energies_mev, np.float64).reshape(-1)
    layers = np.stack([hlf[f"e_layer_{i:02d}"] for i in range(LAYERS)], 1)
    groups = layers.reshape(len(e_inc), 9, 5).sum(2) / e_inc[:, None]
    c = cells(np.asarray(showers_mev, np.float64)).sum(1)               # (N, alpha, r)
    x, y = cell_xy_mm()
    total = np.where(c.sum((1, 2)) > 0, c.sum((1, 2)), 1.0)
    cx, cy = (c * x).sum((1, 2)) / total, (c * y).sum((1, 2)) / total
    wx = np.sqrt(np.clip((c * x ** 2).sum((1, 2)) / total - cx ** 2, 0, None))
    wy = np.sqrt(np.clip((c * y ** 2).sum((1, 2)) / total - cy ** 2, 0, None))
    sparsity = (cells(np.asarray(showers_mev)) > 0).mean((1, 2, 3))
    return np.column_stack([groups, hlf["etot_ratio"], cx, cy, wx, wy, sparsity])


def cell_features(showers_mev: np.ndarray, energies_mev: np.ndarray) -> np.ndarray:
    """(N, 406): each layer-and-ring's share of the incident energy (log scale) and log10 E_inc, the
    low-level classifier's input (the 16 angular cells of a ring summed: a few hundred showers
    cannot train a classifier on 6480 inputs)."""
    e_inc = np.asarray(energies_mev, np.float64).reshape(-1)
    rings = cells(np.asarray(showers_mev, np.float64)).sum(2).reshape(len(e_inc), -1) / e_inc[:, None]
    return np.column_stack([np.log10(rings + 1e-7), np.log10(e_inc)])


def _summary(ref_showers, ref_energies, other_showers, other_energies, seed: int, classifiers: bool = True) -> tuple[dict, dict]:
    """(summary metrics, separation power per feature) of ``other`` against the reference."""
    from ..common.distances import classifier_auc, fpd, kpd

    hl_ref, hl_other = high_level_features(ref_showers, ref_energies), high_level_features(other_showers, other_energies)
    seps = separation_powers(hl_ref, hl_other)
    values = np.array(list(seps.values()))
    summary = {"events": int(len(ref_energies)), "sep_power_mean": float(values.mean()), "sep_power_max": float(values.max())}
    for group, prefix in GROUPS.items():
        summary[group] = float(np.mean([v for k, v in seps.items() if k.startswith(prefix)]))
    ref_mean, other_mean = hl_ref["etot_ratio"].mean(), hl_other["etot_ratio"].mean()
    summary["etot_ratio_mc"], summary["etot_ratio_model"] = float(ref_mean), float(other_mean)
    summary["etot_ratio_rel_error"] = float(abs(other_mean - ref_mean) / ref_mean) if ref_mean > 0 else float("inf")
    if classifiers:
        a, b = compact_features(hl_ref, ref_showers, ref_energies), compact_features(hl_other, other_showers, other_energies)
        summary["fpd"], summary["fpd_error"] = fpd(a, b, seed=42 + seed)
        summary["kpd"], summary["kpd_error"] = kpd(a, b, seed=42 + seed)
        summary["classifier_auc"] = classifier_auc(cell_features(ref_showers, ref_energies), cell_features(other_showers, other_energies), seed=seed)
        hl_a = np.column_stack(list(hl_ref.values()))
        hl_b = np.column_stack([hl_other[k] for k in hl_ref])
        summary["hl_classifier_auc"] = classifier_auc(hl_a, hl_b, seed=seed)
    return summary, seps


def epoch_summary(ref_showers, ref_energies, model_showers) -> dict[str, float]:
    """The cheap metrics (no classifier, no FPD) of a scan's trial after every epoch."""
    return _summary(ref_showers, ref_energies, model_showers, ref_energies, seed=0, classifiers=False)[0]


def halves(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint random halves of n events."""
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2: 2 * (n // 2)])


def evaluate(ref_showers: np.ndarray, energies: np.ndarray, model_showers: np.ndarray, model_b_showers: np.ndarray,
             gate: dict[str, float] | None = None, seed: int = 0) -> dict:
    """Every metric of the model against the reference, the noise floor (reference half A against
    half B) and the model at the same size (its showers for half B's energies against half A),
    and the verdict against ``gate``. ``model_b_showers`` are generated for ``energies[halves()[1]]``."""
    model_showers, broken = finite_part(model_showers)
    model_b_showers = finite_part(model_b_showers)[0]
    summary, seps = _summary(ref_showers, energies, model_showers, energies, seed)
    summary[BROKEN] = broken
    a, b = halves(len(energies), seed)
    floor, _ = _summary(ref_showers[a], energies[a], ref_showers[b], energies[b], seed)
    same, _ = _summary(ref_showers[a], energies[a], model_b_showers, energies[b], seed)
    against = "; ".join(f"{k} {same[k]:.4g} (MC-vs-MC {floor[k]:.4g})" for k in VERDICT_METRICS if k in floor and k in same)
    metrics = {"summary": summary, "separation_power": seps, "noise_floor": floor, "model_same_size": same}
    metrics["verdict"] = gate_verdict(summary, gate, f"at {floor['events']} events per sample: {against}")
    return metrics


def _figures(ref: np.ndarray, model: np.ndarray, energies: np.ndarray, out_dir: Path, seps: dict[str, float]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hl_ref, hl_model = high_level_features(ref, energies), high_level_features(model, energies)
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    ax = axes[0, 0]
    edges = np.linspace(min(hl_ref["etot_ratio"].min(), hl_model["etot_ratio"].min()), max(hl_ref["etot_ratio"].max(), hl_model["etot_ratio"].max()), 40)
    ax.hist(hl_ref["etot_ratio"], edges, histtype="step", label="MC", density=True)
    ax.hist(hl_model["etot_ratio"], edges, histtype="step", label="model", density=True)
    ax.set_xlabel("E_dep / E_inc")
    ax.legend()
    layers = np.arange(LAYERS)
    for ax, name, label in ((axes[0, 1], "e_layer", "mean energy per layer (MeV)"), (axes[0, 2], "sparsity", "share of cells hit"),
                            (axes[1, 0], "width_x", "mean width in x (mm)")):
        ax.plot(layers, [hl_ref[f"{name}_{i:02d}"].mean() for i in layers], "o-", ms=3, label="MC")
        ax.plot(layers, [hl_model[f"{name}_{i:02d}"].mean() for i in layers], "s-", ms=3, label="model")
        ax.set_xlabel("layer")
        ax.set_ylabel(label)
        if name == "e_layer":
            ax.set_yscale("log")
        ax.legend()
    ax = axes[1, 1]
    ring_ref, ring_model = cells(ref).sum((1, 2)).mean(0), cells(model).sum((1, 2)).mean(0)
    ax.plot(R_CENTRES_MM, ring_ref, "o-", label="MC")
    ax.plot(R_CENTRES_MM, ring_model, "s-", label="model")
    ax.set_yscale("log")
    ax.set_xlabel("r (mm)")
    ax.set_ylabel("mean energy per ring (MeV)")
    ax.legend()
    ax = axes[1, 2]
    names = list(GROUPS)
    ax.bar(range(len(names)), [np.mean([v for k, v in seps.items() if k.startswith(GROUPS[n])]) for n in names])
    ax.set_xticks(range(len(names)), [n.removeprefix("sep_") for n in names], rotation=20, fontsize=8)
    ax.set_ylabel("separation power (mean of the group)")
    fig.tight_layout()
    path = out_dir / "calo_validation.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return [path]


def write_report(ref: np.ndarray, energies: np.ndarray, model: np.ndarray, model_b: np.ndarray, out_dir: Path,
                 gate: dict[str, float] | None = None, extra: dict | None = None, seed: int = 0) -> dict:
    """``metrics.json``, the figure and ``report.html`` in ``out_dir``; returns the metrics."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = evaluate(ref, energies, model, model_b, gate, seed)
    model = finite_part(model)[0]
    if extra:
        metrics["run"] = extra
    figures = _figures(ref, model, energies, out_dir, metrics["separation_power"])
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=1))
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.4g}</td><td>{metrics['noise_floor'].get(k, float('nan')):.4g}</td>"
                   f"<td>{metrics['model_same_size'].get(k, float('nan')):.4g}</td></tr>"
                   for k, v in metrics["summary"].items() if isinstance(v, float))
    images = "".join(f'<img src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}" style="max-width:100%">' for p in figures)
    info = "".join(f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>" for k, v in (extra or {}).items())
    (out_dir / "report.html").write_text(
        f"<!doctype html><meta charset='utf-8'><title>CaloChallenge-style validation</title>"
        f"<h1>CaloChallenge-style validation (dataset-2 geometry)</h1><ul>{info}</ul>"
        f"<p><b>{html.escape(metrics['verdict']['line'])}</b></p>"
        f"<table border=1 cellpadding=3><tr><th>metric</th><th>model vs MC</th><th>MC half vs MC half</th><th>model vs MC, same size</th></tr>{rows}</table>"
        f"{images}")
    return metrics
