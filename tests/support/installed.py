"""A package installed as pip installs one, as far as Python's own discovery goes: a ``.dist-info``
directory with its ``METADATA`` and ``entry_points.txt`` on ``sys.path`` (what
``importlib.metadata.entry_points`` reads; packaging.python.org, "Entry points specification")."""

from __future__ import annotations

from pathlib import Path


def with_entry_points(site: Path, dist: str, points: dict[str, str], group: str = "burst.workloads") -> Path:
    """``site``/``dist``-0.1.dist-info naming ``points`` (name -> "module:object") in ``group``; ``site`` returned."""
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    return site
