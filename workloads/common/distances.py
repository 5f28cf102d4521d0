"""Sample-level distances between two sets of showers, as the fast-calorimeter community reports
them, computed on each workload's high-level features (one row per shower):

* **FPD** (Fréchet physics distance): the Fréchet distance between Gaussian fits of the two
  feature sets, evaluated on subsets of several sizes and extrapolated linearly in 1/N to an
  infinite sample (the finite-sample bias of the covariance estimate falls like 1/N).
* **KPD** (kernel physics distance): the unbiased squared maximum mean discrepancy with the
  polynomial kernel (x·y/d + 1)^4, median over random batches.
* **Classifier AUC**: a small neural network trained to tell the two sets apart on half of each,
  scored on the other half (and the halves swapped); 0.5 means it cannot tell them apart.

FPD and KPD follow ``jetnet.evaluation.fpd``/``kpd`` (same normalisation by the first set's max
|x|, same kernel, same 1/N extrapolation); ``jetnet`` itself pulls in PyTorch and more for what
is a few lines of NumPy here, and so is the classifier (a Keras one cost 2.4 s a fold in tracing).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

KERNEL_DEGREE = 4


def _normalise(real: np.ndarray, gen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scale = np.abs(real).max(axis=0)
    scale = np.where(scale == 0, 1.0, scale)
    return real / scale, gen / scale


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """||μa − μb||² + Tr(Σa + Σb − 2 (Σa Σb)^½) of Gaussian fits to two samples (rows are events).

    Tr (Σa Σb)^½ is the sum of the square roots of the eigenvalues of Σa^½ Σb Σa^½ (same spectrum,
    symmetric, so ``eigh`` applies and no complex square root is needed)."""
    mu = a.mean(0) - b.mean(0)
    ca, cb = np.atleast_2d(np.cov(a, rowvar=False)), np.atleast_2d(np.cov(b, rowvar=False))
    w, v = np.linalg.eigh(ca)
    root_a = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    cross = np.linalg.eigvalsh(root_a @ cb @ root_a)
    return float(mu @ mu + np.trace(ca) + np.trace(cb) - 2 * np.sqrt(np.clip(cross, 0, None)).sum())


def fpd(real: np.ndarray, gen: np.ndarray, num_points: int = 6, num_batches: int = 10, seed: int = 42) -> tuple[float, float]:
    """Fréchet physics distance extrapolated to N → ∞, and its standard error from the fit.

    Subset sizes run from a quarter of the smaller set (at least twice the feature count) up to the
    whole smaller set, regular in 1/N; each size is drawn ``num_batches`` times without replacement.
    """
    real, gen = _normalise(real, gen)
    rng = np.random.default_rng(seed)
    n = min(len(real), len(gen))
    low = min(n, max(2 * real.shape[1], n // 4))
    sizes = np.unique((1 / np.linspace(1 / low, 1 / n, num_points)).astype(int))
    means, spreads = [], []
    for size in sizes:
        draws = [frechet_distance(real[rng.choice(len(real), size, replace=False)], gen[rng.choice(len(gen), size, replace=False)])
                 for _ in range(num_batches)]
        means.append(np.mean(draws))
        spreads.append(np.std(draws))
    if len(sizes) < 3:  # too few events to extrapolate: the value at the largest size, and its spread over draws
        return float(means[-1]), float(spreads[-1])
    (_, intercept), cov = np.polyfit(1.0 / sizes, np.array(means), 1, cov=True)
    return float(intercept), float(np.sqrt(max(cov[1, 1], 0.0)))


def _mmd_poly_unbiased(x: np.ndarray, y: np.ndarray, degree: int = KERNEL_DEGREE) -> float:
    d = x.shape[1]
    kxx = (x @ x.T / d + 1) ** degree
    kyy = (y @ y.T / d + 1) ** degree
    kxy = (x @ y.T / d + 1) ** degree
    m = len(x)
    return float((kxx.sum() - np.trace(kxx)) / (m * (m - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1)) - 2 * kxy.mean())


def kpd(real: np.ndarray, gen: np.ndarray, num_batches: int = 10, seed: int = 42) -> tuple[float, float]:
    """Kernel physics distance: median unbiased MMD² over random half-size batches, and half the
    16–84 % spread."""
    real, gen = _normalise(real, gen)
    rng = np.random.default_rng(seed)
    size = max(2, min(len(real), len(gen)) // 2)
    vals = np.array([_mmd_poly_unbiased(real[rng.choice(len(real), size, replace=False)], gen[rng.choice(len(gen), size, replace=False)])
                     for _ in range(num_batches)])
    lo, hi = np.percentile(vals, [16, 84])
    return float(np.median(vals)), float((hi - lo) / 2)


class _Mlp:
    """The classifier behind ``classifier_auc``: two hidden layers of 64 ReLU units and a sigmoid
    output, Glorot-uniform weights, binary cross-entropy, Adam (Keras' defaults). NumPy, because a
    Keras model traced its training step afresh for every pair of samples: 2.4 s a fold, 14 s of
    a 25 s validation, for a network this size trains in milliseconds."""

    def __init__(self, inputs: int, rng: np.random.Generator, hidden: int = 64):
        sizes = [inputs, hidden, hidden, 1]
        self.params = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            self.params += [rng.uniform(-limit, limit, (fan_in, fan_out)), np.zeros(fan_out)]

    def _forward(self, x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        w1, b1, w2, b2, w3, b3 = self.params
        h1 = np.maximum(x @ w1 + b1, 0.0)
        h2 = np.maximum(h1 @ w2 + b2, 0.0)
        return [x, h1, h2], (h2 @ w3 + b3).ravel()

    def scores(self, x: np.ndarray) -> np.ndarray:
        """The network's logits (monotone in its probability: all an AUC needs)."""
        return self._forward(x)[1]

    def fit(self, x: np.ndarray, labels: np.ndarray, epochs: int, rng: np.random.Generator, batch: int = 64,
            rate: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-7) -> None:
        first = [np.zeros_like(p) for p in self.params]
        second = [np.zeros_like(p) for p in self.params]
        step = 0
        for _ in range(epochs):
            order = rng.permutation(len(x))
            for start in range(0, len(x), batch):
                rows = order[start:start + batch]
                (xb, h1, h2), logits = self._forward(x[rows])
                w1, _, w2, _, w3, _ = self.params
                d3 = ((1.0 / (1.0 + np.exp(-logits)) - labels[rows]) / len(rows))[:, None]  # d(mean BCE)/d(logit)
                d2 = (d3 @ w3.T) * (h2 > 0)
                d1 = (d2 @ w2.T) * (h1 > 0)
                grads = [xb.T @ d1, d1.sum(0), h1.T @ d2, d2.sum(0), h2.T @ d3, d3.sum(0)]
                step += 1
                scale = rate * np.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
                for p, g, m, v in zip(self.params, grads, first, second):
                    m += (1 - beta1) * (g - m)
                    v += (1 - beta2) * (g * g - v)
                    p -= scale * m / (np.sqrt(v) + eps)


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve, exactly: the Mann-Whitney U of the positives' ranks (ties share
    their mean rank)."""
    order = np.argsort(scores, kind="mergesort")
    ranked = scores[order]
    _, first, counts = np.unique(ranked, return_index=True, return_counts=True)
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)
    positive = labels == 1
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


#: (standardised training rows, their labels, standardised rows to score, seed, passes) -> scores
ScoresOf = Callable[[np.ndarray, np.ndarray, np.ndarray, int, int], np.ndarray]


def mlp_scores(train: np.ndarray, labels: np.ndarray, test: np.ndarray, seed: int, epochs: int) -> np.ndarray:
    """``_Mlp`` trained on one fold, scoring the other."""
    rng = np.random.default_rng(seed)
    net = _Mlp(train.shape[1], rng)
    net.fit(train, labels, epochs, rng)
    return net.scores(test)


def classifier_auc(real: np.ndarray, gen: np.ndarray, seed: int = 0, epochs: int = 40, scores_of: ScoresOf = mlp_scores) -> float:
    """AUC of a small network trained to tell ``gen`` from ``real`` (two-fold: train on one half of
    each set, score the other, then swap; the mean of the two folds). Features are log-compressed
    and standardised on the training fold. ``scores_of`` trains and scores one fold (the benchmark
    races another network on the same folds)."""

    def prepare(x: np.ndarray) -> np.ndarray:
        return np.sign(x) * np.log1p(np.abs(x))

    rng = np.random.default_rng(seed)
    xr, xg = prepare(np.asarray(real, dtype=np.float64)), prepare(np.asarray(gen, dtype=np.float64))
    folds_r, folds_g = np.array_split(rng.permutation(len(xr)), 2), np.array_split(rng.permutation(len(xg)), 2)
    aucs = []
    for k in range(2):
        train = np.concatenate([xr[folds_r[k]], xg[folds_g[k]]])
        labels = np.concatenate([np.zeros(len(folds_r[k])), np.ones(len(folds_g[k]))])
        test = np.concatenate([xr[folds_r[1 - k]], xg[folds_g[1 - k]]])
        test_labels = np.concatenate([np.zeros(len(folds_r[1 - k])), np.ones(len(folds_g[1 - k]))])
        mean, std = train.mean(0), train.std(0)
        std = np.where(std == 0, 1.0, std)
        aucs.append(roc_auc(test_labels, scores_of((train - mean) / std, labels, (test - mean) / std, seed + k, epochs)))
    return float(np.mean(aucs))


def distances(real_features: np.ndarray, gen_features: np.ndarray, seed: int = 0) -> dict:
    """FPD, KPD (each with its uncertainty) and classifier AUC of two feature sets."""
    f, f_err = fpd(real_features, gen_features, seed=42 + seed)
    k, k_err = kpd(real_features, gen_features, seed=42 + seed)
    return {"fpd": f, "fpd_error": f_err, "kpd": k, "kpd_error": k_err, "classifier_auc": classifier_auc(real_features, gen_features, seed=seed)}
