"""A managed run's moves as times, read from the attempts its controller recorded: the lines
`burst status RUN` and the web view show, the section of the run's report and cost.json's figures.
(The real controller records them in the move tests: tests/burst/runtime/test_stores.py.)"""

import json
import subprocess
import sys

import pytest

from burst.home import state
from burst.home.state import RunRecord
from burst.unattended import managed, timeline
from burst.unattended.managed import Attempt, ManagedRun

T = 1_800_000_000.0  # a fixed moment: every time below is an offset from it


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def moved_run(second_done: bool = True) -> ManagedRun:
    lost = Attempt(number=1, cluster="c", provider="local", started=T, cluster_up=T + 20, submitted=T + 21, first_step=T + 40,
                   last_seen=T + 100, ended=T + 103.5, how="lost: the cluster stopped (its head's gcs_server is gone on this machine)")
    after = Attempt(number=2, cluster="c-2", provider="slurm", started=T + 104, cluster_up=T + 125 if second_done else None,
                    submitted=T + 127 if second_done else None, first_step=T + 150 if second_done else None)
    return ManagedRun(run_id="gan3d-1", request={}, cluster="c", attempts=[lost, after], phase="running")


def test_a_move_says_when_the_head_last_answered_when_it_was_judged_and_each_step_of_the_next_cluster_from_then():
    (move,) = timeline.moves(moved_run())
    assert move.seconds() == {"answer_to_judged_s": 3.5, "judged_to_up_s": 21.5, "judged_to_submitted_s": 23.5, "judged_to_first_step_s": 46.5}
    line = move.line()
    assert line.startswith("attempt 1 on local cluster c, last answered ")
    assert "(3.5 s after): the cluster stopped (its head's gcs_server is gone on this machine)" in line
    assert "-> attempt 2 on slurm cluster c-2, up " in line and "(+21.5 s)" in line and line.endswith("(+46.5 s)")
    assert timeline.records(moved_run()) == [{"lost_attempt": 1, "why": "the cluster stopped (its head's gcs_server is gone on this machine)",
                                             "next_attempt": 2, **move.seconds()}]


def test_a_move_under_way_says_what_has_not_happened_yet_and_a_run_that_never_moved_has_none():
    (move,) = timeline.moves(moved_run(second_done=False))
    assert move.line().endswith("up not yet, submitted not yet, first step not yet")
    finished = ManagedRun(run_id="gan3d-2", request={}, cluster="c",
                          attempts=[Attempt(number=1, cluster="c", provider="local", ended=T, how="finished")])
    assert timeline.lines(finished) == [] and timeline.report_section(finished) == ""


def test_the_report_gets_one_moves_section_however_often_it_is_written(tmp_path):
    page = tmp_path / "report.html"
    page.write_text("<html><body><h1>gan3d</h1></body></html>")
    assert timeline.add_to_report(page, moved_run(second_done=False))
    assert timeline.add_to_report(page, moved_run())  # written again at the run's end: the newer section replaces the older
    text = page.read_text()
    assert text.count("<section id='moves'>") == 1 and "(+46.5 s)" in text and text.endswith("</section></body></html>")
    assert not timeline.add_to_report(tmp_path / "missing.html", moved_run())


def test_burst_status_run_shows_its_attempts_and_moves_and_an_unknown_run_is_one_line(home, tmp_path):
    m = moved_run()
    m.phase = "finished"  # nothing to revive: `burst status` starts no controller
    managed.save(m)
    with state.locked():
        state.save(RunRecord(run_id="gan3d-1", workload="gan3d", cluster="c-2", provider="slurm", state="SUCCEEDED", managed=True))
    env = {"BURST_HOME": str(home), "PATH": "/usr/bin:/bin", "COLUMNS": "250"}
    shown = subprocess.run([sys.executable, "-m", "burst.cli", "status", "gan3d-1"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "attempts" in shown.stdout and "c-2" in shown.stdout
    (moved_line,) = [line for line in shown.stdout.splitlines() if line.startswith("moved: ")]
    assert moved_line == "moved: " + timeline.lines(m)[0]
    as_json = json.loads(subprocess.run([sys.executable, "-m", "burst.cli", "status", "gan3d-1", "--json"], capture_output=True,
                                        text=True, env=env, cwd=tmp_path).stdout)
    assert [r["run_id"] for r in as_json["runs"]] == ["gan3d-1"] and as_json["timelines"]["gan3d-1"] == timeline.lines(m)
    assert [a["number"] for a in as_json["attempts"]["gan3d-1"]] == [1, 2]
    unknown = subprocess.run([sys.executable, "-m", "burst.cli", "status", "gan3d-9"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.strip() == "error: no run 'gan3d-9' on this machine; `burst status` lists the runs"


def test_the_web_view_s_look_at_a_run_carries_its_moves_as_times(home, tmp_path):
    m = moved_run()
    m.phase = "finished"
    managed.save(m)
    with state.locked():
        state.save(RunRecord(run_id="gan3d-1", workload="gan3d", cluster="c-2", provider="slurm", state="SUCCEEDED", managed=True))
    looked = subprocess.run([sys.executable, "-m", "burst.server.peek", "gan3d-1"], capture_output=True, text=True,
                            env={"BURST_HOME": str(home), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert looked.returncode == 0, looked.stderr
    assert json.loads(looked.stdout)["timeline"] == timeline.lines(m)  # what live.js lists under "Moves as times"
