"""What the server shows a member and does for them, the same for the HTTP API and the web view:
whose objects they see, the money they may still spend, their team's clusters and costs, their
team's runs, and a verb run as them with the team's money as its budget."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple, Optional, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ..errors import BurstError
from ..home.records import Damaged, read_record
from ..home.state import NAME_RULE, ClusterHandle, RunRecord
from ..values.served import MONEY_VERBS
from . import ledger, money, site_policy, verbs
from .database import Cluster, Reservation, Team, User

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
    reserved = list(session.scalars(select(Reservation)))
    lines = []
    if team.monthly_budget_usd is not None:
        mates = {u.id for u in session.scalars(select(User).where(User.team_id == team.id))}
        line = money.team_month(team, [c for c in everyone if c.user_id in mates], month, now)
        lines.append((_less(line, sum(r.usd for r in reserved if r.user_id in mates)), f"team {team.name}"))
    if member.monthly_budget_usd is not None:
        line = money.user_month(member, everyone, month, now)
        lines.append((_less(line, sum(r.usd for r in reserved if r.user_id == member.id)), f"user {member.name}"))
    for holder, whose in ((team, f"team {team.name}"), (member, f"user {member.name}")):
        damage = money.damaged_budget(holder)
        if damage:
            return 0.0, damage
        if holder.held_month == month:
            return 0.0, (f"{whose} reached its budget of ${holder.monthly_budget_usd:,.2f} this month and the guard stopped its "
                         "clusters")
    if not lines:
        return None, None
    (line, held), whose = min(lines, key=lambda pair: pair[0][0].left_usd)
    return line.left_usd, (f"{whose}: ${line.budget_usd:,.2f} this month, ${line.spent_usd:,.2f} spent, ${line.committed_usd:,.2f} committed"
                           + (f", ${held:,.2f} reserved by verbs under way" if held else ""))


def _less(line: money.Line, reserved_usd: float) -> tuple[money.Line, float]:
    """The month's line with what verbs under way hold reserved counted out of what is left."""
    return dataclasses.replace(line, left_usd=line.left_usd - reserved_usd), reserved_usd


class Held(NamedTuple):
    """A verb's words as the server runs them, and the money reserved for it (None: none)."""

    words: list[str]
    reservation: Optional[Reservation]


RESERVING = ("up", "run", "tune")  # the verbs that make a cluster, and commit its lease
RESERVATION_WAIT_S = 60.0  # a verb finds the money held by a teammate's verb under way: it waits this long for it to be released
HOLDER = f"{socket.gethostname()}:{os.getpid()}"  # this server process, as its reservations name it


LONG_AT_ONCE = 4  # a member's runs followed to their end by the server at once: the group's other requests keep threads to run in
_long_now: dict[int, int] = {}  # member id: their long verbs under way in this server
_long_lock = threading.Lock()


def is_long(verb: str, args: list[str]) -> bool:
    """A verb the server follows for as long as its run trains (hours): a run, train or tune not detached."""
    return verb in ("train", "run", "tune") and "--detach" not in args


@contextlib.contextmanager
def _one_more(member: User, long: bool):
    """One more long verb of ``member`` under way, or ``BurstError`` when ``LONG_AT_ONCE`` are already."""
    if not long:
        yield
        return
    with _long_lock:
        if _long_now.get(member.id, 0) >= LONG_AT_ONCE:
            raise BurstError(f"you have {LONG_AT_ONCE} runs followed to their end by the server already: wait for one, or detach this one "
                             "(--detach, then `burst status` and `burst logs RUN --follow`)")
        _long_now[member.id] = _long_now.get(member.id, 0) + 1
    try:
        yield
    finally:
        with _long_lock:
            _long_now[member.id] -= 1


def run_verb(sessions: sessionmaker, data_dir: Path, member: User, verb: str, args: list[str], files: list[str]) -> tuple[int, str, str]:
    """``burst VERB ARGS`` run as ``member`` (``files``: the uploads its ``@upload:N`` words name),
    held to the money they may still spend, with at most ``LONG_AT_ONCE`` of their runs followed to
    their end at a time; ``BurstError`` for an upload reference that is wrong, or one run too many."""
    with _one_more(member, is_long(verb, args)):
        return _run_verb(sessions, data_dir, member, verb, args, files)


