"""What the server shows a member and does for them, the same for the HTTP API and the web view:
whose objects they see, the money they may still spend, their team's clusters and costs, their
team's runs, and a verb run as them with the team's money as its budget."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Optional, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ..errors import BurstError
from ..home.records import Damaged, read_record
from ..home.state import NAME_RULE, ClusterHandle, RunRecord
from ..values.served import MONEY_VERBS
from . import ledger, money, site_policy, verbs
from .database import Cluster, Team, User

M = TypeVar("M", RunRecord, ClusterHandle)


def team_of(session: Session, member: User) -> Team:
    return session.get(Team, member.team_id)


def visible(session: Session, member: User) -> list[User]:
    """The users whose objects ``member`` sees: their team's (an admin: everyone's)."""
    query = select(User) if member.role == "admin" else select(User).where(User.team_id == member.team_id)
    return list(session.scalars(query.order_by(User.name)))


def visible_person(session: Session, member: User, name: str) -> Optional[User]:
    """The user called ``name`` when ``member`` may see them (their team, or anyone for an admin); else None."""
    return next((u for u in visible(session, member) if u.name == name), None)


def may_act(member: User, owner: User) -> bool:
    """Whether ``member`` may act on ``owner``'s cluster or run: their own, or anyone's for an admin."""
    return member.role == "admin" or member.id == owner.id


def left_usd(session: Session, member: User) -> tuple[Optional[float], Optional[str]]:
    """What the member may still spend this month (the smaller of their team's and their own), and whose limit that is."""
    now = time.time()
    month = money.month_of(now)
    team = team_of(session, member)
    everyone = list(session.scalars(select(Cluster)))
    lines = []
    if team.monthly_budget_usd is not None:
        mates = {u.id for u in session.scalars(select(User).where(User.team_id == team.id))}
        lines.append((money.team_month(team, [c for c in everyone if c.user_id in mates], month, now), f"team {team.name}"))
    if member.monthly_budget_usd is not None:
        lines.append((money.user_month(member, everyone, month, now), f"user {member.name}"))
    for holder, whose in ((team, f"team {team.name}"), (member, f"user {member.name}")):
        damage = money.damaged_budget(holder)
        if damage:
            return 0.0, damage
        if holder.held_month == month:
            return 0.0, (f"{whose} reached its budget of ${holder.monthly_budget_usd:,.2f} this month and the guard stopped its "
                         "clusters")
    if not lines:
        return None, None
    line, whose = min(lines, key=lambda pair: pair[0].left_usd)
    return line.left_usd, f"{whose}: ${line.budget_usd:,.2f} this month, ${line.spent_usd:,.2f} spent, ${line.committed_usd:,.2f} committed"


def run_verb(sessions: sessionmaker, data_dir: Path, member: User, verb: str, args: list[str], files: list[str]) -> tuple[int, str, str]:
    """``burst VERB ARGS`` run as ``member`` (``files``: the uploads its ``@upload:N`` words name),
    held to the money they may still spend; ``BurstError`` for an upload reference that is wrong."""
    home = verbs.home_of(data_dir, member.uid)
    args, uploads = verbs.with_uploads(home, args, files)
    try:
        args = _held(sessions, data_dir, member, home, verb, args, uploads)
    except BurstError:
        shutil.rmtree(uploads, ignore_errors=True)  # refused before anything ran: nothing of it stays
        raise
    if isinstance(args, tuple):  # nothing left to spend: the refusal
        shutil.rmtree(uploads, ignore_errors=True)
        return args
    # no connection held while the verb runs (it may last hours); in the caller's thread
    rc, out, err = verbs.run(home, uploads, verb, args, member.uid)
    with sessions() as after:
        ledger.sync(after, after.get(User, member.id), home)
    return rc, out, err


def _held(sessions: sessionmaker, data_dir: Path, member: User, home: Path, verb: str, args: list[str], uploads: Path):
    """The verb's words under the site's policy and the member's money (``verbs.held_to``), or the
    answer that refuses it (a tuple) when nothing is left to spend."""
    site = site_policy.site_document(data_dir)
    if verb not in MONEY_VERBS:
        return verbs.held_to(verb, args, uploads, None, site)
    with sessions() as session:
        ledger.sync(session, member, home)
        left, whose = left_usd(session, member)
        if left is not None and left <= 0:
            return 3, "", f"nothing left to spend ({whose}): ask an admin to raise the budget, or wait for next month\n"
        spent_on_cluster = 0.0
        if left is not None and verb == "train":
            named = verbs.cluster_named(args)
            now = time.time()
            start, end = money.month_bounds(money.month_of(now))
            spent_on_cluster = sum(money.spent(c, start, end, now) for c in session.scalars(
                select(Cluster).where(Cluster.user_id == member.id, Cluster.name == named, Cluster.ended.is_(None))))
        return verbs.held_to(verb, args, uploads, left, site, spent_on_cluster)


def open_clusters(session: Session, member: User, data_dir: Path) -> list[dict]:
    """The running clusters ``member`` sees, each with its owner and what it has cost this month."""
    now = time.time()
    start, end = money.month_bounds(money.month_of(now))
    people = {u.id: u for u in visible(session, member)}
    for person in people.values():
        ledger.sync(session, person, verbs.home_of(data_dir, person.uid))
    rows = session.scalars(select(Cluster).where(Cluster.user_id.in_(list(people)), Cluster.ended.is_(None)).order_by(Cluster.created))
    return [{"owner": people[c.user_id].name, "name": c.name, "provider": c.provider, "region": c.region, "hourly_usd": c.hourly_usd,
             "created": c.created, "expires": c.expires, "spent_usd": round(money.spent(c, start, end, now), 4),
             "stopped_by": c.stopped_by} for c in rows]


def costs(session: Session, member: User, data_dir: Path, by: str, month: str) -> list[money.Line]:
    """The month's lines ``member`` sees, grouped ``by`` team, user, target or month (``ValueError``: a bad month)."""
    return costs_by(session, member, data_dir, (by,), month)[by]


def costs_by(session: Session, member: User, data_dir: Path, groupings: tuple[str, ...], month: str) -> dict[str, list[money.Line]]:
    """The month's lines ``member`` sees, in each grouping, from one read of the members' journals."""
    money.month_bounds(month)
    people = {u.id: u for u in visible(session, member)}
    for person in people.values():
        ledger.sync(session, person, verbs.home_of(data_dir, person.uid))
    rows = list(session.scalars(select(Cluster).where(Cluster.user_id.in_(list(people)))))
    teams = {t.id: t for t in session.scalars(select(Team)) if any(p.team_id == t.id for p in people.values())}
    out = {}
    for by in groupings:
        lines = money.breakdown(by, rows, people, teams, month)
        if by == "team":  # every visible team, with nothing spent too: its budget is what a member wants to see
            named = {line.key for line in lines}
            lines += [money.team_month(t, [], month) for t in teams.values() if t.name not in named]
        out[by] = lines
    return out


def runs_of(session: Session, member: User, data_dir: Path) -> list[tuple[User, RunRecord]]:
    """Every run and scan ``member`` sees (their team's; an admin: everyone's), newest first, with
    its owner. A record that cannot be read is left out here; the owner's `burst status` names it."""
    found = []
    for person in visible(session, member):
        for path in (verbs.home_of(data_dir, person.uid) / "runs").glob("*.json"):
            try:
                found.append((person, read_record(path, "run record", "see `burst status`", RunRecord)))
            except (Damaged, FileNotFoundError):
                continue
    return sorted(found, key=lambda pair: pair[1].created, reverse=True)


def run_of(session: Session, member: User, data_dir: Path, run_id: str) -> Optional[tuple[User, RunRecord]]:
    """The run ``run_id`` with its owner when ``member`` may see it; None otherwise (another team's
    run does not exist for them)."""
    for person in visible(session, member):
        record = run_of_owner(data_dir, person, run_id)
        if record is not None:
            return person, record
    return None


def run_of_owner(data_dir: Path, owner: User, run_id: str) -> Optional[RunRecord]:
    """``owner``'s record of ``run_id`` as their state directory holds it now; None: none (or unreadable)."""
    return member_record(data_dir, owner, RunRecord, run_id)


def member_record(data_dir: Path, owner: User, model: type[M], key: str) -> Optional[M]:
    """``owner``'s record of a run or a cluster (``model``) named ``key``, as their state directory
    holds it now; None when there is none, it cannot be read, or ``key`` is no name burst gives."""
    if not NAME_RULE.fullmatch(key):
        return None
    kind, what = ("clusters", "cluster record") if model is ClusterHandle else ("runs", "run record")
    try:
        return read_record(verbs.home_of(data_dir, owner.uid) / kind / f"{key}.json", what, "see `burst status`", model)
    except (Damaged, FileNotFoundError):
        return None


PEEK_TIMEOUT_S = 60.0


def look_at_run(home: Path, run_id: str) -> dict:
    """The run as its owner's state directory and its cluster say it (``burst.server.peek``, run as them)."""
    try:
        proc = verbs.as_member(home, ["burst.server.peek", run_id], PEEK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"run_id": run_id, "error": f"the run's cluster did not answer in {PEEK_TIMEOUT_S:.0f} s"}
    if proc.returncode != 0:
        return {"run_id": run_id, "error": (proc.stderr.strip().splitlines() or ["the run could not be read"])[-1]}
    return json.loads(proc.stdout)


def report_root(record: RunRecord) -> Optional[Path]:
    """The directory of a run's report on the server; None before there is one."""
    from ..lifecycle.rundir import report_page

    page = report_page(record)
    return page.parent.resolve() if page is not None and page.is_file() else None


def report_url(run_id: str) -> str:
    """Where the web view serves a run's report (``report_root``'s files under it)."""
    from urllib.parse import quote

    return f"/ui/runs/{quote(run_id)}/report/report.html"
