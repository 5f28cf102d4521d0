"""Keep burst's 3D convolutions channels-last on a GPU, in every precision.

burst's models are built channels-last (x, y, z, channels: NDHWC), the layout TensorFlow's CPU
kernels need. On a GPU, TensorFlow's graph optimiser (Grappler's generic layout optimiser) turns
every Conv3D of a float32 graph to channels-first (NCDHW), with a transpose on each side, and
keeps channels-last only when most convolutions compute in 16 bits on Volta or newer
(``tensorflow/core/grappler/optimizers/generic_layout_optimizer.cc``, ``kConvGPUFP16Threshold``).
``tests/workloads/gan3d/test_layout.py`` runs that optimiser on the real step for a virtual
Hopper GPU: with TensorFlow 2.21 the float32 (TF32) step comes out channels-first, the bfloat16
and float16 ones channels-last. Measured on an H200 with the step's PyTorch port
(``../shared/reference/gpu-h200.md``, ``benchmarks/gpu_precision_proxy.py``), channels-last is
the faster layout in every precision (TF32 98 against 80 samples/s at batch 64; bfloat16 181
against 116), because the convolutions have few channels. So the trainers switch that optimiser
off: the layout the plan's GPU speeds were measured in is the one that runs. On a CPU the
optimiser changes nothing by default, so switching it off there changes nothing.
"""

from __future__ import annotations


def keep_channels_last() -> None:
    """Tell TensorFlow not to transpose this process's graphs to channels-first (process-wide;
    before the first step is traced)."""
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"layout_optimizer": False})
