"""A damaged state directory, catalog or run record, read by every command that reads it: one line,
never a traceback, never a number that cannot be true taken for true, and nothing changed on disk.

A disk that filled, a sync tool or a hand edit leaves a file truncated, empty, binary, of the
wrong JSON type, a directory or a pipe where a file was, a file where a directory was, or a field
that is NaN, infinite, negative, huge or of the wrong type. The property test draws one damage of
one file and one command that reads it, runs the real CLI in-process and checks what a user
relies on:

- no traceback, and at most one line on stderr when the command fails;
- a command that cannot go on exits non-zero; ``burst status`` goes on, shows the damaged record
  as a row (and in ``--json``), and exits 0;
- a failed command changed nothing on disk, and no command touched the damaged file.

``pytest tests/burst/home/test_damaged_state.py --hypothesis-show-statistics`` prints the kinds of
damage and the commands drawn.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from burst.cli import app
from burst.catalog import offers as catalog_mod

NOW = 1_790_000_000.0
CLUSTER = {"name": "c1", "provider": "local", "cluster_id": "c1-dmg0", "state": "running", "created": NOW, "expires": NOW + 3600,
           "dashboard_url": "http://127.0.0.1:1", "storage_uri": "/nonexistent/storage", "layout": {"description": "1 node, 2 CPUs"},
           "hourly_usd": 0.5, "budget_usd": 10.0, "pids": [], "idle_minutes": 30.0}
RUN = {"run_id": "r1", "workload": "gan3d", "cluster": "c1", "provider": "local", "job_id": "raysubmit_1", "state": "SUCCEEDED",
       "created": NOW, "finished": NOW + 60, "config": {"epochs": 1}, "progress": {"epoch": 1, "epochs": 1}, "hourly_usd": 0.5,
       "attempts": 1}
MANAGED_RUN = {**RUN, "run_id": "m1", "managed": True, "cluster": "gone"}
MANAGED = {"run_id": "m1", "request": {}, "cluster": "gone", "phase": "finished", "budget_usd": 5.0, "created": NOW,
           "attempts": [{"number": 1, "cluster": "gone", "provider": "local", "hourly_usd": 0.5, "started": NOW, "cost_usd": 0.01}]}
BENCH = {"workload": "gan3d", "events_per_s": 1.5, "cpus": 2}
CALIBRATION = {"accelerators": {"V100": {"per_event_s": 0.004, "basis": "two runs here", "runs": ["r0"], "recorded_at": NOW}}}
COST = {"provider": "local", "hourly_usd": 0.5, "hours": 0.02, "cost_usd": 0.01,
        "measured": {"epoch_s": 30.0, "epochs": 1, "training_s": 30.0, "hours": 0.02, "kgco2e": 0.001},
        "plan": {"accelerator": "V100", "preset": "paper"},
        "predicted": {"epoch_s": 28.0, "events_per_epoch": 1000, "training_s": 28.0}, "epoch_error": 0.0714}


@dataclass(frozen=True)
class Record:
    """One JSON file burst reads back: where it lies, what it holds healthy, the fields whose values
    are checked, and the commands that read it."""

    path: str               # under the temporary root
    healthy: dict
    fields: tuple[tuple[str, ...], ...]
    commands: tuple[tuple[str, ...], ...]


STATUS = (("status",), ("status", "--json"))
RECORDS = {
    "cluster record": Record("home/clusters/c1.json", CLUSTER,
                             (("created",), ("expires",), ("hourly_usd",), ("budget_usd",), ("idle_minutes",), ("pids",), ("starter_pid",),
                              ("dashboard_url",), ("provider",), ("layout",), ("state",)),
                             STATUS + (("down", "c1"), ("down", "--all"), ("logs", "r1"))),
    "run record": Record("home/runs/r1.json", RUN, (("created",), ("finished",), ("hourly_usd",), ("attempts",), ("config",), ("progress",)),
                         STATUS + (("logs", "r1"), ("report", "r1"), ("calibrate", "r1"))),
    "managed-run record": Record("home/managed/m1.json", MANAGED,
                                 (("created",), ("budget_usd",), ("phase",), ("attempts",), ("attempts", 0, "hourly_usd"),
                                  ("attempts", 0, "cost_usd"), ("attempts", 0, "started")), STATUS),
    "bench record": Record("home/bench/gan3d.json", BENCH, (("events_per_s",), ("cpus",)), (("plan",),)),
    "calibration record": Record("home/calibration/gan3d.json", CALIBRATION,
                                 (("accelerators",), ("accelerators", "V100", "per_event_s")), (("plan",),)),
    "cost record": Record("burst-runs/r1/cost.json", COST,
                          (("cost_usd",), ("hours",), ("hourly_usd",), ("measured", "epoch_s"), ("predicted", "epoch_s"),
                           ("predicted", "events_per_epoch")), (("report", "r1"), ("calibrate", "r1"))),
}
# Plain files burst reads back whole (a directory or a pipe in their place is damage), and a command that reads each.
FILES = {"burst-runs/m1/job.log": ("logs", "m1"), "burst-runs/r1/report/report.html": ("report", "r1")}
# Directories burst keeps records in, and a command that needs each.
DIRECTORIES = {"home": ("status",), "home/clusters": ("status",), "home/runs": ("status",), "home/managed": ("status",),
               "home/bench": ("plan",)}
# Values no checked field can hold: not finite, below zero, past any real figure, or not a value of its type.
IMPOSSIBLE = [float("nan"), float("inf"), float("-inf"), -1.5, 1e300, "12abc", ["x"], {"a": 1}]
CATALOG_COLUMNS = {"price_od": ["nan", "inf", "-1", "1e300", "abc", "0"], "price_spot": ["nan", "inf", "-inf", "-1", "1e300", "x"],
                   "memory_gib": ["nan", "inf", "-5", "1e300", "x"], "accelerator_count": ["0", "-1", "nan", "1e300", "x"],
                   "vcpus": ["nan", "-1", "1e300"]}


def _build(root: Path) -> None:
    """A healthy state directory, run directory and catalog under ``root``."""
    for rec in RECORDS.values():
        path = root / rec.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec.healthy))
    (root / "home" / "runs" / "m1.json").write_text(json.dumps(MANAGED_RUN))
    run_dir = root / "burst-runs" / "r1"
    (run_dir / "report").mkdir(parents=True)
    (run_dir / "report" / "report.html").write_text("<html></html>")
    (run_dir / "job.log").write_text("epoch 1\n")
    (root / "burst-runs" / "m1").mkdir()
    (root / "burst-runs" / "m1" / "job.log").write_text("epoch 1\n")
    (root / RECORDS["run record"].path).write_text(json.dumps({**RUN, "run_dir": str(run_dir)}))
    shutil.copy(catalog_mod.DEFAULT_PATH, root / "catalog.csv")
    for d in ("clusters", "runs", "managed", "bench", "calibration"):
        (root / "home" / d).mkdir(parents=True, exist_ok=True)


def _snapshot(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        mode = p.lstat().st_mode
        out[str(p.relative_to(root))] = p.read_bytes() if stat.S_ISREG(mode) else stat.S_IFMT(mode)
    return out


@contextmanager
def _environment(root: Path):
    """BURST_HOME and the working directory of one example (hypothesis runs many in one test)."""
    before, cwd = os.environ.get("BURST_HOME"), os.getcwd()
    os.environ["BURST_HOME"] = str(root / "home")
    os.chdir(root)
    try:
        yield
    finally:
        os.chdir(cwd)
        if before is None:
            os.environ.pop("BURST_HOME", None)
        else:
            os.environ["BURST_HOME"] = before


def _set(data, path: tuple, value):
    data = json.loads(json.dumps(data))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def _damage_record(root: Path, rec: Record, draw) -> str:
    """Damage ``rec``'s file one way; the kind of damage."""
    path = root / rec.path
    text = json.dumps(rec.healthy, allow_nan=True)
    kind = draw(st.sampled_from(["truncated", "empty", "binary", "wrong JSON type", "directory", "pipe", "field"]))
    if kind == "truncated":
        path.write_text(text[: draw(st.integers(0, len(text) - 1))])
    elif kind == "empty":
        path.write_bytes(draw(st.sampled_from([b"", b"\n", b"   "])))
    elif kind == "binary":
        path.write_bytes(draw(st.binary(min_size=1, max_size=64).filter(lambda b: not _is_json_object(b))))
    elif kind == "wrong JSON type":
        path.write_text(json.dumps(draw(st.sampled_from([[], [rec.healthy], "text", 42, None, True]))))
    elif kind == "directory":
        path.unlink()
        path.mkdir()
    elif kind == "pipe":
        path.unlink()
        os.mkfifo(path)
    else:
        field = draw(st.sampled_from(rec.fields))
        value = draw(st.sampled_from(IMPOSSIBLE + _wrong_for(field)))
        path.write_text(json.dumps(_set(rec.healthy, field, value), allow_nan=True))
        kind = f"field {'.'.join(map(str, field))} = {value!r}"
    return kind


