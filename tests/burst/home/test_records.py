"""Records burst writes and reads back: all or nothing on disk, and one line when damaged anyway."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from burst.home import records, state
from burst.cli import app
from burst.errors import BurstError
from burst.home.state import RunRecord


def test_an_interrupted_write_leaves_the_old_record_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "cost.json"
    records.write_json_atomic(path, {"cost_usd": 1.0})
    monkeypatch.setattr(records.os, "replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        records.write_json_atomic(path, {"cost_usd": 2.0, "hours": 3.0})
    assert json.loads(path.read_text()) == {"cost_usd": 1.0}
    assert [p.name for p in tmp_path.iterdir()] == ["cost.json"]


def test_a_run_record_is_readable_by_others_and_a_state_file_is_not(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    records.write_json_atomic(tmp_path / "metrics.json", {"a": 1})
    assert (tmp_path / "metrics.json").stat().st_mode & 0o777 == 0o666 & ~records.UMASK
    state.save(RunRecord(run_id="r1", workload="gan3d", cluster="c", provider="local"))
    assert (tmp_path / "home" / "runs" / "r1.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("damage", ['{"cost_usd": 0.12, "hou', "", "\x00\x00"])
def test_a_damaged_cost_record_is_one_line(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    run_dir = tmp_path / "burst-runs" / "gan3d-1"
    (run_dir / "report").mkdir(parents=True)
    (run_dir / "report" / "report.html").write_text("<html></html>")
    (run_dir / "cost.json").write_text(damage)
    state.save(RunRecord(run_id="gan3d-1", workload="gan3d", cluster="gone", provider="local", state="SUCCEEDED", run_dir=str(run_dir)))
    result = CliRunner().invoke(app, ["report", "gan3d-1"])
    assert result.exit_code == 1 and result.exception is None or isinstance(result.exception, SystemExit), result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"run gan3d-1's cost record {run_dir / 'cost.json'} is damaged" in lines[0], result.stderr


def test_a_damaged_scan_table_is_one_line(tmp_path):
    from burst.lifecycle import scans

    (tmp_path / "scan.json").write_text('{"scan_id": "t')
    (tmp_path / "trials.json").write_text("[]")
    with pytest.raises(BurstError, match=r"scan summary .*scan.json is damaged \(not valid JSON"):
        scans.load(tmp_path)