def _run_verb(sessions: sessionmaker, data_dir: Path, member: User, verb: str, args: list[str], files: list[str]) -> tuple[int, str, str]:
    home = verbs.home_of(data_dir, member.uid)
    args, uploads = verbs.with_uploads(home, args, files)
    try:
        held = _held(sessions, data_dir, member, home, verb, args, uploads)
    except BurstError:
        shutil.rmtree(uploads, ignore_errors=True)  # refused before anything ran: nothing of it stays
        raise
    if not isinstance(held, Held):  # nothing left to spend: the refusal
        shutil.rmtree(uploads, ignore_errors=True)
        return held
    args, reservation = held
    try:  # no connection held while the verb runs (it may last hours); in the caller's thread
        rc, out, err = verbs.run(home, uploads, verb, args, member.uid,
                                 commit_usd=reservation.usd if reservation is not None else None)
    finally:
        with sessions() as after:
            if reservation is not None:  # the verb is over: what it made is in the journal, or nothing was
                row = after.get(Reservation, reservation.id)
                if row is not None:
                    after.delete(row)
                    after.commit()
            ledger.sync(after, after.get(User, member.id), home)
    return rc, out, err


def _held(sessions: sessionmaker, data_dir: Path, member: User, home: Path, verb: str, args: list[str], uploads: Path):
    """(the verb's words under the site's policy and the member's money, ``verbs.held_to``, and the
    reservation it holds), or the answer that refuses it (a tuple of three) when nothing is left
    to spend. A verb that makes a cluster reserves what is left, under a lock on the team's row,
    so two at the same moment never both get it; one that finds it all reserved by a teammate's
    verb under way waits for that to be released, up to ``RESERVATION_WAIT_S``."""
    site = site_policy.site_document(data_dir)
    if verb not in MONEY_VERBS:
        return Held(verbs.held_to(verb, args, uploads, None, site), None)
    waited_until = time.monotonic() + RESERVATION_WAIT_S
    while True:
        with sessions() as session:
            for mate in list(session.scalars(select(User).where(User.team_id == member.team_id))):
                ledger.sync(session, mate, verbs.home_of(data_dir, mate.uid))  # a reservation whose cluster is in the journal goes
            with money_lock(session, member.team_id, data_dir):
                left, whose = left_usd(session, member)
                if left is not None and left < 0.01:  # not a cent: nothing a budget can be
                    if _held_by_team(session, member) > 0 and time.monotonic() < waited_until:
                        session.rollback()
                        time.sleep(0.5)
                        continue
                    return 3, "", f"nothing left to spend ({whose}): ask an admin to raise the budget, or wait for next month\n"
                spent_on_cluster = 0.0
                if left is not None and verb == "train":
                    named = verbs.cluster_named(args)
                    now = time.time()
                    start, end = money.month_bounds(money.month_of(now))
                    spent_on_cluster = sum(money.spent(c, start, end, now) for c in session.scalars(
                        select(Cluster).where(Cluster.user_id == member.id, Cluster.name == named, Cluster.ended.is_(None))))
                words = verbs.held_to(verb, args, uploads, left, site, spent_on_cluster)
                reservation = None
                if left is not None and verb in RESERVING:
                    reservation = Reservation(user_id=member.id, usd=round(left, 2), created=time.time(), holder=HOLDER)
                    session.add(reservation)
                    logging.getLogger("burst.server").info("%s's %s: $%.2f reserved (%s)", member.name, verb, reservation.usd, whose)
                session.commit()  # the lock goes with the transaction
                return Held(words, reservation)


def _held_by_team(session: Session, member: User) -> float:
    """What verbs of ``member``'s team under way hold reserved."""
    mates = select(User.id).where(User.team_id == member.team_id)
    return sum(r.usd for r in session.scalars(select(Reservation).where(Reservation.user_id.in_(mates))))


@contextlib.contextmanager
def money_lock(session: Session, team_id: int, data_dir: Path):
    """One verb at a time reads and reserves a team's money: a lock on the team's row (PostgreSQL
    ``SELECT ... FOR UPDATE``, held to the transaction's end), or, on SQLite (one machine), a lock
    file beside its database."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(Team).where(Team.id == team_id).with_for_update())
        yield
        return
    from filelock import FileLock

    with FileLock(str(data_dir / "money.lock")):
        yield


def release_dead_reservations(sessions: sessionmaker, max_age_s: float) -> int:
    """At a server's start: the reservations of server processes of this machine that are gone, and
    any older than a verb may last, released; how many went."""
    import psutil

    host = socket.gethostname()
    gone = 0
    with sessions() as session:
        for r in session.scalars(select(Reservation)):
            where, _, pid = r.holder.rpartition(":")
            dead = where == host and pid.isdigit() and not psutil.pid_exists(int(pid))
            if dead or time.time() - r.created > max_age_s:
                session.delete(r)
                gone += 1
        session.commit()
    return gone


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