def _wrong_for(field: tuple) -> list:
    """Values that are only wrong for some fields (an address that is not one, a provider burst does not know)."""
    return {("dashboard_url",): ["not a url", "http://", "ftp://host", "http://h:99999"], ("provider",): ["nope", 5],
            ("phase",): ["sleeping"], ("state",): ["burning"], ("pids",): [[0], [-4], [2**40]]}.get(field, [])


def _is_json_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


def _refused(kind: str) -> bool:
    """Every drawn damage makes the file unusable, except the free-form dictionaries (config,
    progress, layout), where only a non-dictionary is damage."""
    if not kind.startswith("field "):
        return True
    field, value = kind[len("field "):].split(" = ", 1)
    if field in ("config", "progress", "layout"):
        return not value.startswith("{")
    return True


def _check(result, command: tuple, must_fail: bool, shown: str | None) -> None:
    err = result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), (command, result.exception, err)
    assert "Traceback" not in err and "Traceback" not in result.stdout, (command, err)
    if result.exit_code != 0:
        assert len([line for line in err.splitlines() if line.strip()]) == 1, (command, err)
    if must_fail and command[0] != "status":
        assert result.exit_code != 0, (command, result.stdout, err)
    if shown is not None and command[0] == "status":
        assert result.exit_code == 0, (command, err)
        if "--json" in command:
            damaged = json.loads(result.stdout)["damaged"]
            assert [d["path"] for d in damaged] == [shown], damaged
        else:
            assert "damaged" in result.stdout, result.stdout


