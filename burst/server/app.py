"""The burst server's HTTP API (FastAPI): every request names its user by token; a member runs
verbs as themselves and sees their team's clusters and money; an admin sees and stops everything.
Another team's objects do not exist for a member (404); a missing or bad token is 401."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

from fastapi import Depends, FastAPI, Header, HTTPException
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ..values.served import FORWARDED, MONEY_VERBS
from . import accounts, ledger, money, verbs
from .database import Cluster, Team, User
from .guard import stop_as_member


class VerbCall(BaseModel):
    args: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=200)
    files: list[Annotated[str, Field(max_length=1_000_000)]] = Field(default_factory=list, max_length=4)


def build(sessions: sessionmaker, data_dir: Path) -> FastAPI:
    app = FastAPI(title="burst server", docs_url=None, redoc_url=None, openapi_url=None)

    def db() -> Session:
        with sessions() as session:
            yield session

    def user(authorization: Annotated[Optional[str], Header()] = None, session: Session = Depends(db)) -> User:
        token = authorization[7:] if authorization and authorization.lower().startswith("bearer ") else None
        found = accounts.authenticate(session, token)
        if found is None:
            raise HTTPException(401, "no valid token: a missing, unknown, revoked or expired token", headers={"WWW-Authenticate": "Bearer"})
        return found

    def team_of(session: Session, member: User) -> Team:
        return session.get(Team, member.team_id)

    def visible(session: Session, member: User) -> list[User]:
        """The users whose objects ``member`` sees: their team's (an admin: everyone's)."""
        query = select(User) if member.role == "admin" else select(User).where(User.team_id == member.team_id)
        return list(session.scalars(query))

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

    @app.get("/v1/me")
    def me(member: User = Depends(user), session: Session = Depends(db)) -> dict:
        return {"user": member.name, "team": team_of(session, member).name, "role": member.role, "uid": member.uid}

    @app.post("/v1/verbs/{verb}")
    def verb(verb: str, call: VerbCall, member: User = Depends(user), session: Session = Depends(db)) -> dict:
        if verb not in FORWARDED:
            raise HTTPException(404, f"no verb {verb!r} on this server; it runs {', '.join(FORWARDED)}")
        home = verbs.home_of(data_dir, member.uid)
        try:
            args, uploads = verbs.with_uploads(home, call.args, call.files)
        except Exception as exc:  # noqa: BLE001 - a bad upload reference: the caller's words
            raise HTTPException(400, str(exc)) from None
        if verb in MONEY_VERBS:
            ledger.sync(session, member, home)
            left, whose = left_usd(session, member)
            if left is not None and left <= 0:
                return {"rc": 3, "stdout": "", "stderr": f"nothing left to spend ({whose}): ask an admin to raise the budget, or wait for "
                                                         "next month\n"}
            spent_on_cluster = 0.0
            if left is not None and verb == "train":
                named = verbs.cluster_named(args)
                now = time.time()
                start, end = money.month_bounds(money.month_of(now))
                spent_on_cluster = sum(money.spent(c, start, end, now) for c in session.scalars(
                    select(Cluster).where(Cluster.user_id == member.id, Cluster.name == named, Cluster.ended.is_(None))))
            args = verbs.held_to(verb, args, uploads, left, spent_on_cluster)
        session.close()  # a verb may last hours: no connection held meanwhile
        rc, out, err = verbs.run(home, uploads, verb, args, member.uid)  # in FastAPI's thread pool: one thread per verb under way
        with sessions() as after:
            ledger.sync(after, after.get(User, member.id), home)
        return {"rc": rc, "stdout": out, "stderr": err}

    @app.get("/v1/clusters")
    def clusters(member: User = Depends(user), session: Session = Depends(db)) -> list[dict]:
        now = time.time()
        start, end = money.month_bounds(money.month_of(now))
        people = {u.id: u for u in visible(session, member)}
        for person in people.values():
            ledger.sync(session, person, verbs.home_of(data_dir, person.uid))
        rows = session.scalars(select(Cluster).where(Cluster.user_id.in_(list(people)), Cluster.ended.is_(None)))
        return [{"owner": people[c.user_id].name, "name": c.name, "provider": c.provider, "region": c.region, "hourly_usd": c.hourly_usd,
                 "created": c.created, "expires": c.expires, "spent_usd": round(money.spent(c, start, end, now), 4),
                 "stopped_by": c.stopped_by} for c in rows]

    @app.delete("/v1/clusters/{owner}/{name}")
    def stop_cluster(owner: str, name: str, member: User = Depends(user), session: Session = Depends(db)) -> dict:
        people = {u.name: u for u in visible(session, member)}
        whose = people.get(owner)
        row = None
        if whose is not None:
            ledger.sync(session, whose, verbs.home_of(data_dir, whose.uid))
            row = session.scalar(select(Cluster).where(Cluster.user_id == whose.id, Cluster.name == name, Cluster.ended.is_(None)))
        if row is None:
            raise HTTPException(404, f"no cluster {name!r} of {owner!r}")
        if member.role != "admin" and whose.id != member.id:
            raise HTTPException(403, f"cluster {name!r} is {owner}'s: only they or an admin may stop it")
        reason = f"stopped by {member.name}"
        session.close()
        done = stop_as_member(verbs.home_of(data_dir, whose.uid), name, reason)
        if not done:
            raise HTTPException(502, f"cluster {name!r} could not be taken down: see the server's log")
        return {"stopped": name, "owner": owner}

    @app.get("/v1/costs")
    def costs(by: str = "team", month: Optional[str] = None, member: User = Depends(user), session: Session = Depends(db)) -> dict:
        if by not in money.GROUPINGS:
            raise HTTPException(400, f"--by {by!r}: one of {', '.join(money.GROUPINGS)}")
        month = month or money.month_of(time.time())
        try:
            money.month_bounds(month)
        except ValueError:
            raise HTTPException(400, f"--month {month!r}: give YEAR-MONTH, e.g. 2026-11") from None
        people = {u.id: u for u in visible(session, member)}
        for person in people.values():
            ledger.sync(session, person, verbs.home_of(data_dir, person.uid))
        rows = list(session.scalars(select(Cluster).where(Cluster.user_id.in_(list(people)))))
        teams = {t.id: t for t in session.scalars(select(Team)) if any(p.team_id == t.id for p in people.values())}
        lines = money.breakdown(by, rows, people, teams, month)
        if by == "team":  # every visible team, with nothing spent too: its budget is what a member wants to see
            named = {line.key for line in lines}
            lines += [money.team_month(t, [], month) for t in teams.values() if t.name not in named]
        return {"month": month, "by": by, "lines": [line.as_dict() for line in lines]}

    return app
