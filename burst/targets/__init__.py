"""Targets: one module per provider behind the same few functions (up, down, is_alive).

Only the local target is built into this version; the cloud providers are named here so that
they are recognised and answered with a clear message instead of "unknown provider".
"""

from __future__ import annotations

from ..errors import BurstError

PROVIDERS = ("local", "ray", "gcp", "gcp-tpu", "azure")
AVAILABLE = ("local",)


def check_provider(provider: str) -> str:
    if provider not in PROVIDERS:
        raise BurstError(f"unknown provider {provider!r}; choose one of: {', '.join(PROVIDERS)}")
    if provider not in AVAILABLE:
        raise BurstError(f"provider {provider!r} is not available in this version of burst yet; use --provider local")
    return provider
