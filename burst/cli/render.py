"""Where the CLI writes: people's messages and errors on stderr, machine output on stdout.

One place for both consoles so every command prints errors the same way (one line, however
long) and tables at the same width; ``ConsoleReporter`` is how the orchestration layer (which
never prints) talks to a person at a terminal.
"""

from __future__ import annotations

import json
import math
import sys
from contextlib import contextmanager
from typing import Iterator, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from ..errors import BurstError
from ..targets.base import Reporter

# markup=False: messages carry names, paths and other programs' words, and a "[/x]" in any of them
# would be read as a style tag (a MarkupError traceback); styles are given explicitly where wanted.
console = Console(stderr=True, soft_wrap=True, markup=False)  # an error stays one line, however long
out = Console(width=None if sys.stdout.isatty() else 150, markup=False)  # tables are wide; do not fold them into 80 columns when piped


def print_error(exc: BurstError) -> None:
    """A user-facing error as one line on stderr, its text shown as written."""
    console.print(Text.assemble(("error:", "red"), " ", str(exc)), highlight=False)


def fail(exc: BurstError) -> NoReturn:
    """Print a user-facing error as one line and exit with its code."""
    print_error(exc)
    raise typer.Exit(exc.exit_code)


def finite(data):
    """``data`` with every non-finite float as None: JSON has no Infinity or NaN (``jq`` and most
    parsers reject them), and an unbounded figure is "no value" to a reader of the output."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def emit_json(data) -> None:
    typer.echo(json.dumps(finite(data), indent=2, default=str, allow_nan=False))  # plain: never wrapped or styled


class ConsoleReporter(Reporter):
    """Lines on stderr, a progress bar for Pulumi operations and for training runs."""

    def say(self, message: str) -> None:
        console.print(message, highlight=False)

    @contextmanager
    def stack_progress(self, verb: str) -> Iterator:
        from .progress import PulumiProgress

        with PulumiProgress(verb, console) as progress:
            yield progress

    @contextmanager
    def run_progress(self, run, tracker) -> Iterator:
        from .progress import RunProgress

        with RunProgress(console, tracker) as progress:
            yield progress
