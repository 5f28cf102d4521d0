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
is a few lines of NumPy here. The classifier is Keras (already the workload's framework).
"""

from __future__ import annotations

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


def classifier_auc(real: np.ndarray, gen: np.ndarray, seed: int = 0, epochs: int = 40) -> float:
    """AUC of a small network trained to tell ``gen`` from ``real`` (two-fold: train on one half of
    each set, score the other, then swap; the mean of the two folds). Features are log-compressed
    and standardised on the training fold."""
    import keras

    def prepare(x: np.ndarray) -> np.ndarray:
        return np.sign(x) * np.log1p(np.abs(x))

    rng = np.random.default_rng(seed)
    xr, xg = prepare(real), prepare(gen)
    folds_r, folds_g = np.array_split(rng.permutation(len(xr)), 2), np.array_split(rng.permutation(len(xg)), 2)
    aucs = []
    for k in range(2):
        train = np.concatenate([xr[folds_r[k]], xg[folds_g[k]]])
        labels = np.concatenate([np.zeros(len(folds_r[k])), np.ones(len(folds_g[k]))]).astype(np.float32)
        test = np.concatenate([xr[folds_r[1 - k]], xg[folds_g[1 - k]]])
        test_labels = np.concatenate([np.zeros(len(folds_r[1 - k])), np.ones(len(folds_g[1 - k]))]).astype(np.float32)
        mean, std = train.mean(0), train.std(0)
        std = np.where(std == 0, 1.0, std)
        keras.utils.set_random_seed(seed + k)
        net = keras.Sequential([keras.Input((train.shape[1],)), keras.layers.Dense(64, activation="relu"),
                                keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1, activation="sigmoid")])
        net.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
        # ``epochs`` passes over the data as one shuffled pass over ``epochs`` copies: the same steps
        # without Keras's per-epoch overhead, which dominates for a few hundred showers
        x = np.tile(((train - mean) / std).astype(np.float32), (epochs, 1))
        net.fit(x, np.tile(labels, epochs), epochs=1, batch_size=64, shuffle=True, verbose=0)
        scores = np.asarray(net(((test - mean) / std).astype(np.float32), training=False)).ravel()
        auc = keras.metrics.AUC(num_thresholds=2001)
        auc.update_state(test_labels, scores)
        aucs.append(float(auc.result()))
    return float(np.mean(aucs))


def distances(real_features: np.ndarray, gen_features: np.ndarray, seed: int = 0) -> dict:
    """FPD, KPD (each with its uncertainty) and classifier AUC of two feature sets."""
    f, f_err = fpd(real_features, gen_features, seed=42 + seed)
    k, k_err = kpd(real_features, gen_features, seed=42 + seed)
    return {"fpd": f, "fpd_error": f_err, "kpd": k, "kpd_error": k_err, "classifier_auc": classifier_auc(real_features, gen_features, seed=seed)}
