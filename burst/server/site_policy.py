"""The site's policy on a burst server: what only its admins say, and what a member's policy may
still choose.

The on-prem site (its scheduler, addresses, token files, containers, storage), the prices of every
target that is not a public cloud's catalog row, named stores and the other site facts are the
admins' word: ``burst server admin policy FILE`` writes them to the server's data directory, and
every verb a member runs through the server is planned under that policy. A member's own policy
can only choose among what it allows and narrow it (objective, deadline, a lower budget, a subset
of providers, regions and accelerators, a preemptible preference, ...); any other field is refused
in one line that names it, before anything is planned. With no site policy written, the site's
policy is burst's packaged default. ``local`` (this machine: through a server, the server's own)
is a member's target only where the admins list it in the site's providers.
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import yaml

from ..errors import BurstError
from ..placement import policy as policy_mod

SITE_POLICY = "site-policy.yaml"  # under the server's data directory; only `burst server admin policy` writes it
MAX_POLICY_BYTES = 256 * 1024  # a member's policy is a few hundred bytes; more is not a policy

#: what a member's policy may say through a server: choices and narrowings, never a site fact or a price
CHOICES = ("objective", "deadline", "max_slowdown", "tolerance", "epochs", "burst_when", "checkpoint_every_steps", "precision")
LOWER = ("budget_usd", "max_kgco2e", "max_gpus")  # at most the site's
SUBSETS = ("providers", "regions", "accelerators")  # within the site's
MEMBER_DATA = ("location", "size_gb")  # where the member's data is (not what moving it costs: the site's uplink and egress)
MEMBER_RECOVERY = ("strategy", "max_restarts", "allow_providers", "fallback_on_demand_after", "loss_grace_seconds", "blind_grace_minutes")
ALLOWED = CHOICES + LOWER + SUBSETS + ("preemptible", "data", "recovery")


def path(data_dir: Path) -> Path:
    return data_dir / SITE_POLICY


def site_document(data_dir: Path) -> dict:
    """The site's policy as its admins wrote it (checked when written), else the packaged default
    without this machine (the server's, through a server: see ``_site_providers``)."""
    written = path(data_dir)
    if written.is_file():
        return yaml.safe_load(written.read_text()) or {}
    default = yaml.safe_load(policy_mod.DEFAULT_POLICY.read_text()) or {}
    return {**default, "providers": [p for p in default.get("providers") or [] if p != ON_THE_SERVER]}


def write(data_dir: Path, source: Path) -> policy_mod.Policy:
    """Check ``source`` as a policy and make it the site's (replacing the file whole: a member's
    verb never reads half of one)."""
    checked = policy_mod.load(source)
    text = source.read_text()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(dir=data_dir, prefix=".site-policy-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(temporary, path(data_dir))
    return checked


def read_member_policy(given: str, uploads: Path) -> str:
    """The text of the policy a member sent, read only once it is known to be one of the files they
    sent (resolved, symlinks too) and no larger than a policy is."""
    file = Path(given)
    try:
        resolved = file.resolve(strict=True)
    except (OSError, RuntimeError):
        raise BurstError(f"--policy {given}: through a burst server, --policy takes a file sent with the command") from None
    if uploads.resolve() not in resolved.parents or not resolved.is_file():
        raise BurstError(f"--policy {given}: through a burst server, --policy takes a file sent with the command; "
                         "the server's own files are not yours to read")
    if resolved.stat().st_size > MAX_POLICY_BYTES:
        raise BurstError(f"--policy: {resolved.stat().st_size:,} bytes is not a policy (at most {MAX_POLICY_BYTES // 1024} KiB)")
    return resolved.read_text(errors="replace")


def narrowed(site: dict, member_text: Optional[str]) -> dict:
    """The site's policy narrowed by a member's (None: theirs is the site's); a field the member may
    not set, or a value wider than the site's, is refused in one line naming it."""
    out = {**site, "providers": _site_providers(site)}
    if member_text is None:
        return out
    policy_mod.parse(member_text, "your policy")  # its own mistakes first, with its own line numbers
    member = yaml.safe_load(member_text)
    for key, value in member.items():
        if key not in ALLOWED:
            raise BurstError(f"policy field {key}: through a burst server the site, its prices and its stores are the admins' word "
                             f"(`burst server admin policy`); leave {key} out (yours may set: {', '.join(ALLOWED)})")
        if key in CHOICES:
            out[key] = value
        elif key in LOWER:
            out[key] = _lower(key, value, site.get(key), policy_mod.Policy.model_fields[key].default)
        elif key in SUBSETS:
            out[key] = _subset(key, value, site)
        elif key == "preemptible":
            out[key] = _spot(value, site.get("preemptible", "prefer"))
        else:
            out[key] = _section(key, value, site.get(key) or {}, MEMBER_DATA if key == "data" else MEMBER_RECOVERY)
    recovery = out.get("recovery") or {}
    if recovery.get("allow_providers"):
        _within("recovery.allow_providers", recovery["allow_providers"], _site_providers(site))
    return out


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BurstError(f"policy field {key}: {value!r} is not a number")
    return value


def _lower(key: str, value: Any, site: Any, default: Any) -> Any:
    value, ceiling = _number(key, value), site if site is not None else default
    if ceiling is not None and value > ceiling:
        raise BurstError(f"policy field {key}: {value:g} is over the site's {ceiling:g}; through a burst server a policy only narrows")
    return value


ON_THE_SERVER = "local"  # the target that runs a member's work on the server's own machine


def _site_providers(site: dict) -> list[str]:
    """The site's providers: those its policy lists; where it lists none, every one but this
    machine's, which through a server is the server's machine and is a member's only when the
    admins list it."""
    listed = site.get("providers")
    return list(listed) if listed else [p for p in policy_mod.Policy().providers if p != ON_THE_SERVER]


def _within(key: str, values: list, allowed: list) -> None:
    wider = [v for v in values if not any(fnmatch.fnmatchcase(str(v), str(a)) for a in allowed)]
    if wider:
        raise BurstError(f"policy field {key}: {', '.join(map(str, wider))} not allowed by the site's policy "
                         f"({', '.join(map(str, allowed))}); through a burst server a policy only narrows")


def _subset(key: str, value: Any, site: dict) -> Any:
    if not isinstance(value, list):
        raise BurstError(f"policy field {key}: give a list")
    if key == "providers":
        _within(key, value, _site_providers(site))
    elif key == "regions":
        _within(key, value, site.get("regions") or ["*"])
    elif site.get("accelerators") is not None:
        _within(key, value, site["accelerators"])
    return value


def _spot(value: Any, site: str) -> Any:
    if site != "prefer" and value != site:
        raise BurstError(f"policy field preemptible: the site's policy says {site}; through a burst server a policy only narrows")
    return value


def _section(key: str, value: Any, site: dict, allowed: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise BurstError(f"policy field {key}: give a mapping")
    other = [k for k in value if k not in allowed]
    if other:
        raise BurstError(f"policy field {key}.{other[0]}: through a burst server that is the admins' word (`burst server admin policy`); "
                         f"leave it out (yours may set {key}.{', '.join(allowed)})")
    return {**site, **value}
