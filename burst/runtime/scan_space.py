"""Search-space files for `burst tune`: which knobs a scan varies and how, validated like policies.

A space file maps each knob to one distribution (or a fixed value)::

    learning_rate:     {loguniform: [3.0e-4, 3.0e-3]}
    profile_weight:    {uniform: [0.5, 4.0]}
    loss_weight_angle: {choice: [10, 25]}
    noise_size:        {int: [64, 254]}        # both ends included
    gen_filters:       {choice: [[6, 4], [8, 6]]}
    batch_per_replica: {grid: [16, 32]}        # every value, each with --trials samples of the rest
    label_flip:        0.05                    # fixed

Knobs are the workload's (its ``tunable``) plus ``batch_per_replica``. Unknown
knobs, unknown distributions and values the model cannot take are one line with the file and line.
The file is checked on this machine before anything is submitted; the job turns it into Ray Tune's
own search-space objects (``to_ray``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ..errors import BurstError
from ..home.userfile import compose_yaml, key_lines, key_path, read_text

if TYPE_CHECKING:
    from ..workloads.base import Workload

RUN_KNOBS = {"batch_per_replica": "events per replica per step (a run setting, default the preset's)"}


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


class Uniform(_Dist):
    uniform: tuple[float, float]

    @field_validator("uniform")
    @classmethod
    def _range(cls, v):
        if not (math.isfinite(v[0]) and math.isfinite(v[1]) and v[0] < v[1]):
            raise ValueError(f"uniform needs [low, high] with low < high, got {list(v)}")
        return v

    def values(self) -> list:
        return list(self.uniform)


class LogUniform(_Dist):
    loguniform: tuple[float, float]

    @field_validator("loguniform")
    @classmethod
    def _range(cls, v):
        if not (math.isfinite(v[1]) and 0 < v[0] < v[1]):
            raise ValueError(f"loguniform needs [low, high] with 0 < low < high, got {list(v)}")
        return v

    def values(self) -> list:
        return list(self.loguniform)


class IntRange(_Dist):
    int: tuple[int, int]

    @field_validator("int")
    @classmethod
    def _range(cls, v):
        if v[0] > v[1]:
            raise ValueError(f"int needs [low, high] with low <= high (both included), got {list(v)}")
        return v

    def values(self) -> list:
        return list(self.int)


class Choice(_Dist):
    choice: list[Any]

    @field_validator("choice")
    @classmethod
    def _some(cls, v):
        if not v:
            raise ValueError("choice needs at least one value")
        return v

    def values(self) -> list:
        return list(self.choice)


class Grid(_Dist):
    grid: list[Any]

    @field_validator("grid")
    @classmethod
    def _some(cls, v):
        if not v:
            raise ValueError("grid needs at least one value")
        return v

    def values(self) -> list:
        return list(self.grid)


Dimension = Union[Uniform, LogUniform, IntRange, Choice, Grid]
DISTRIBUTIONS = ("uniform", "loguniform", "int", "choice", "grid")


class SearchSpace(BaseModel):
    """Knob → distribution (or a fixed value); checked against the preset the scan trains."""

    model_config = ConfigDict(frozen=True)
    knobs: dict[str, Any]

    def dimension(self, knob: str) -> Dimension | None:
        value = self.knobs[knob]
        return value if isinstance(value, _Dist) else None

    def grid_size(self) -> int:
        """Configurations a full grid holds (1 without grid dimensions)."""
        return math.prod(len(d.grid) for d in self.knobs.values() if isinstance(d, Grid))

    def describe(self) -> str:
        parts = []
        for knob, d in self.knobs.items():
            if isinstance(d, _Dist):
                kind = type(d).__name__.lower().replace("intrange", "int")
                parts.append(f"{knob} {kind} {d.values()}")
            else:
                parts.append(f"{knob} = {d}")
        return "; ".join(parts)

    def as_data(self) -> dict:
        """JSON-able form the job reads back with ``from_data``."""
        return {k: (d.model_dump(mode="json") if isinstance(d, _Dist) else d) for k, d in self.knobs.items()}

    @classmethod
    def from_data(cls, data: dict) -> "SearchSpace":
        return cls(knobs={k: _dimension(v) if isinstance(v, dict) else v for k, v in data.items()})

    def to_ray(self) -> dict:
        """Ray Tune's search space (imports Ray Tune: call it in the job)."""
        from ray import tune

        out: dict = {}
        for knob, d in self.knobs.items():
            if isinstance(d, Uniform):
                out[knob] = tune.uniform(*d.uniform)
            elif isinstance(d, LogUniform):
                out[knob] = tune.loguniform(*d.loguniform)
            elif isinstance(d, IntRange):
                out[knob] = tune.randint(d.int[0], d.int[1] + 1)  # randint excludes its upper end
            elif isinstance(d, Choice):
                out[knob] = tune.choice(d.choice)
            elif isinstance(d, Grid):
                out[knob] = tune.grid_search(d.grid)
            else:
                out[knob] = d
        return out


