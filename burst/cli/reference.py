"""The command reference as Markdown: every command's own ``--help``, asked of the Typer app.

The documentation site's command page is written from this at every build (``docs/hooks.py``),
so that it cannot say anything ``--help`` does not: it *is* ``--help``, command by command.
"""

from __future__ import annotations

from typing import Any

WIDTH = 100  # columns the help is laid out in; wide enough for the option tables


def command_paths(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command under ``group``, depth first, as the words after ``burst`` (``catalog``, ``refresh``)."""
    # Typer carries its own copy of click, so groups are told by what they have, not by class.
    found: list[tuple[str, ...]] = []
    ctx = group.context_class(group, info_name=" ".join(("burst", *path)))
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        found.append((*path, name))
        if hasattr(command, "list_commands"):
            found.extend(command_paths(command, (*path, name)))
    return found


def help_text(path: tuple[str, ...]) -> str:
    """What ``burst PATH --help`` prints, in plain text (no colours), ``WIDTH`` columns wide."""
    from typer.testing import CliRunner

    from . import app

    env = {"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb", "_TYPER_FORCE_DISABLE_TERMINAL": "1"}
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="burst", env=env)
    if result.exit_code != 0:
        raise RuntimeError(f"burst {' '.join(path)} --help failed: {result.output.strip()}")
    return "\n".join(line.rstrip() for line in result.output.strip("\n").splitlines())


def burst_reference() -> str:
    """One section per command of the installed ``burst``: its ``--help``, verbatim."""
    import typer.main

    from . import app

    sections = ["```text\n" + help_text(()) + "\n```\n"]
    for path in command_paths(typer.main.get_command(app)):
        sections.append(f"{'#' * (len(path) + 1)} `burst {' '.join(path)}`\n")
        sections.append("```text\n" + help_text(path) + "\n```\n")
    return "\n".join(sections)
