"""Which parts of the 3DGAN must stay float32 under mixed bfloat16: measured on Monte Carlo showers.

    python benchmarks/precision_islands.py [--events 2000] [--seed 0] [--preset small]

The model keeps float32 "islands" where the physics is summed (``workloads/gan3d/model.py``): the
generator's image (its last convolution and ReLU, on which the power transform is undone), the
ECAL-sum and angle heads, the discriminator's two dense outputs. This script measures, without
training, what each island would cost if it computed in bfloat16, on synthetic Monte Carlo showers
in the preset's image space (``x ** power``), as TensorFlow computes it on this CPU:

- **the image**: each cell of the power-transformed shower rounded to bfloat16 (what a bfloat16
  output layer emits at best; its own accumulation error comes on top), the power transform undone,
  then every validation metric of the rounded showers against the exact ones, beside the
  MC-vs-MC noise floor (two condition-paired halves of the same showers). A precision error far
  below the floor cannot be seen by the validation.
- **the ECAL-sum head**: ``EcalSum`` built under ``mixed_bfloat16`` against float32, its relative
  error per shower, beside the MC-vs-MC sampling-fraction floor and the ``ecal_mape`` loss term
  that the head feeds (a percentage of the sum).
- **the angle head**: ``EcalAngle`` the same way, its error in radians beside the MC-vs-MC floor of
  the measured angle's relative error.

Printed: the CPU's flags and, per island, the error in bfloat16 and the floor it is judged against.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="small")
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    from workloads.common.cpu import cpu_info
    from workloads.gan3d.model import EcalAngle, EcalSum
    from workloads.gan3d.presets import PRESETS
    from workloads.gan3d.synthetic import generate_events
    from workloads.gan3d.validate import compare, matched_halves

    power = PRESETS[args.preset].power
    info = cpu_info()
    print(f"CPU: {info.get('model')}; SIMD {' '.join(info.get('simd', []))}; TensorFlow {tf.__version__}; "
          f"{args.events} synthetic showers (seed {args.seed}), preset {args.preset} (image = stored ** {power:g})", flush=True)
    started = time.perf_counter()
    events = generate_events(args.events, seed=args.seed)
    stored, energy, theta = events["ECAL"], events["energy"].astype(np.float64), events["theta"].astype(np.float64)
    print(f"generated in {time.perf_counter() - started:.0f} s", flush=True)

    # --- the image island: cells rounded to bfloat16 in image space, then back to stored units
    image = np.power(stored.astype(np.float32), power)
    rounded = tf.cast(tf.cast(image, tf.bfloat16), tf.float32).numpy()
    stored_bf16 = np.power(rounded, 1.0 / power)
    cell = np.abs(stored_bf16 - stored)[stored > 0] / stored[stored > 0]
    print(f"\nimage in bfloat16: cell energies off by {cell.mean():.2%} on average (at most {cell.max():.2%})")
    exact = compare(stored, stored_bf16, energy, theta)["summary"]
    a, b = matched_halves(energy, theta)
    floor = compare(stored[a], stored[b], energy[a], theta[a], gan_energy_gev=energy[b])["summary"]
    print(f"{'metric':24s} {'bf16 image vs exact':>20s} {'MC-vs-MC floor':>15s} {'of the floor':>13s}")
    for key, value in exact.items():
        if key in ("events", "sf_mc", "sf_gan") or not isinstance(value, float):
            continue
        # a worst factor is 1 when the two agree: its error is how far above 1 it is
        off, floor_off = (value - 1, floor[key] - 1) if key == "transverse_worst_factor" else (value, floor[key])
        ratio = off / floor_off if floor_off else float("nan")
        print(f"{key:24s} {value:20.4g} {floor[key]:15.4g} {ratio:13.3f}")

    # --- the heads, as the layers compute under each policy
    batch = tf.constant(image[..., None])
    for name, layer_type in (("ECAL sum", EcalSum), ("angle", EcalAngle)):
        f32 = layer_type(power, dtype="float32")(batch).numpy()[:, 0].astype(np.float64)
        b16 = tf.cast(layer_type(power, dtype=keras.DTypePolicy("mixed_bfloat16"))(batch), tf.float32).numpy()[:, 0].astype(np.float64)
        if name == "ECAL sum":
            rel = np.abs(b16 - f32) / np.abs(f32)
            print(f"\n{name} head in bfloat16: off by {rel.mean():.3%} per shower on average, at most {rel.max():.3%} "
                  f"(the ecal_mape loss term is this error x 100; MC-vs-MC sampling-fraction floor {floor['sf_rel_error']:.3%})")
        else:
            err = np.abs(b16 - f32)
            rel = err / np.abs(f32)
            print(f"{name} head in bfloat16: off by {err.mean() * 1e3:.2f} mrad per shower on average, at most {err.max() * 1e3:.2f} mrad "
                  f"({rel.mean():.3%} relative; MC-vs-MC floor of the angle's relative error {floor['angle_rel_error']:.3%})")


if __name__ == "__main__":
    main()
