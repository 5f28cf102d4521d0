"""The accelerator names people use, mapped onto the catalog's.

``A100`` is what a user types for the 40 GB A100 (as SkyPilot reads it), ``v3`` (or ``tpu-v3``) any
v3 slice; names are matched without regard to case. One place, so that the plan, ``up`` and a site
policy read a name the same way, and an unknown one lists the known ones.
"""

from __future__ import annotations

import re
from typing import Iterable

from ..errors import BurstError

# what people write -> the catalog's name
ALIASES = {
    "a100": "A100-40GB",
    "a100-40g": "A100-40GB",
    "a100-80g": "A100-80GB",
    "h100-80gb": "H100",
    "h100-80g": "H100",
}
_TPU_FAMILY = re.compile(r"^(?:tpu-)?(v\d+[a-z]*(?:litepod)?)$", re.IGNORECASE)


def canonical(name: str) -> str:
    """The catalog's name for ``name`` (itself when it has no alias)."""
    return ALIASES.get(name.lower(), name)


def tpu_family(name: str) -> str | None:
    """``v3`` / ``tpu-v3`` -> ``tpu-v3``: a TPU generation, any slice of it; None for anything else."""
    m = _TPU_FAMILY.match(name)
    return f"tpu-{m.group(1).lower()}" if m else None


def matches(requested: str, offered: str) -> bool:
    """Whether the name a user asked for means the catalog's ``offered``."""
    want, have = canonical(requested).lower(), offered.lower()
    if want == have or f"tpu-{want}" == have:
        return True
    family = tpu_family(requested)
    return family is not None and have.startswith(f"{family}-") and have[len(family) + 1:].isdigit()


def check_known(requested: str, known: Iterable[str]) -> None:
    """One line naming the known accelerators when ``requested`` means none of them."""
    known = sorted(set(known))
    if not any(matches(requested, k) for k in known):
        aliases = ", ".join(f"{a.upper()} = {c}" for a, c in sorted(ALIASES.items()))
        raise BurstError(f"unknown accelerator {requested!r}; known: {', '.join(_compact(known))} (also: {aliases}; "
                         "v3 for any tpu-v3 slice)", exit_code=2)


def _compact(known: list[str]) -> list[str]:
    """GPU names as they are; a TPU generation once, with its slice sizes: tpu-v3-(8, 32, 64)."""
    sizes: dict[str, list[int]] = {}
    out = []
    for name in known:
        family, _, size = name.rpartition("-")
        if tpu_family(family) and size.isdigit():
            sizes.setdefault(family, []).append(int(size))
        else:
            out.append(name)
    return out + [f"{family}-({', '.join(map(str, sorted(s)))})" for family, s in sorted(sizes.items())]
