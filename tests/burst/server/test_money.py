"""A team's month from its clusters, and the clusters from a member's journal: the sums the team
budget guard and `burst costs` stand on."""

from __future__ import annotations

import calendar
import json

from burst.server import ledger, money
from burst.server.database import Cluster, Team, User

NOV = calendar.timegm((2026, 11, 1, 0, 0, 0))
DEC = calendar.timegm((2026, 12, 1, 0, 0, 0))


def cluster(user_id: int, created: float, hourly: float, ended=None, expires=None, provider="local") -> Cluster:
    return Cluster(user_id=user_id, cluster_id=f"c{created}", name="k8s", provider=provider, created=created, hourly_usd=hourly,
                   ended=ended, expires=expires, region="")


def test_a_cluster_across_two_months_is_charged_to_each_for_its_hours_in_it():
    c = cluster(1, DEC - 3600, 10.0, ended=DEC + 7200)
    assert money.spent(c, *money.month_bounds("2026-11"), now=DEC + 9999) == 10.0
    assert money.spent(c, *money.month_bounds("2026-12"), now=DEC + 9999) == 20.0
    assert money.month_bounds("2026-12") == (DEC, calendar.timegm((2027, 1, 1, 0, 0, 0)))


def test_spent_runs_to_now_and_committed_to_the_lease_but_not_past_the_month():
    now = NOV + 10 * 3600
    running = cluster(1, NOV + 3600, 2.0, expires=now + 5 * 3600)
    no_lease = cluster(1, NOV, 1.0)
    ended = cluster(2, NOV, 4.0, ended=NOV + 1800, expires=NOV + 99 * 3600)
    team = Team(name="cern", monthly_budget_usd=100.0)
    line = money.team_month(team, [running, no_lease, ended], "2026-11", now)
    assert line.spent_usd == 2.0 * 9 + 1.0 * 10 + 4.0 * 0.5
    assert line.committed_usd == 2.0 * 5  # the ended one and the one with no lease promise nothing
    assert line.left_usd == 100.0 - line.spent_usd - line.committed_usd
    late = cluster(1, DEC - 3600, 3.0, expires=DEC + 48 * 3600)
    assert money.committed(late, DEC, DEC - 3600) == 3.0  # one hour left in November


def test_costs_break_down_by_user_team_target_and_month():
    users = {1: User(id=1, name="alice", team_id=1, uid="a"), 2: User(id=2, name="bob", team_id=1, uid="b", monthly_budget_usd=50.0)}
    teams = {1: Team(id=1, name="cern", monthly_budget_usd=None)}
    now = DEC + 3600
    rows = [cluster(1, NOV, 1.0, ended=NOV + 3600), cluster(2, NOV, 2.0, ended=NOV + 3600, provider="gcp"),
            cluster(2, DEC - 3600, 1.0, ended=DEC + 3600)]
    by_user = {line.key: line for line in money.breakdown("user", rows, users, teams, "2026-11", now)}
    assert (by_user["alice"].spent_usd, by_user["bob"].spent_usd, by_user["bob"].left_usd) == (1.0, 3.0, 47.0)
    assert {line.key: line.spent_usd for line in money.breakdown("target", rows, users, teams, "2026-11", now)} == {"gcp": 2.0, "local": 2.0}
    assert {line.key: line.spent_usd for line in money.breakdown("month", rows, users, teams, "2026-11", now)} == {"2026-11": 4.0, "2026-12": 1.0}


def test_the_journal_keeps_a_cluster_that_came_and_went_and_skips_a_torn_line(tmp_path):
    journal = tmp_path / "clusters.journal"
    lines = [{"event": "saved", "name": "k8s", "cluster_id": "a1", "provider": "local", "region": "", "hourly_usd": 1.0, "created": 10.0,
              "expires": None, "at": 10.0},
             {"event": "saved", "name": "k8s", "cluster_id": "a1", "provider": "local", "region": "", "hourly_usd": 2.0, "created": 10.0,
              "expires": 500.0, "at": 20.0},
             {"event": "gone", "name": "k8s", "cluster_id": "a1", "at": 70.0},
             {"event": "saved", "name": "k8s", "cluster_id": "b2", "provider": "local", "region": "", "hourly_usd": 3.0, "created": 80.0,
              "expires": None, "at": 80.0}]
    journal.write_text("\n".join(json.dumps(line) for line in lines) + '\n{"event": "gone", "cluster_id": "b')
    found = ledger.clusters_in(journal)
    assert found["a1"] == {"name": "k8s", "provider": "local", "created": 10.0, "ended": 70.0, "hourly_usd": 2.0, "expires": 500.0, "region": ""}
    assert found["b2"]["ended"] is None and found["b2"]["hourly_usd"] == 3.0


def test_the_state_directory_journals_each_cluster_from_its_record_to_its_end(tmp_path, monkeypatch):
    from burst.home import state
    from burst.home.state import ClusterHandle

    monkeypatch.setenv("BURST_HOME", str(tmp_path))
    handle = ClusterHandle(name="k8s", provider="local", cluster_id="abc123", storage_uri=str(tmp_path / "s"), hourly_usd=4.0, created=100.0)
    state.save(handle)
    state.save(handle.model_copy(update={"state": "running"}))
    state.delete(ClusterHandle, "k8s")
    found = ledger.clusters_in(tmp_path / state.JOURNAL)
    assert found["abc123"]["hourly_usd"] == 4.0 and found["abc123"]["created"] == 100.0 and found["abc123"]["ended"] is not None
