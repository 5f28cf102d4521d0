"""The numeric precision a run trains in: float32, or Keras mixed precision in bfloat16 or float16.

Mixed precision keeps every weight in float32 (the optimisers update float32 masters, and
checkpoints hold only float32, so a run may resume in another precision: a run moved from an
H100 to a CPU site goes on) and computes the layers in 16 bits. What hardware runs 16 bits fast:

* bfloat16: TPUs (the MXU's own format), NVIDIA GPUs from Ampere on (compute capability 8.0:
  A100, L4, H100);
* float16 with loss scaling: Volta and Turing GPUs (V100, T4: tensor cores, no bfloat16);
* neither: older GPUs, and CPUs. Without AVX512-BF16 or AMX TensorFlow emulates bfloat16 (about
  25 times slower than float32 on an AVX2 EPYC: ``benchmarks/race_reference.py``); with them it
  runs natively but the 3DGAN's small 3D convolutions were measured no faster (paper preset, batch
  4: x1.02) or slower (small preset, batch 32: x0.51) on an idle 16-CPU AMX Xeon, TensorFlow 2.21.

``auto`` picks from the hardware the worker sees: float32 on every CPU (`--precision
mixed_bfloat16` still runs bfloat16 there when asked). Light to import: TensorFlow and Keras only
inside the functions that need them.
"""

from __future__ import annotations

import contextlib

FLOAT32 = "float32"
BFLOAT16 = "mixed_bfloat16"
FLOAT16 = "mixed_float16"
PRECISIONS: tuple[str, ...] = (FLOAT32, BFLOAT16, FLOAT16)
AUTO = "auto"
CHOICES: tuple[str, ...] = (AUTO, *PRECISIONS)

#: CPU flags (``/proc/cpuinfo``) under which oneDNN runs bfloat16 in hardware
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def check(name: str) -> str:
    """``name`` when it is a precision burst knows (or ``auto``); ValueError in one line otherwise."""
    if name not in CHOICES:
        raise ValueError(f"unknown precision {name!r}; choose one of: {', '.join(CHOICES)}")
    return name


def cpu_bf16_hardware(flags) -> list[str]:
    """The flags among ``flags`` under which oneDNN runs bfloat16 natively (empty: emulated)."""
    return [f for f in CPU_BF16_FLAGS if f in set(flags)]


def for_cpu(flags) -> tuple[str, str]:
    """(precision, why) for a CPU with these ``/proc/cpuinfo`` flags: float32, whatever they are
    (bfloat16 measured no faster than float32 for this model even with AMX; see the module's text)."""
    have = cpu_bf16_hardware(flags)
    if have:
        return FLOAT32, (f"a CPU (it has {' and '.join(have)}, but bfloat16 measured no faster than float32 for these "
                         f"small 3D convolutions on an AMX Xeon)")
    return FLOAT32, "the CPU has no AVX512-BF16 or AMX (bfloat16 would be emulated, slower than float32)"


def for_gpu(compute_capability: tuple[int, int], name: str = "GPU") -> tuple[str, str]:
    """(precision, why) for an NVIDIA GPU of this compute capability."""
    major, minor = compute_capability
    if (major, minor) >= (8, 0):
        return BFLOAT16, f"{name} (compute capability {major}.{minor}) runs bfloat16 on its tensor cores"
    if (major, minor) >= (7, 0):
        return FLOAT16, f"{name} (compute capability {major}.{minor}) has float16 tensor cores and no bfloat16"
    return FLOAT32, f"{name} (compute capability {major}.{minor}) has no tensor cores"


def cpu_flags() -> list[str]:
    """This CPU's SIMD flags as ``cpu.cpu_info`` reads them (the bfloat16 ones among them)."""
    from .cpu import cpu_info

    return cpu_info()["simd"]


def resolve(asked: str, strategy=None) -> tuple[str, str]:
    """(precision, why): ``asked`` unless it is ``auto``, else what this worker's hardware runs fast."""
    check(asked)
    if asked != AUTO:
        return asked, "asked for"
    import tensorflow as tf

    if strategy is not None and isinstance(strategy, tf.distribute.TPUStrategy):
        return BFLOAT16, "TPU: bfloat16 is the MXU's format"
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        capability = details.get("compute_capability")
        if capability:
            return for_gpu(tuple(capability), details.get("device_name", "GPU"))
        return FLOAT32, "a GPU whose compute capability TensorFlow does not report"
    return for_cpu(cpu_flags())


@contextlib.contextmanager
def building(precision: str):
    """Layers made inside compute in ``precision`` (variables stay float32); the global policy is
    restored after, so one process may build models of several precisions. A layer that must stay
    float32 says so with ``dtype=FLOAT32``."""
    import keras

    check(precision)
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


def optimizer(inner, precision: str):
    """The optimiser a trainer steps: ``inner`` itself, or wrapped in dynamic loss scaling for
    float16 (whose range ends at 65,504 and whose small gradients would flush to zero)."""
    if precision != FLOAT16:
        return inner
    import keras

    return keras.optimizers.LossScaleOptimizer(inner)


def saved_optimizer(opt):
    """What a checkpoint keeps of an optimiser: the inner one (the loss scale re-grows in a few
    hundred steps), so checkpoints of every precision have the same variables."""
    return getattr(opt, "inner_optimizer", opt)


def scaled(opt, loss):
    """The loss to differentiate: scaled up for a loss-scaling optimiser (``apply_gradients``
    scales the gradients back down and skips a step whose gradients overflowed)."""
    return opt.scale_loss(loss) if hasattr(opt, "inner_optimizer") else loss