TARGETS = ["record"] * 6 + ["catalog", "directory", "file", "state lock"]  # records are most of what burst reads back


@settings(max_examples=160, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_damaged_file_is_one_line_and_changes_nothing(data):
    draw = data.draw
    target = draw(st.sampled_from(TARGETS))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _build(root)
        with _environment(root):
            CliRunner().invoke(app, ["status"])  # the state lock and every directory exist, as after any earlier command
            shown, must_fail = None, True
            if target == "record":
                name = draw(st.sampled_from(sorted(RECORDS)))
                rec = RECORDS[name]
                command = draw(st.sampled_from(rec.commands))
                kind = _damage_record(root, rec, draw)
                must_fail = _refused(kind)
                if must_fail and name in ("cluster record", "run record", "managed-run record"):
                    shown = str(root / rec.path)
                event(f"damage: {name}, {kind.split(' = ')[0]}")
            elif target == "catalog":
                command = draw(st.sampled_from([("plan", "--catalog", "catalog.csv"), ("catalog", "--catalog", "catalog.csv", "--json")]))
                column = draw(st.sampled_from(sorted(CATALOG_COLUMNS)))
                _damage_catalog(root / "catalog.csv", column, draw(st.sampled_from(CATALOG_COLUMNS[column])), draw)
                event(f"damage: catalog, column {column}")
            elif target == "file":
                name = draw(st.sampled_from(sorted(FILES)))
                command = FILES[name]
                (root / name).unlink()
                kind = draw(st.sampled_from(["directory", "pipe"]))
                (root / name).mkdir() if kind == "directory" else os.mkfifo(root / name)
                event(f"damage: {name} a {kind}")
            elif target == "directory":
                name = draw(st.sampled_from(sorted(DIRECTORIES)))
                command = DIRECTORIES[name]
                shutil.rmtree(root / name)
                (root / name).write_text("{}")  # a file where the directory was
                event(f"damage: {name} a file")
            else:
                command = ("down", "c1")
                lock = root / "home" / "state.lock"
                lock.unlink(missing_ok=True)
                lock.mkdir()
                event("damage: state.lock a directory")
            event(f"command: burst {' '.join(command)}")
            before = _snapshot(root)
            result = CliRunner().invoke(app, list(command))
            after = _snapshot(root)
        _check(result, command, must_fail, shown)
        if result.exit_code != 0:
            assert after == before, "a failed command changed the disk"
        elif target == "record":
            assert after[rec.path] == before[rec.path], "the damaged file was changed"


def _damage_catalog(path: Path, column: str, value: str, draw=None) -> int:
    """Set ``column`` of one data row (drawn, else the first) to ``value``; the row's line number."""
    lines = path.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    rows = [i for i in range(header + 1, len(lines)) if lines[i].strip() and not lines[i].startswith("#")]
    i = draw(st.sampled_from(rows)) if draw else rows[0]
    cells = next(csv.reader([lines[i]]))
    cells[next(csv.reader([lines[header]])).index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(cells)
    lines[i] = buf.getvalue()
    path.write_text("\n".join(lines) + "\n")
    return i + 1


# The findings that opened this work, one each, with the words a user reads.
FINDINGS = {
    "cluster record a directory": ("home/clusters/c1.json", "dir", ("status", "--json"), 0, "a directory, not a file"),
    "run record a directory, logs": ("home/runs/r1.json", "dir", ("logs", "r1"), 1, "run record"),
    "cluster record a directory, down": ("home/clusters/c1.json", "dir", ("down", "c1"), 1, "then remove the record (rm -r"),
    "clusters/ a file": ("home/clusters", "file", ("status",), 1, "a file stands where a directory must be"),
    "BURST_HOME a file": ("home", "file", ("status",), 1, "point BURST_HOME at a directory"),
    "state.lock a directory": ("home/state.lock", "dir", ("down", "c1"), 1, "state lock"),
    "dashboard not a URL": ("home/clusters/c1.json", {"dashboard_url": "not a url"}, ("status", "--json"), 0, "is not an http(s) address"),
    "created NaN": ("home/clusters/c1.json", {"created": float("nan")}, ("status", "--json"), 0, "created: Input should be a finite number"),
    "bench zero": ("home/bench/gan3d.json", {"events_per_s": 0}, ("plan",), 1, "events_per_s: Input should be greater than 0"),
    "bench NaN": ("home/bench/gan3d.json", {"events_per_s": float("nan")}, ("plan",), 1, "events_per_s: Input should be a finite number"),
}


@pytest.mark.parametrize("path, damage, command, code, words", list(FINDINGS.values()), ids=list(FINDINGS))
def test_each_finding_is_one_line(tmp_path, path, damage, command, code, words):
    _build(tmp_path)
    with _environment(tmp_path):
        CliRunner().invoke(app, ["status"])
        target = tmp_path / path
        if damage == "dir":
            target.unlink(missing_ok=True)
            target.mkdir()
        elif damage == "file":
            shutil.rmtree(target)
            target.write_text("{}")
        else:
            rec = next(r for r in RECORDS.values() if r.path == path)
            target.write_text(json.dumps({**rec.healthy, **damage}, allow_nan=True))
        result = CliRunner().invoke(app, list(command))
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    shown = result.stdout if code == 0 else result.stderr
    assert words in shown, shown
    if code:
        assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, result.stderr


@pytest.mark.parametrize("column, value", [("price_od", "nan"), ("price_od", "inf"), ("price_spot", "inf"), ("memory_gib", "nan")])
def test_a_catalog_number_that_cannot_be_true_is_refused(tmp_path, monkeypatch, column, value):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    path = tmp_path / "catalog.csv"
    shutil.copy(catalog_mod.DEFAULT_PATH, path)
    line = _damage_catalog(path, column, value)
    for args in (["catalog", "--catalog", str(path), "--json"], ["plan", "--catalog", str(path)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (args, result.stdout)
        assert f"{path}:{line}: column {column} is {value!r}, not a finite number" in result.stderr, result.stderr