def _dimension(raw: dict) -> Dimension:
    keys = [k for k in raw if k in DISTRIBUTIONS]
    if len(raw) != 1 or not keys:
        raise ValueError(f"a knob takes one distribution ({', '.join(DISTRIBUTIONS)}) or a fixed value, got {sorted(map(str, raw))}")
    return {"uniform": Uniform, "loguniform": LogUniform, "int": IntRange, "choice": Choice, "grid": Grid}[keys[0]].model_validate(raw)


def check_value(workload: "Workload", preset_name: str, knob: str, value: Any) -> None:
    """ValueError when the workload cannot train with ``knob`` = ``value``."""
    if knob == "batch_per_replica":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"batch_per_replica must be a positive whole number, got {value!r}")
        return
    workload.check_knob(preset_name, knob, value)


def parse(text: str, source: str, workload: "Workload", preset: str | None = None) -> SearchSpace:
    """A space document → ``SearchSpace`` of ``workload``'s knobs; every error one line naming the file and line."""
    preset = preset or workload.default_preset
    node, raw = compose_yaml(text, source)
    known = {**workload.tunable, **RUN_KNOBS}
    if not isinstance(raw, dict) or not raw:
        raise BurstError(f"{source}:1: a search space maps knobs to distributions, e.g. `learning_rate: {{loguniform: [3.0e-4, 3.0e-3]}}` "
                         f"(knobs: {', '.join(known)})")
    lines = key_lines(node)
    knobs: dict[str, Any] = {}
    for knob, value in raw.items():
        where = f"{source}:{lines.get((knob,), 1)}"
        if knob not in known:
            raise BurstError(f"{where}: unknown knob {knob!r}; a scan can vary: {', '.join(known)}")
        try:
            dim = _dimension(value) if isinstance(value, dict) else value
        except ValidationError as exc:
            err = exc.errors()[0]
            path = key_path(lines, (knob, *err["loc"]))
            raise BurstError(f"{source}:{lines.get(path, lines.get((knob,), 1))}: {knob}: {_message(err)}") from None
        except ValueError as exc:
            raise BurstError(f"{where}: {knob}: {exc}") from None
        for v in dim.values() if isinstance(dim, _Dist) else [dim]:
            if isinstance(dim, (Uniform, LogUniform)) and knob in workload.whole_number_knobs | {"batch_per_replica"}:
                raise BurstError(f"{where}: {knob} takes whole numbers: use int, choice or grid, not {type(dim).__name__.lower()}")
            try:
                check_value(workload, preset, knob, v)
            except ValueError as exc:
                raise BurstError(f"{where}: {exc}") from None
        knobs[knob] = dim
    return SearchSpace(knobs=knobs)


def _message(err: dict) -> str:
    msg = err["msg"]
    return msg.removeprefix("Value error, ")


def load(path: Path, workload: "Workload", preset: str | None = None) -> SearchSpace:
    example = workload.example_space
    try:
        example = example.relative_to(Path.cwd())
    except ValueError:
        pass
    return parse(read_text(Path(path), "search space", f" (an example: {example})"), str(path), workload, preset)
