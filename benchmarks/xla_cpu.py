"""XLA (``jit_compile``) against TensorFlow's plain graph for burst's 3DGAN step and generator, on this CPU.

    python benchmarks/xla_cpu.py [--presets small] [--batch 8] [--gen-batch 64] [--steps 10]

Each preset's training step (the whole distributed step, as the loop runs it) and its generator
are timed as one ``tf.function`` with and without ``jit_compile=True``, side by side in one
process, after untimed warm-up calls (XLA's compilation is not counted). Printed: ms a step,
samples/s, showers/s, the ratio, the first three steps' discriminator losses of each (from the
same seed: XLA's ``stateless_normal`` may pick another generator than the plain graph's, so the
draws, and the losses, can differ), and the CPU's flags and whether oneDNN is on. The paper preset
(``--presets paper``) takes more than a quarter of an hour under XLA on two cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cpu() -> str:
    flags = set()
    name = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and name == "unknown CPU":
            name = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
    simd = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{name}, {os.cpu_count()} cores, {' '.join(simd)}; oneDNN {'off' if os.environ.get('TF_ENABLE_ONEDNN_OPTS') == '0' else 'on'}"


def step_rates(preset: str, batch: int, steps: int, files) -> list[str]:
    import tensorflow as tf

    from workloads.gan3d import pipeline

    lines = []
    rates = {}
    for jit in (False, True):
        trainer, dataset_fn, _ = pipeline.prepare_training(files, preset, batch, steps_per_epoch=64, seed=1)
        batches = iter(trainer.strategy.distribute_datasets_from_function(lambda ctx: dataset_fn(ctx, 0)))
        step = tf.function(trainer._distributed_step, autograph=False, jit_compile=jit)
        losses = [float(step(next(batches))["d_loss"]) for _ in range(3)]  # the warm-up: compilation and first draws
        start = time.perf_counter()
        for _ in range(steps):
            out = step(next(batches))
        float(out["d_loss"])
        seconds = (time.perf_counter() - start) / steps
        rates[jit] = batch / seconds
        lines.append(f"  step, {'XLA  ' if jit else 'plain'}: {seconds * 1000:8.0f} ms, {batch / seconds:7.1f} samples/s; "
                     f"first losses {[round(x, 4) for x in losses]}")
    lines.append(f"  step: XLA is {rates[True] / rates[False]:.3f}x the plain graph")
    return lines


def generation_rates(preset: str, gen_batch: int, files) -> list[str]:
    import tensorflow as tf

    from workloads.gan3d import pipeline

    trainer, _, _ = pipeline.prepare_training(files, preset, 8, steps_per_epoch=8, seed=1)
    generator = trainer.generator
    z = tf.random.normal([gen_batch, generator.input_shape[-1]], seed=1)
    rates, lines = {}, []
    for jit in (False, True):
        generate = tf.function(lambda z: generator(z, training=False), jit_compile=jit)
        for _ in range(2):
            generate(z)
        start, reps = time.perf_counter(), 5
        for _ in range(reps):
            out = generate(z)
        float(tf.reduce_sum(out))
        rates[jit] = reps * gen_batch / (time.perf_counter() - start)
        lines.append(f"  generation, {'XLA  ' if jit else 'plain'}: {rates[jit]:8.1f} showers/s")
    lines.append(f"  generation: XLA is {rates[True] / rates[False]:.3f}x the plain graph")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=["small"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--gen-batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    from workloads.gan3d import synthetic

    files = synthetic.write_dataset(Path(tempfile.mkdtemp()), 512, seed=1, events_per_file=512)
    print(_cpu())
    for preset in a.presets:
        print(f"{preset} preset, batch {a.batch}, {a.steps} timed steps; generation of {a.gen_batch}")
        for line in step_rates(preset, a.batch, a.steps, files) + generation_rates(preset, a.gen_batch, files):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
