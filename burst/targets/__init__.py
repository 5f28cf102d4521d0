"""Targets: where a cluster runs. One module per kind of target, one class per provider, one
interface (``base.Target``) and this registry, the only list of provider names in burst.

Code outside this package asks a target what it can do (``kind``, ``supports_spot``,
``provisions``, ...) and never compares provider names. Target modules are imported on first use,
so naming providers here costs the CLI's start-up nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from ..errors import BurstError

if TYPE_CHECKING:
    from .base import Target

# provider name -> "module:class" (the module is imported when the target is first asked for)
_REGISTRY = {
    "local": "local:LocalTarget",
    "ray": "onprem_ray:OnPremRayTarget",
    "slurm": "slurm:SlurmTarget",
    "gcp": "kuberay:GkeTarget",
    "gcp-tpu": "tpu_vm:TpuVmTarget",
    "azure": "kuberay:AksTarget",
    "kubernetes": "kubernetes:KubernetesTarget",
}
PROVIDERS: tuple[str, ...] = tuple(_REGISTRY)
_instances: dict[str, "Target"] = {}


def check_provider(provider: str) -> str:
    if provider not in _REGISTRY:
        raise BurstError(f"unknown provider {provider!r}; choose one of: {', '.join(PROVIDERS)}")
    return provider


def get(provider: str) -> "Target":
    """The target of ``provider`` (one instance per process)."""
    check_provider(provider)
    if provider not in _instances:
        module_name, class_name = _REGISTRY[provider].split(":")
        _instances[provider] = getattr(import_module(f"{__name__}.{module_name}"), class_name)()
    return _instances[provider]


def all_targets() -> list["Target"]:
    return [get(p) for p in PROVIDERS]


def names_where(capability: str) -> tuple[str, ...]:
    """Providers whose target has ``capability`` (a class attribute that is true), e.g. ``supports_spot``."""
    return tuple(t.provider for t in all_targets() if getattr(t, capability))


def names_of_kind(kind: str) -> tuple[str, ...]:
    """Providers of one kind: ``local``, ``onprem`` or ``cloud`` (the catalog prices the clouds)."""
    return tuple(t.provider for t in all_targets() if t.kind == kind)


def store_provider(uri: str) -> "str | None":
    """The provider whose cloud a bucket URI is in (None: a directory, a site claim)."""
    scheme = str(uri).split("://", 1)[0] if "://" in str(uri) else ""
    return next((t.provider for t in all_targets() if scheme in t.store_schemes), None)


def vendors() -> tuple[str, ...]:
    """The clouds burst's targets run in (where a dataset can live, besides on-prem)."""
    return tuple(sorted({t.vendor for t in all_targets() if t.vendor}))
