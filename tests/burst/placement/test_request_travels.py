"""One placement request, from the command line to the target and to a managed run's next attempt.

The price cap (`--max-price-per-hour`) was added as the issue asked a new option to be added: one
field in ``placement/request.py``, one flag line in ``cli/placement_options.py``, one filter in the
planner. These tests show it arrives everywhere the request goes, which is what travelling whole
means: nothing rebuilds the request field by field on the way and drops it."""

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from burst.cli import app
from burst.placement.request import HOW_TO_BUILD, TARGET_BOUND, PlacementRequest


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _json(args: list[str]) -> dict:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # what the command says goes to stderr


def test_a_price_cap_narrows_the_plan_and_says_what_it_left_out(home):
    free = _json(["plan", "--all", "--json"])
    assert free["choice"]["hourly_usd"] > 5  # the default policy's choice without a cap (the on-prem site)
    capped = _json(["plan", "--all", "--json", "--max-price-per-hour", "5"])
    assert capped["choice"] is not None and capped["choice"]["hourly_usd"] <= 5
    assert all(c["hourly_usd"] <= 5 for c in capped["candidates"])
    assert capped["excluded"]["over --max-price-per-hour"] == sum(c["hourly_usd"] > 5 for c in free["candidates"])


def test_a_price_cap_reaches_up_pinned_or_planned(home, tmp_path):
    fastest = tmp_path / "fastest.yaml"
    fastest.write_text("objective: min_time\nproviders: [gcp]\n")  # the dearest nodes, unless capped
    up = ["up", "--dry-run", "--json", "--policy", str(fastest), "--provider", "gcp", "--gpus", "8"]
    free = _json(up)
    cap = free["hourly_usd"] / 2
    capped = _json(up + ["--max-price-per-hour", f"{cap:.4f}"])
    assert capped["hourly_usd"] <= cap and capped["layout"]["count"] == 8  # the planner's pin, narrowed by the cap
    pinned = CliRunner().invoke(app, ["up", "--dry-run", "--provider", "gcp", "--gpus", "8", "--accelerator", "V100",
                                      "--max-price-per-hour", "1"])
    assert pinned.exit_code == 2 and "is over --max-price-per-hour 1" in pinned.output and "Traceback" not in pinned.output
    bad = CliRunner().invoke(app, ["plan", "--max-price-per-hour", "0"])
    assert bad.exit_code == 2 and "--max-price-per-hour must be a number of dollars above 0, got 0.0" in bad.output


def test_a_managed_run_s_next_attempt_keeps_the_price_cap(home, tmp_path):
    """The run is handed over with its request's flags; the move plans without what bound it to the
    target it lost, and keeps the rest: the cap, the GPU count, the workload."""
    from burst import controller
    from burst.unattended.managed import Attempt, ManagedRun

    policy = tmp_path / "policy.yaml"
    policy.write_text("objective: min_time\nproviders: [gcp, azure]\npreemptible: prefer\n")  # the dearest nodes, unless capped
    lost = Attempt(number=1, cluster="c", provider="gcp", region="us-central1", preemptible=True, ended=1.0, how="lost: preempted")

    def move(first: PlacementRequest) -> PlacementRequest:
        m = ManagedRun(run_id="gan3d-1", request={"workload": "gan3d"}, cluster="c", policy=str(policy),
                       placement=json.loads(json.dumps({**first.flags(), "hours": 3})),  # as the record keeps it
                       attempts=[lost, Attempt(number=2, cluster="c-2")], avoid=["gcp:us-central1"])
        moved, _ = controller.Controller(m).moved_request()
        return moved

    first = PlacementRequest(provider="gcp", region="us-central1", accelerator="T4", gpus=8, preemptible=True)
    free = move(first)
    from burst.lifecycle.placing import place

    price = place(free, str(policy), _Quiet())[0].hourly_usd
    cap = round(price / 2, 4)
    capped = move(first.but(max_price_per_hour=cap))
    assert capped.max_price_per_hour == cap and capped.gpus == 8 and capped.workload == "gan3d"
    placed = place(capped, str(policy), _Quiet())[0]
    assert placed.hourly_usd <= cap < price


class _Quiet:
    def say(self, message: str) -> None:
        pass


def test_every_field_but_the_target_s_own_goes_with_a_move_and_narrows_a_plan():
    """A new field needs no list to be kept: narrowing drops only the target and how to build it,
    a move drops only what is bound to the target lost."""
    names = {f.name for f in dataclasses.fields(PlacementRequest)}
    assert set(HOW_TO_BUILD) < names and set(TARGET_BOUND) < names
    full = PlacementRequest(**{f.name: _some(str(f.type)) for f in dataclasses.fields(PlacementRequest) if f.name != "scan"})
    narrowed, moved = full.narrowing(), full.elsewhere()
    for name in names - {"scan", "live"}:  # a scan's shape is set by `burst tune` alone; live is never None
        assert (getattr(narrowed, name) is None) == (name in HOW_TO_BUILD or name == "provider"), name
        assert (getattr(moved, name) is None) == (name in TARGET_BOUND), name


def _some(type_text: str):
    """A value set (not the default) for a field of this type."""
    if "tuple[tuple" in type_text:
        return (("s", 1.0),)
    if "tuple" in type_text:
        return ("gcp",)
    if "bool" in type_text:
        return True
    if "int" in type_text:
        return 2
    if "float" in type_text:
        return 1.5
    return "x"
