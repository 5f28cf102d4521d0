"""CERN's 3DGAN calorimeter-shower workload.

Importing this package turns TensorFlow's oneDNN kernels on (``TF_ENABLE_ONEDNN_OPTS=1``) unless
the user has set the variable, because stock TensorFlow enables them only on CPUs with AVX-512
and newer extensions: on AVX2-only CPUs (many AMD EPYC and older Intel nodes) training is about
6x slower without them. The variable is read when TensorFlow is first imported, so every entry
point of the workload imports this package before TensorFlow; an explicit ``0`` is respected.
"""

from ..common.cpu import enable_onednn

enable_onednn()
