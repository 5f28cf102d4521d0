"""The CPU the workload runs on: model, SIMD extensions, thread counts, and oneDNN's state.

Figures are only comparable between machines with the same SIMD width and oneDNN setting, so
every benchmark and every run records these facts next to its numbers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ONEDNN_VAR = "TF_ENABLE_ONEDNN_OPTS"
# The SIMD extensions that decide which kernels TensorFlow and oneDNN can use.
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def enable_onednn(env: dict | None = None) -> str:
    """Set ``TF_ENABLE_ONEDNN_OPTS=1`` in ``env`` (default: this process) unless already set;
    return the value in force. Has no effect on a TensorFlow that is already imported."""
    target = os.environ if env is None else env
    return target.setdefault(ONEDNN_VAR, "1")


def cpu_info() -> dict:
    """Cores, model, max frequency, SIMD extensions (and whether AVX-512 and FMA are there)."""
    info = {"cores": os.cpu_count() or 1, "model": "unknown", "ghz": None, "simd": [], "avx512": False, "fma": False}
    try:
        text = Path("/proc/cpuinfo").read_text()
        for line in text.splitlines():
            if line.startswith("model name") and info["model"] == "unknown":
                info["model"] = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not info["simd"]:
                flags = set(line.split(":", 1)[1].split())
                info["simd"] = [f for f in SIMD_FLAGS if f in flags]
                info["avx512"] = "avx512f" in flags
                info["fma"] = "fma" in flags
            if line.startswith("cpu MHz") and info["ghz"] is None:
                info["ghz"] = float(line.split(":", 1)[1]) / 1000
    except OSError:
        pass
    try:
        info["ghz"] = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) / 1e6
    except (OSError, ValueError):
        pass
    return info


def onednn_enabled() -> bool | None:
    """Whether the TensorFlow of this process runs oneDNN kernels (asked from TensorFlow itself);
    None when TensorFlow is not imported yet (asking would import it)."""
    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    return bool(_pywrap_util_port.IsMklEnabled())


def machine_facts() -> dict:
    """What a figure measured in this process depends on: CPU, SIMD, threads, oneDNN."""
    info = cpu_info()
    facts = {"cpu_model": info["model"], "cores": info["cores"], "simd": info["simd"], "avx512": info["avx512"],
             "onednn_requested": os.environ.get(ONEDNN_VAR), "onednn_enabled": onednn_enabled(),
             # set to emulate an older CPU (e.g. AVX2 on an AVX-512 machine): oneDNN's kernels stop at that ISA
             "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
             "python": sys.executable}  # which installation ran (a site bundle's venv, a container's)
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        facts["intra_op_threads"] = tf.config.threading.get_intra_op_parallelism_threads()
        facts["inter_op_threads"] = tf.config.threading.get_inter_op_parallelism_threads()
    return facts


def configure_threads(intra: int | None = None, inter: int | None = None) -> None:
    """Pin TensorFlow's thread pools (must run before TensorFlow executes any op)."""
    import tensorflow as tf

    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(inter)
