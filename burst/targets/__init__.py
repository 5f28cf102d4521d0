"""Targets: one module per provider behind the same functions (``up``, ``down``, ``is_alive``).

``local`` starts Ray on this machine, ``ray`` attaches to an existing on-prem Ray cluster, and
the cloud providers (``gcp``, ``gcp-tpu``, ``azure``) provision a cluster with a Pulumi stack.
"""

from __future__ import annotations

from contextlib import contextmanager
from importlib import import_module
from typing import Iterator

from ..errors import BurstError
from ..state import ClusterHandle

PROVIDERS = ("local", "ray", "gcp", "gcp-tpu", "azure")
CLOUD = ("gcp", "gcp-tpu", "azure")
KUBERAY = ("gcp", "azure")  # clouds whose Ray cluster is a KubeRay RayCluster (the TPU VM runs Ray itself)
_MODULES = {"local": "local", "ray": "ray", "gcp": "cloud", "gcp-tpu": "cloud", "azure": "cloud"}


def check_provider(provider: str) -> str:
    if provider not in PROVIDERS:
        raise BurstError(f"unknown provider {provider!r}; choose one of: {', '.join(PROVIDERS)}")
    return provider


def module(provider: str):
    """The target module of a provider (imported on demand: keeps the CLI start-up light)."""
    check_provider(provider)
    return import_module(f"{__name__}.{_MODULES[provider]}")


def is_alive(handle: ClusterHandle, timeout: float = 2.0) -> bool:
    return module(handle.provider).is_alive(handle, timeout=timeout)


def down(handle: ClusterHandle) -> None:
    module(handle.provider).down(handle)


@contextmanager
def connect(handle: ClusterHandle) -> Iterator[ClusterHandle]:
    """The handle with a dashboard URL reachable from here (cloud: through a tunnel burst owns)."""
    if handle.provider in CLOUD:
        with module(handle.provider).connect(handle) as reachable:
            yield reachable
    else:
        yield handle
