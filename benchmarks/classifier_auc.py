"""The validation's classifier AUC: the NumPy network burst uses against the Keras one it replaced.

    python benchmarks/classifier_auc.py [--seeds 3]

Same network (64-64 ReLU, sigmoid, Adam 1e-3, batch 64, 40 passes, two folds), same data: pairs of
Gaussian samples whose true separability is known (a second draw: 0.5; one feature shifted by
0.7 sigma: 0.69). Prints both AUCs (mean over seeds, and each seed) and seconds per call, side by
side, with this machine's CPU. The Keras model traces its training step anew for every call,
which is what the validation paid six times per report.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workloads.common.cpu import cpu_info  # noqa: E402
from workloads.common.distances import classifier_auc  # noqa: E402


def keras_scores(train: np.ndarray, labels: np.ndarray, test: np.ndarray, seed: int, epochs: int) -> np.ndarray:
    """One fold of the Keras classifier the validation used before (kept here as the reference)."""
    import keras

    keras.utils.set_random_seed(seed)
    net = keras.Sequential([keras.Input((train.shape[1],)), keras.layers.Dense(64, activation="relu"),
                            keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1, activation="sigmoid")])
    net.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
    # ``epochs`` passes as one shuffled pass over ``epochs`` copies, as the validation's Keras code did
    net.fit(np.tile(train.astype(np.float32), (epochs, 1)), np.tile(labels.astype(np.float32), epochs),
            epochs=1, batch_size=64, shuffle=True, verbose=0)
    return np.asarray(net(test.astype(np.float32), training=False)).ravel()


def cases(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    cov = np.diag([1.0, 2.0, 0.5, 1.0])
    out = {}
    for n in (100, 400):
        real = rng.multivariate_normal([5, 5, 5, 5], cov, n)
        out[f"second draw, n={n}"] = (real, rng.multivariate_normal([5, 5, 5, 5], cov, n))
        out[f"0.7 sigma shift, n={n}"] = (real, rng.multivariate_normal([5, 6, 5, 5], cov, n))
        out[f"widths x1.5, n={n}"] = (real, rng.multivariate_normal([5, 5, 5, 5], cov * 2.25, n))
        out[f"3 sigma shift, n={n}"] = (real, rng.multivariate_normal([8, 5, 5, 5], cov, n))
    a = rng.normal(size=(20, 20))
    corr = a @ a.T / 20
    out["20 features, 0.2 shift, n=300"] = (rng.multivariate_normal(np.zeros(20), corr, 300), rng.multivariate_normal(np.full(20, 0.2), corr, 300))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    info = cpu_info()
    print(f"CPU: {info['model']}, {info['cores']} cores, SIMD {' '.join(info['simd'])}")
    print(f"{'case':30s} {'Keras AUC':>9s} {'NumPy AUC':>9s} {'Keras s':>8s} {'NumPy s':>8s}")
    for name, (a, b) in cases(np.random.default_rng(1)).items():
        t = time.perf_counter()
        keras_aucs = [classifier_auc(a, b, seed=s, scores_of=keras_scores) for s in range(args.seeds)]
        keras_s = (time.perf_counter() - t) / args.seeds
        t = time.perf_counter()
        numpy_aucs = [classifier_auc(a, b, seed=s) for s in range(args.seeds)]
        numpy_s = (time.perf_counter() - t) / args.seeds
        print(f"{name:30s} {np.mean(keras_aucs):9.3f} {np.mean(numpy_aucs):9.3f} {keras_s:8.2f} {numpy_s:8.3f}"
              f"   seeds: {np.round(keras_aucs, 3).tolist()} {np.round(numpy_aucs, 3).tolist()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
