"""The training options are one value: every field of the request a command makes is one of its
flags (or named here as one it does not take), each flag's value arrives in the request the API is
handed, and a name that is no field is refused when the command is declared, never dropped."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from burst.cli import app
from burst.cli.training_options import COMMON, flag_of, takes_training
from burst.lifecycle.runs import TrainRequest
from burst.lifecycle.scans import TuneRequest

SPACE = Path(__file__).resolve().parents[3] / "workloads" / "calo" / "tune-small.yaml"

# the fields a command does not take as a flag, and why: anything else missing fails the test
CODE = {"workload_source": "set from the workload's code when the workload is named by it (file.py:OBJECT, module:OBJECT)"}
NOT_FLAGS = {
    "train": {"run_id": "a managed run's controller sets it", **CODE},
    "run": {"run_id": "a managed run's controller sets it", **CODE, "resume": "a run starts its own cluster; `train --resume` goes on",
            "cancel_on_interrupt": "a run's cluster goes down with it: Ctrl-C always ends it"},
    "tune": {"space_file": "the file --space names", **CODE, "gate": "a scan ranks its trials by --metric; a gate is a run's",
             "checkpoint_every_steps": "a trial checkpoints each epoch, where ASHA judges it"},
}
# a value for each field unlike its default, as the command line spells it (None: a bare switch)
GIVEN = {"workload": "calo", "preset": "wide", "epochs": "3", "batch_per_replica": "16", "seed": "7", "steps_per_epoch": "5",
         "val_events": "123", "checkpoint_every_steps": "4", "precision": "float32", "cluster": "c1", "synthetic": "500",
         "workers": "2", "budget_usd": "9.5", "detach": None, "cancel_on_interrupt": None, "resume": "r-1", "managed": None,
         "trials": "3", "gpus_per_trial": "1", "max_concurrent": "2", "metric": "", "grace_period": "2", "reduction_factor": "3",
         "search": "random", "gate": "GATE", "space": str(SPACE)}
EXPECTED = {"epochs": 3, "batch_per_replica": 16, "seed": 7, "steps_per_epoch": 5, "val_events": 123, "checkpoint_every_steps": 4,
            "synthetic": 500, "workers": 2, "budget_usd": 9.5, "detach": True, "cancel_on_interrupt": True, "managed": True,
            "trials": 3, "gpus_per_trial": 1, "max_concurrent": 2, "grace_period": 2, "reduction_factor": 3, "gate": {"fpd": 0.5}}
COMMANDS = {"train": ("train", TrainRequest), "run": ("run", TrainRequest), "tune": ("tune", TuneRequest)}


def _handed(monkeypatch, command: str, words: list[str]):
    """The request ``burst COMMAND WORDS`` hands the API (the API's call is where the CLI's work ends)."""
    import burst.api

    seen = []

    def caught(request, *args, **kwargs):
        seen.append(request)
        raise SystemExit(0)

    monkeypatch.setattr(burst.api, {"train": "train", "run": "run", "tune": "tune"}[command], caught)
    result = CliRunner().invoke(app, [command, *words])
    assert seen, result.output
    return seen[0]


def _flag(function, field: str) -> str | None:
    """The command's flag for ``field`` as Typer reads it (None: the positional argument)."""
    option = typing.get_type_hints(function, include_extras=True)[field].__metadata__[0]
    if isinstance(option, typer.models.ArgumentInfo):
        return None
    decls = [option.default, *(option.param_decls or ())]  # in Annotated, Typer reads typer.Option("--flag") as its name
    return next((d for d in decls if isinstance(d, str) and d.startswith("--")), "--" + field.replace("_", "-"))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_field_of_the_request_is_a_flag_and_arrives(command, monkeypatch, tmp_path):
    import inspect

    name, model = COMMANDS[command]
    function = _function(command)
    params = inspect.signature(function).parameters
    gate = tmp_path / "gate.yaml"
    gate.write_text("fpd: 0.5\n")
    words, taken = [], []
    for field in model.model_fields:
        if field in NOT_FLAGS[command] or field == "data":  # one of --data and --synthetic: --data on its own below
            continue
        if field == "resume":  # --resume reads the earlier run: tests/burst/lifecycle follows it
            assert _flag(function, field) == "--resume"
            continue
        value = str(gate) if field == "gate" else GIVEN[field]
        flag = _flag(function, field)
        words += ([flag] if flag else []) + ([value] if value is not None else [])
        taken.append(field)
    request = _handed(monkeypatch, name, words)
    for field in taken:
        if field == "space":  # the file, read into the space it holds
            assert request.space_file == str(SPACE) and "learning_rate" in request.space
        elif field != "metric":  # empty: the workload's first, filled in by the request
            assert getattr(request, field) == EXPECTED.get(field, GIVEN[field]), (field, getattr(request, field))
    assert "cluster" in params and request.cluster == "c1"
    data = _handed(monkeypatch, name, ["calo", "--data", str(tmp_path), *(["--space", str(SPACE)] if command == "tune" else [])])
    assert data.data == str(tmp_path)


def _function(command: str):
    from burst.cli.runs import run, train
    from burst.cli.scans import tune

    return {"train": train, "run": run, "tune": tune}[command]


def test_every_field_a_command_does_not_take_is_named_with_why():
    """A new field of TrainRequest or TuneRequest is a flag of the commands or a line of NOT_FLAGS."""
    import inspect

    from burst.cli.runs import run, train
    from burst.cli.scans import tune

    for command, function in (("train", train), ("run", run), ("tune", tune)):
        params = set(inspect.signature(function).parameters)
        model = COMMANDS[command][1]
        missing = [f for f in model.model_fields if f not in params and f not in NOT_FLAGS[command]]
        assert not missing, (command, missing)


def test_one_default_each():
    """A flag's default is its field's: train, run and tune judge on the same held-out events."""
    import inspect

    from burst.cli.runs import run, train
    from burst.cli.scans import tune

    for name in COMMON:
        defaults = {inspect.signature(f).parameters[name].default for f in (train, run, tune)}
        assert len(defaults) == 1, (name, defaults)
    assert TuneRequest.model_fields["val_events"].default == TrainRequest.model_fields["val_events"].default


def test_a_name_that_is_no_field_is_refused_when_the_command_is_declared():
    with pytest.raises(ValueError, match="no field"):
        takes_training(TrainRequest, "val_event")
    with pytest.raises(ValueError, match="no field"):
        takes_training(TrainRequest, "trials")  # a scan's, not a run's


def test_a_bad_value_is_one_line_naming_the_flag(tmp_path):
    for words, says in ((["train", "--epochs", "0"], "--epochs must be a positive whole number, got 0"),
                        (["train", "--budget", "-1"], "--budget must be a positive number, got -1"),
                        (["tune", "calo", "--space", str(SPACE), "--cluster", "c", "--search", "grid"], "--search: Input should be 'random' or 'optuna'"),
                        (["run", "--preset", "nosuch"], "nosuch")):
        result = CliRunner().invoke(app, words)
        assert result.exit_code != 0 and says in result.output and "Traceback" not in result.output, (words, result.output)


def test_the_help_of_each_training_flag_is_its_field_s_description():
    from burst.cli.runs import train

    hints = typing.get_type_hints(train, include_extras=True)
    for name in ("epochs", "val_events", "precision"):
        (option,) = hints[name].__metadata__
        assert option.help == TrainRequest.model_fields[name].description
