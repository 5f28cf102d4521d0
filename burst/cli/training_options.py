"""The training flags, declared once for every command that trains (``train``, ``run``, ``tune``).

A training flag is a field of the request the command makes: ``TrainRequest`` (``train``,
``run``) or ``TuneRequest`` (``tune``), both ``TrainSettings`` underneath, which is what the job
reads. The field's type, its one default and its description are the flag's; its name is the
field's (``FLAGS`` names the few that differ). A command marked ``@takes_training(Request, ...)``
gets a parameter for each field of ``COMMON`` and of the extra ones it names (so ``--help`` lists
them), and receives what the user gave as one request, ``request``, made by the request's own
``of`` (one line naming the flag for a bad value), which it hands to ``burst.api`` whole.

A parameter the command declares itself with a field's name (``train --cluster``, ``run --name``)
is its own flag for that field: it goes in the request when given (not None) and reaches the
command too. A name that is not a field of the request fails when the command is declared, so a
flag is never dropped on its way to the job.
"""

from __future__ import annotations

import functools
import inspect
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, Union

import typer
from pydantic import BaseModel

from .. import workloads
from ..lifecycle.runs import FLAGS  # fields whose flag is not the field's name (the request's errors name the flag too)

__all__ = ["COMMON", "FLAGS", "takes_training"]

COMMON = ("workload", "preset", "epochs", "batch_per_replica", "data", "synthetic", "seed", "val_events", "steps_per_epoch",
          "precision", "budget_usd", "detach")
# fields given as a file the command reads into them: the flag, its help, and how the file becomes the field
FILES: dict[str, tuple[str, str]] = {
    "gate": ("--gate", "quality gate: YAML of summary metric -> largest accepted value; a run that misses it ends FAILED_QUALITY (exit 4)"),
    "space": ("--space", "search-space YAML (examples: workloads/<name>/tune-small.yaml)"),
}


def flag_of(field: str) -> str:
    """The command-line flag of a request field."""
    return FLAGS.get(field, "--" + field.replace("_", "-"))


def _option(model: type[BaseModel], name: str) -> tuple[Any, Any]:
    """(the Typer annotation, the default) of the flag for ``model``'s field ``name``."""
    field = model.model_fields[name]
    if name == "workload":
        return Annotated[str, typer.Argument(help=f"{field.description}: {' | '.join(workloads.NAMES)}")], workloads.DEFAULT
    if name in FILES:
        flag, help_text = FILES[name]
        required = name == "space"
        return Annotated[Path if required else Optional[Path], typer.Option(flag, help=help_text)], ... if required else None
    kind = field.annotation
    if typing.get_origin(kind) is Union:
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        kind = Optional[inner[0]]
    if typing.get_origin(kind) is typing.Literal:
        kind = str  # the request names the choices when the value is not one of them
    flag = flag_of(name)
    return Annotated[kind, typer.Option(flag, help=field.description)], field.get_default(call_default_factory=False)


def takes_training(model: type[BaseModel], *extra: str) -> Callable[[Callable], Callable]:
    """Give a command the training flags of ``COMMON`` and ``extra`` (fields of ``model``); it receives
    them as one ``request`` made by ``model.of``. Its own parameters named as fields win over those flags."""
    unknown = [f for f in (*COMMON, *extra) if f not in model.model_fields]
    if unknown:
        raise ValueError(f"{model.__name__} has no field {unknown}: a training flag is a field of the request it travels in")

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command)
        hints = typing.get_type_hints(command, include_extras=True)  # the command's own options, evaluated (its annotations are strings)
        own = [p.replace(annotation=hints[p.name]) for p in signature.parameters.values() if p.name != "request"]
        own_names = {p.name for p in own}
        fields = [f for f in dict.fromkeys((*COMMON, *extra)) if f not in own_names]
        added = []
        for name in fields:
            annotation, default = _option(model, name)
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if name == "workload" else inspect.Parameter.KEYWORD_ONLY
            added.append(inspect.Parameter(name, kind, annotation=annotation, default=default))
        own_fields = [p.name for p in own if p.name in model.model_fields]
        arguments = [p for p in added if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        options = [p for p in added if p.kind is inspect.Parameter.KEYWORD_ONLY]
        ordered = [*arguments, *options, *[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]]

        @functools.wraps(command)
        def with_training(**given: Any) -> Any:
            values = {name: given.pop(name) for name in fields}
            values.update({name: given[name] for name in own_fields if given[name] is not None})
            return command(request=request_of(model, values), **given)

        with_training.__signature__ = signature.replace(parameters=ordered)  # what Typer reads the options from
        with_training.__annotations__ = {p.name: p.annotation for p in ordered}  # evaluated: a decorator above reads them as they are
        return with_training

    return decorate


def request_of(model: type[BaseModel], values: dict[str, Any]) -> BaseModel:
    """``model.of`` over the flags' values, the files read into the fields they stand for."""
    from ..lifecycle import quality

    values = dict(values)
    if values.get("gate") is not None:
        values["gate"] = quality.load(values["gate"], values.get("workload") or workloads.DEFAULT)
    else:
        values.pop("gate", None)
    if "space" in values:
        return model.of(space_file=values.pop("space"), **values)
    return model.of(**values)
