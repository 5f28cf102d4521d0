"""Race burst's 3DGAN training step and generator against the authors' TF2 loop, on this CPU.

    python benchmarks/race_reference.py [--reference PATH/TO/GPU_Version2.py] [--batch 8] [--gen-batch 64]
                                        [--precisions float32 mixed_bfloat16] [--onednn both|on|off]

Each contender runs in its own subprocess (oneDNN is fixed when TensorFlow starts), one after
another, with the same batch, the same intra/inter-op threads and the same preprocessed synthetic
events, once with oneDNN on and once with it off. Printed: training samples/s (best and median of
timed blocks after a warm-up) and generated showers/s, the machine's load before each part, and
burst/authors ratios. burst runs once per precision in ``--precisions`` (float32 and
mixed_bfloat16 by default: bfloat16 is fast only where the CPU has AVX512-BF16 or AMX, and
TensorFlow emulates it elsewhere, which the race shows); the authors' loop runs in float32, as
published. The CPU's flags head the table.

The authors' loop is built from *your own copy* of their ``GPU_Version2.py`` (from the
ISC_HPC_3DGAN repository); nothing of it is shipped here. From that file the race takes the
functions that define the networks, the losses and the step (``discriminator``, ``generator``,
``ecal_sum``, ``ecal_angle``, ``compute_global_loss``, ``BitFlip``, ``Train_steps``,
``distributed_train_step``) and runs them as published, with two adaptations that any run on
today's TensorFlow needs: ``channels_last`` (TensorFlow's CPU Conv3D has no channels-first kernel),
Keras 3's ``BatchNormalization`` in place of the removed ``tensorflow.compat.v1.keras`` one, and
labels converted to tensors before their ``compute_global_loss`` (Keras 3's losses refuse the
nested Python lists that Keras 2 took).
Their generation is timed as their analysis does it: ``generator.predict`` in batches, then the
inverse power transform in NumPy.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

AUTHORS_FUNCTIONS = ("ecal_sum", "ecal_angle", "discriminator", "generator", "compute_global_loss", "BitFlip", "Train_steps",
                     "distributed_train_step")
POWER = 0.85
LATENT = 256


# --------------------------------------------------------------------------- the worker side


def _events(n: int, seed: int = 3):
    """Preprocessed synthetic Monte Carlo for the paper's full grid (what both loops train on)."""
    from workloads.gan3d.data import preprocess
    from workloads.gan3d.presets import PAPER
    from workloads.gan3d.synthetic import generate_events

    batch = preprocess(generate_events(n, seed=seed), PAPER)
    return batch.x[..., None], batch.y, batch.ang, batch.ecal


def _time_blocks(step, steps: int, repeats: int, per_step: int) -> tuple[float, float]:
    import numpy as np

    step(0)  # warm-up: tracing, oneDNN primitive creation
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        rates.append(steps * per_step / (time.perf_counter() - start))
    return max(rates), float(np.median(rates))


def _burst(cfg: dict) -> dict:
    import numpy as np
    import tensorflow as tf

    from workloads.gan3d.presets import PAPER
    from workloads.gan3d.train import GAN3DTrainer

    b = cfg["batch"]
    x, y, ang, ecal = _events(b * 2)
    trainer = GAN3DTrainer(PAPER, b, seed=0, precision=cfg.get("precision", "float32"))
    batches = [{"x": tf.constant(x[i * b:(i + 1) * b, ..., 0]), "y": tf.constant(y[i * b:(i + 1) * b]),
                "ang": tf.constant(ang[i * b:(i + 1) * b]), "ecal": tf.constant(ecal[i * b:(i + 1) * b])} for i in range(2)]
    best, median = _time_blocks(lambda i: float(trainer._step(batches[i % 2])["g_loss"]), cfg["steps"], cfg["repeats"], b)
    g = cfg["gen_batch"]
    energies, thetas = np.full(g * cfg["gen_batches"], 150.0), np.full(g * cfg["gen_batches"], np.pi / 2)
    gen_best, gen_median = _time_blocks(lambda i: trainer.generate(energies, thetas, batch=g), 1, cfg["repeats"], len(energies))
    return {"train_best": best, "train_median": median, "gen_best": gen_best, "gen_median": gen_median}


