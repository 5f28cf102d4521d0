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
import functools

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
    float16 (whose range ends at 65,504 and whose small gradients would flush to zero) that skips
    a step on every replica or on none (``agreed_loss_scale_optimizer``)."""
    if precision != FLOAT16:
        return inner
    return agreed_loss_scale_optimizer()(inner)


@functools.cache
def agreed_loss_scale_optimizer():
    """Keras' ``LossScaleOptimizer`` whose "are the gradients finite?" is one answer for all replicas.

    Keras 3 asks each replica about its own gradients before they are summed (its
    ``check_finite`` runs in replica context; the sum happens later, inside the inner optimiser's
    apply). Under ``MultiWorkerMirroredStrategy`` every worker then branches on its own answer: a
    worker whose float16 gradients overflowed skips the update while its peers enter the update's
    all-reduce and wait for it forever. Under ``MirroredStrategy`` the first replica's answer is
    taken for all, and another replica's infinite gradients are summed into the weights. Here the
    replicas' "not finite" votes are summed (one scalar all-reduce, in replica context) before
    anyone branches, so every replica skips the same updates and halves its scale to the same
    value; a skip is said in the worker's log.
    """
    import keras
    import tensorflow as tf

    class AgreedLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
        def check_finite(self, grads):
            finite = super().check_finite(grads)  # this replica's own gradients
            ctx = tf.distribute.get_replica_context()
            if ctx is None or ctx.num_replicas_in_sync == 1:
                agreed = finite
            else:
                votes = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(tf.logical_not(finite), tf.float32))
                agreed = tf.equal(votes, 0.0)
            scale = tf.identity(self.dynamic_scale)
            said = tf.cond(agreed, lambda: tf.constant(True), lambda: _say_skipped(finite, scale, self.iterations))
            with tf.control_dependencies([said]):
                return tf.identity(agreed)

    return AgreedLossScaleOptimizer


def _say_skipped(own_finite, scale, applied):
    """The worker's log line for an update skipped on every replica (this replica's own verdict
    beside the agreed one); True so that ``tf.cond`` has a value."""
    import tensorflow as tf

    ctx = tf.distribute.get_replica_context()
    replica = ctx.replica_id_in_sync_group if ctx is not None else 0
    replicas = ctx.num_replicas_in_sync if ctx is not None else 1
    printed = tf.print("burst: float16 gradients not finite on some replica: update skipped on every replica after", applied,
                       "applied; replica", replica, "of", replicas, "own gradients finite:", own_finite,
                       "; loss scale", scale, "->", scale * 0.5)
    with tf.control_dependencies([printed]):
        return tf.constant(True)


def saved_optimizer(opt):
    """What a checkpoint keeps of an optimiser: the inner one (the loss scale re-grows in a few
    hundred steps), so checkpoints of every precision have the same variables."""
    return getattr(opt, "inner_optimizer", opt)


#: A test hook, read where a step is traced: "REPLICA:STEP" makes the loss of that replica (its
#: index in sync) infinite at that global step, as a float16 overflow on one replica alone would.
OVERFLOW_AT = "BURST_TEST_OVERFLOW_AT"


def scaled(opt, loss, step=None):
    """The loss to differentiate: scaled up for a loss-scaling optimiser (``apply_gradients``
    scales the gradients back down and skips a step whose gradients overflowed on any replica)."""
    if not hasattr(opt, "inner_optimizer"):
        return loss
    return opt.scale_loss(_injected_overflow(loss, step))


def _injected_overflow(loss, step):
    """``loss``, or infinity where ``OVERFLOW_AT`` names this replica and ``step`` (a test's doing)."""
    import os

    where = os.environ.get(OVERFLOW_AT)
    if not where or step is None:
        return loss
    import tensorflow as tf

    replica, at = (int(part) for part in where.split(":"))
    ctx = tf.distribute.get_replica_context()
    here = tf.equal(ctx.replica_id_in_sync_group if ctx is not None else 0, replica)
    hit = tf.logical_and(here, tf.equal(tf.cast(step, tf.int64), at))
    return loss * tf.where(hit, tf.constant(float("inf"), loss.dtype), tf.constant(1.0, loss.dtype))
