"""Where a 3DGAN training step's time goes on this CPU: FLOP/s per convolution against sgemm.

    python benchmarks/layer_rates.py [--preset paper] [--batch 8] [--threads N] [--repeats 5]

For every convolution of the generator and the discriminator it times, on inputs of the shape the
layer sees in training, the forward pass and the forward pass with both gradients (input and
kernel; ≈ 3× the forward FLOPs), best of ``--repeats`` after a warm-up, and prints the FLOP/s each
reaches next to the rate of a 2048² float32 matrix product measured in the same process (what the
machine's BLAS reaches on the ideal shape). It then times a whole training step and sets it against the sum of its
convolution parts, so the table says how much of the step is convolution and how far each
convolution is from the machine's matrix rate. A step runs G forward once for the fakes and
forward + gradients in each of the two G updates, and D forward + gradients four times (two D
updates; the two G updates back-propagate through D, input gradient only, counted whole).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workloads.common.cpu import cpu_info, onednn_enabled  # noqa: E402  (the workload turns oneDNN on)


def _best(fn, repeats: int) -> float:
    fn()  # warm-up: trace and first oneDNN primitive creation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _sgemm_gflops(repeats: int) -> float:
    import tensorflow as tf

    a, b = tf.random.normal([2048, 2048]), tf.random.normal([2048, 2048])
    matmul = tf.function(lambda: tf.linalg.matmul(a, b))
    return 2 * 2048**3 / _best(lambda: matmul().numpy(), repeats) / 1e9


def _layer_parts(layer, batch: int, repeats: int) -> dict[str, float]:
    """Seconds for the forward pass, and for forward + input gradient + kernel gradient, of one
    layer at this batch (the gradients are timed with their forward: TensorFlow may fuse them)."""
    import tensorflow as tf

    x = tf.random.normal([batch, *layer.input.shape[1:]])

    @tf.function
    def forward():
        return layer(x)

    @tf.function
    def forward_backward():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
        return tape.gradient(y, [x, layer.kernel], output_gradients=tf.ones_like(y))

    return {"forward": _best(lambda: forward().numpy(), repeats),
            "train": _best(lambda: [g.numpy() for g in forward_backward()], repeats)}


def _step_seconds(preset, batch: int, repeats: int) -> float:
    import tensorflow as tf

    from workloads.gan3d.data import preprocess
    from workloads.gan3d.synthetic import generate_events
    from workloads.gan3d.train import GAN3DTrainer

    trainer = GAN3DTrainer(preset, batch)
    b = preprocess(generate_events(batch, seed=5), preset)
    data = {"x": tf.constant(b.x[..., None]), "y": tf.constant(b.y), "ang": tf.constant(b.ang), "ecal": tf.constant(b.ecal)}
    return _best(lambda: [float(v) for v in trainer._step(data).values()], repeats)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="paper")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: all cores)")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    from workloads.gan3d.model import UpsampledConv3D, build_discriminator, build_generator, flops_per_sample
    from workloads.gan3d.presets import get_preset

    info = cpu_info()
    tf.config.threading.set_intra_op_parallelism_threads(a.threads or info["cores"])
    tf.config.threading.set_inter_op_parallelism_threads(2)
    preset = get_preset(a.preset)
    print(f"machine: {info['model']}, {info['cores']} cores, SIMD {' '.join(info['simd'])}; oneDNN "
          f"{'on' if onednn_enabled() else 'off'}; ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', 'unset')}; load {os.getloadavg()[0]:.2f}")
    sgemm = _sgemm_gflops(a.repeats)
    print(f"sgemm 2048x2048: {sgemm:.1f} GFLOP/s")
    print(f"{a.preset} preset, batch {a.batch}; GFLOP/s per part, and as % of sgemm")
    print(f"{'layer':9} {'ch in>out':>10} {'kernel':>8} {'GFLOP':>6}  {'forward':>14}  {'forward+gradients':>17}")
    totals = {"G": {"forward": 0.0, "train": 0.0}, "D": {"forward": 0.0, "train": 0.0}}
    for net, model in (("G", build_generator(preset)), ("D", build_discriminator(preset))):
        for layer in model.layers:
            if not isinstance(layer, (keras.layers.Conv3D, UpsampledConv3D)):
                continue
            probe = keras.Model(layer.input, layer.output)
            gflop = flops_per_sample(probe) * a.batch / 1e9
            parts = _layer_parts(layer, a.batch, a.repeats)
            for part, seconds in parts.items():
                totals[net][part] += seconds
            fwd, train = gflop / parts["forward"], 3 * gflop / parts["train"]
            print(f"{net} {layer.name:7} {layer.input.shape[-1]:>4} > {layer.kernel.shape[-1]:<3} {'x'.join(map(str, layer.kernel_size)):>8} "
                  f"{gflop:6.2f}  {fwd:6.1f} ({100 * fwd / sgemm:3.0f}%)  {train:9.1f} ({100 * train / sgemm:3.0f}%)")
    g, d = totals["G"], totals["D"]
    # G: forward for the fakes, forward + gradients in each of the two G updates. D: forward +
    # gradients in both D updates and in both G updates (input gradient only there, counted whole).
    conv_in_step = g["forward"] + 2 * g["train"] + 4 * d["train"]
    step = _step_seconds(preset, a.batch, a.repeats)
    print(f"training step: {step:.3f} s ({a.batch / step:.2f} samples/s); its convolutions timed alone: {conv_in_step:.3f} s "
          f"({100 * conv_in_step / step:.0f}% of the step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