def load_authors(path: str) -> dict:
    """The authors' networks and step, exec'd from their file (see the module docstring)."""
    source = Path(path).read_text()
    tree = ast.parse(source, filename=path)
    body = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "tensorflow.compat.v1.keras.layers":
            node.module = "tensorflow.keras.layers"  # removed in Keras 3; same layer
            body.append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            body.append(node)
        elif isinstance(node, ast.FunctionDef) and node.name in AUTHORS_FUNCTIONS:
            body.append(node)
    missing = set(AUTHORS_FUNCTIONS) - {n.name for n in body if isinstance(n, ast.FunctionDef)}
    if missing:
        raise SystemExit(f"{path}: not the authors' GPU_Version2.py (no {', '.join(sorted(missing))})")
    step_source = ast.get_source_segment(source, next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == "distributed_train_step"))
    namespace: dict = {"__name__": "authors_gpu_version2", "_takes_iterator": "next(dataset)" in (step_source or "")}
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), namespace)
    import tensorflow as tf

    published_loss = namespace["compute_global_loss"]

    def compute_global_loss(labels, predictions, global_batch_size, loss_weights=(3, 0.1, 25, 0.1)):
        # Keras 3's losses take tensors, not the nested Python lists Keras 2 accepted.
        tensors = [tf.reshape(tf.cast(tf.convert_to_tensor(label), tf.float32), tf.shape(p)) for label, p in zip(labels, predictions)]
        return published_loss(tensors, predictions, global_batch_size, loss_weights=list(loss_weights))

    namespace["compute_global_loss"] = compute_global_loss  # their step looks it up here at call time
    return namespace


def _authors(cfg: dict) -> dict:
    import contextlib
    import io

    import numpy as np
    import tensorflow as tf
    from tensorflow.keras.optimizers import RMSprop

    b = cfg["batch"]
    ns = load_authors(cfg["reference"])
    with contextlib.redirect_stdout(io.StringIO()):  # their builders print model summaries
        tf.random.set_seed(0)
        ns["discriminator"] = ns["discriminator"](POWER, dformat="channels_last")
        ns["generator"] = ns["generator"](LATENT, dformat="channels_last")
    ns.update(strategy=tf.distribute.get_strategy(), batch_size=b, batch_size_per_replica=b, latent_size=LATENT,
              loss_weights=[3, 0.1, 25, 0.1], optimizer_discriminator=RMSprop(0.001), optimizer_generator=RMSprop(0.001))
    x, y, ang, ecal = _events(b * 2)
    batches = [{"X": tf.constant(x[i * b:(i + 1) * b]), "Y": tf.constant(y[i * b:(i + 1) * b, None]),
                "ang": tf.constant(ang[i * b:(i + 1) * b, None]), "ecal": tf.constant(ecal[i * b:(i + 1) * b, None])} for i in range(2)]
    step = ns["distributed_train_step"]
    if ns.get("_takes_iterator"):  # later versions of the file take an iterator and call next() inside
        iterator = iter(tf.data.Dataset.from_tensor_slices({k: tf.stack([batches[0][k], batches[1][k]]) for k in batches[0]}).repeat())
        best, median = _time_blocks(lambda i: float(step(iterator)[0][0]), cfg["steps"], cfg["repeats"], b)
    else:
        best, median = _time_blocks(lambda i: float(step(batches[i % 2])[0][0]), cfg["steps"], cfg["repeats"], b)
    g = cfg["gen_batch"]
    n = g * cfg["gen_batches"]
    generator = ns["generator"]

    def generate(_):
        z = np.concatenate([np.full((n, 1), 1.5, np.float32), np.full((n, 1), np.pi / 2, np.float32),
                            np.random.normal(0, 1, (n, LATENT - 2)).astype(np.float32)], axis=1)
        images = generator.predict(z, batch_size=g, verbose=0)
        return np.power(np.maximum(images, 0.0), 1.0 / POWER)

    gen_best, gen_median = _time_blocks(generate, 1, cfg["repeats"], n)
    return {"train_best": best, "train_median": median, "gen_best": gen_best, "gen_median": gen_median}


