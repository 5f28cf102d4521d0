"""Workloads: what a run trains. One package per workload under ``workloads/``, one interface
(``base.Workload``) and this registry, the only place in burst that names a workload.

Code outside this package asks a workload for what it has (presets, knobs, metrics, its data
pipeline and trainer, its placement profile) and never compares names or imports a workload's
modules, so adding a workload touches this table and nothing else in burst. A workload's object
is imported on first use and imports nothing heavy itself (TensorFlow only inside the methods
that train or validate), so naming workloads here costs the CLI's start-up nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from ..errors import BurstError

if TYPE_CHECKING:
    from .base import Workload

# workload name -> "module:object" (the module is imported when the workload is first asked for)
_REGISTRY = {
    "gan3d": "workloads.gan3d.workload:WORKLOAD",
    "calo": "workloads.calo.workload:WORKLOAD",
}
NAMES: tuple[str, ...] = tuple(_REGISTRY)
DEFAULT: str = NAMES[0]  # what `burst run` trains when no workload is named
_instances: dict[str, "Workload"] = {}


def check(name: str) -> str:
    if name not in _REGISTRY:
        raise BurstError(f"unknown workload {name!r}; choose one of: {', '.join(NAMES)}")
    return name


def get(name: str) -> "Workload":
    """The workload called ``name`` (one instance per process)."""
    check(name)
    if name not in _instances:
        module_name, attr = _REGISTRY[name].split(":")
        _instances[name] = getattr(import_module(module_name), attr)
    return _instances[name]


def all_workloads() -> list["Workload"]:
    return [get(n) for n in NAMES]
