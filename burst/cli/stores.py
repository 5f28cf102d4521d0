"""``burst datasets``: what is staged on the stores, what keeping it costs, and its removal."""

from __future__ import annotations

import time
from typing import Annotated, Optional

import typer
from rich.table import Table

from ..errors import BurstError
from .render import ConsoleReporter, console, emit_json, out


def datasets(
    store: Annotated[Optional[list[str]], typer.Option("--store", help="a store to look at (repeatable; default: every store a recorded cluster or run uses)")] = None,
    remove: Annotated[Optional[str], typer.Option("--remove", help="delete the dataset with this key from the one --store given")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Datasets staged on the stores (once each, under their content hash): size, files, monthly cost; --remove deletes one."""
    from .. import api
    from ..client.datasets import KEY_HEX

    if remove is not None:
        if not store or len(store) != 1:
            raise BurstError("--remove KEY needs the one store it is on: --store URI")
        if len(remove) != KEY_HEX or any(c not in "0123456789abcdef" for c in remove):
            raise BurstError(f"--remove takes a dataset key ({KEY_HEX} hex digits, as `burst datasets` lists them), got {remove[:40]!r}")
        gone = api.remove_dataset(store[0], remove)
        console.print(f"dataset {gone.key} ({gone.bytes:,} bytes) removed from {gone.store}")
        return
    found = api.datasets(store)
    if as_json:
        emit_json([d.model_dump(mode="json") for d in found])
        return
    t = Table(title="datasets on the stores")
    for col in ("store", "key", "state", "files", "size", "staged", "$/month", "source"):
        t.add_column(col, overflow="fold")
    for d in found:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(d.staged_at)) if d.staged_at else "-"
        t.add_row(d.store, d.key, "complete" if d.complete else "incomplete (a copy cut short; the next run copies again)",
                  str(d.files), f"{d.bytes / 2**30:.3f} GiB", when, "-" if d.usd_per_month is None else f"{d.usd_per_month:.4f}", d.source or "-")
    out.print(t)


store_app = typer.Typer(help="burst's region stores (made once per cloud region, kept after `burst down`).")


@store_app.command("lifecycle")
def lifecycle(
    provider: Annotated[str, typer.Option(help="the cloud whose store it is: gcp, gcp-tpu or azure")],
    region: Annotated[str, typer.Option(help="the store's region")],
    checkpoints_days: Annotated[Optional[int], typer.Option(min=1, max=36500, help="days a checkpoint is kept")] = None,
    datasets_days: Annotated[Optional[int], typer.Option(min=1, max=36500, help="days a staged dataset is kept")] = None,
    notices_days: Annotated[Optional[int], typer.Option(min=1, max=36500, help="days a notice is kept")] = None,
    policy_file: Annotated[Optional[str], typer.Option("--policy", help="policy naming the project (default: the packaged one)")] = None,
) -> None:
    """Change a store's lifecycle rules: the only way they change once it is made (a later `burst up` keeps them)."""
    from .. import api

    uri = api.store_lifecycle(provider, region, policy=policy_file, report=ConsoleReporter(), checkpoints_days=checkpoints_days,
                              datasets_days=datasets_days, notices_days=notices_days)
    out.print(f"lifecycle of {uri} changed")