def worker(cfg: dict) -> dict:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(cfg["intra"])
    tf.config.threading.set_inter_op_parallelism_threads(cfg["inter"])
    from workloads.common.cpu import machine_facts

    figures = _burst(cfg) if cfg["contender"] == "burst" else _authors(cfg)
    return {**figures, "machine": machine_facts()}


# --------------------------------------------------------------------------- the driver


def run_part(cfg: dict, onednn: str) -> dict:
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": onednn, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)], capture_output=True, text=True, env=env, timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1], "load_before": load}
    return {**json.loads(lines[-1]), "load_before": load}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", help="path of the authors' GPU_Version2.py in your own clone of ISC_HPC_3DGAN")
    p.add_argument("--batch", type=int, default=8, help="training events per step (one replica)")
    p.add_argument("--gen-batch", type=int, default=64, help="showers per generator call")
    p.add_argument("--gen-batches", type=int, default=4, help="generator calls per timed block")
    p.add_argument("--steps", type=int, default=3, help="training steps per timed block")
    p.add_argument("--repeats", type=int, default=3, help="timed blocks (best and median kept)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="intra-op threads (inter-op: 2)")
    p.add_argument("--onednn", choices=("both", "on", "off"), default="both")
    p.add_argument("--precisions", nargs="+", default=["float32", "mixed_bfloat16"], help="burst's step in each of these precisions")
    p.add_argument("--json", action="store_true")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return 0
    if a.reference and not Path(a.reference).is_file():
        p.error(f"--reference {a.reference}: no such file")
    from workloads.common.cpu import cpu_info

    info = cpu_info()
    contenders = [f"burst:{p}" for p in a.precisions] + (["authors"] if a.reference else [])
    settings = {"both": ["1", "0"], "on": ["1"], "off": ["0"]}[a.onednn]
    base = {"batch": a.batch, "gen_batch": a.gen_batch, "gen_batches": a.gen_batches, "steps": a.steps, "repeats": a.repeats,
            "intra": a.threads, "inter": 2, "reference": a.reference}
    results = {}
    for onednn in settings:
        for who in contenders:
            who_alone, _, precision = who.partition(":")
            results[f"{who}/onednn={onednn}"] = run_part({**base, "contender": who_alone, "precision": precision or "float32"}, onednn)
            print(f"{who} oneDNN {onednn}: {json.dumps(results[f'{who}/onednn={onednn}'])}", file=sys.stderr, flush=True)  # a long race keeps what it has
    report = {"machine": {"cpu_model": info["model"], "cores": info["cores"], "simd": info["simd"]}, "settings": base, "results": results}
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"machine: {info['model']}, {info['cores']} cores, SIMD {' '.join(info['simd'])}")
    print(f"paper preset, batch {a.batch} (one replica), generator batch {a.gen_batch}, intra-op {a.threads}, inter-op 2; "
          f"best (median) of {a.repeats} timed blocks")
    print(f"{'contender':20s} {'oneDNN':7s} {'load':>5s} {'train samples/s':>22s} {'showers/s':>20s}")
    for key, r in results.items():
        who, onednn = key.split("/onednn=")
        state = r.get("machine", {}).get("onednn_enabled")
        label = f"{'on' if onednn == '1' else 'off'}" + ("" if state is None or state == (onednn == "1") else "(!)")
        if "error" in r:
            print(f"{who:20s} {label:7s} {r['load_before']:5.2f} error: {r['error']}")
            continue
        print(f"{who:20s} {label:7s} {r['load_before']:5.2f} {r['train_best']:10.3f} ({r['train_median']:8.3f}) "
              f"{r['gen_best']:9.2f} ({r['gen_median']:7.2f})")
    for onednn in settings:
        state = "on" if onednn == "1" else "off"
        base_key = f"burst:{a.precisions[0]}/onednn={onednn}"
        for who in contenders[1:]:
            b, o = results[base_key], results[f"{who}/onednn={onednn}"]
            if "error" not in b and "error" not in o:
                print(f"{who} / burst:{a.precisions[0]}, oneDNN {state}: training {o['train_best'] / b['train_best']:.2f}x, "
                      f"generation {o['gen_best'] / b['gen_best']:.2f}x")
    if "authors" not in contenders:
        print("authors' loop not raced: pass --reference PATH to GPU_Version2.py from a clone of the ISC_HPC_3DGAN repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
