"""The ``burst`` command line: a thin face over ``burst.api`` (parse, call, render).

Imports only typer, rich and pydantic at start-up, so ``burst --help`` and ``burst plan`` stay
fast; each command imports what it needs. One error boundary (``_Commands.invoke``) turns any
``BurstError`` into one line on stderr and its exit code, and Ctrl-C into exit 130.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from .. import __version__
from ..errors import BurstError
from . import clusters, pack, planning, runs, scans, served, server, stores
from .render import fail, print_error


class _Commands(TyperGroup):
    def parse_args(self, ctx, args):
        ctx.meta[served.WORDS] = list(args)  # the command's own words: what a logged-in client sends to its server
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            forwarded = served.forward(self, ctx)
            if forwarded is not None:
                raise typer.Exit(forwarded)
            served.check_paths(self, ctx)
            return super().invoke(ctx)
        except BurstError as exc:
            fail(exc)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True,
                  help="Burst a training run from this machine to whatever hardware a policy allows.")
for command in (planning.plan, clusters.up, runs.train, runs.run, scans.tune, clusters.status, runs.logs, runs.report, clusters.down,
                clusters.monitor, planning.bench, planning.profile, runs.calibrate, pack.pack):
    app.command()(command)
app.command("workloads")(planning.workloads_list)
app.command("datasets")(stores.datasets)
app.add_typer(planning.policy_app, name="policy")
app.add_typer(planning.catalog_app, name="catalog")
app.add_typer(stores.store_app, name="store")
app.add_typer(server.server_app, name="server")
for command in (server.login, server.logout, server.costs, server.team):
    app.command()(command)


@app.callback(invoke_without_command=True)
def _main(ctx: typer.Context, version: Annotated[bool, typer.Option("--version", help="print the version")] = False) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main() -> None:
    import signal

    # Ctrl-C must work even when a parent started us with SIGINT ignored (a background job of a
    # script), and SIGTERM (a batch system, `kill`) gets the same clean-up as Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)  # the terminal closed: a run being followed is handed to its controller
    try:
        app()
    except BurstError as exc:  # raised outside a command (e.g. while parsing): still one line
        print_error(exc)
        sys.exit(exc.exit_code)
