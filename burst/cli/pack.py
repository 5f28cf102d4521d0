"""``burst pack``: a bundle that installs burst where there is no network (see ``burst/pack.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .render import console, emit_json


def pack(
    out: Annotated[Path, typer.Option("--out", help="directory to create the bundle in (new or empty)")],
    python: Annotated[Optional[str], typer.Option(help="Python of the site, e.g. 3.11 (default: this one)")] = None,
    platform: Annotated[Optional[str], typer.Option(help="pip platform tag of the site, e.g. manylinux2014_x86_64 (default: this machine)")] = None,
    extras: Annotated[Optional[list[str]], typer.Option("--extras", help="optional parts to include: gcp, azure (repeatable)")] = None,
    synthetic: Annotated[int, typer.Option(help="also include this many synthetic Monte Carlo events (the workload's file format) for a smoke test")] = 0,
    workload: Annotated[Optional[str], typer.Option(help="whose synthetic events --synthetic writes (default: the default workload)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the bundle's summary as JSON")] = False,
) -> None:
    """Build a self-contained install bundle on a connected machine, for a site without internet."""
    from .. import pack as packing

    bundle = packing.pack(out, python=python, platform_tag=platform, extras=extras or (), synthetic_events=synthetic, workload=workload,
                          say=lambda line: console.print(line, style="dim"))
    if as_json:
        emit_json(bundle.to_dict())
        return
    console.print(f"bundle {bundle.path}: {bundle.wheels} wheels, {bundle.files} files, {bundle.bytes / 1e6:,.0f} MB, built in {bundle.seconds:.0f} s")
    console.print(f"copy it to the site, then run: {bundle.path.name}/install.sh  (creates {bundle.path.name}/venv, no network needed)")
