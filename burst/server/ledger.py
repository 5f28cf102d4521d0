"""The clusters each member has had, as the server knows them: read from the journal the member's
state directory keeps (``burst.home.state``: a line when a cluster's record is written, one when it
goes), so that a cluster that came and went between two looks is charged all the same."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..home.state import JOURNAL
from .database import Cluster, Reservation, Team, User


def clusters_in(journal: Path) -> dict[str, dict]:
    """cluster id -> what the journal says of it: its first record's fields, its newest price and
    lease, and when its record went (``ended``; None while it is there). A torn last line (a write
    cut short) is skipped."""
    found: dict[str, dict] = {}
    try:
        lines = journal.read_text().splitlines()
    except FileNotFoundError:
        return found
    for line in lines:
        try:
            entry = json.loads(line)
            key = str(entry["cluster_id"])
        except (ValueError, KeyError, TypeError):
            continue
        if entry.get("event") == "saved":
            seen = found.setdefault(key, {"name": entry["name"], "provider": entry["provider"], "created": entry["created"], "ended": None})
            seen.update(hourly_usd=float(entry.get("hourly_usd") or 0.0), expires=entry.get("expires"), region=entry.get("region") or "",
                        ended=None)
        elif entry.get("event") == "gone" and key in found:
            found[key]["ended"] = float(entry["at"])
    return found


def sync(db: Session, user: User, home: Path) -> list[Cluster]:
    """Bring the database's rows of ``user``'s clusters up to their journal; returns their open ones.
    Two requests (or two servers) syncing one member at once both see a new cluster: the one that
    adds its row second finds it there and reads again."""
    for attempt in range(3):
        try:
            return _sync(db, user, home)
        except IntegrityError:
            db.rollback()
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _sync(db: Session, user: User, home: Path) -> list[Cluster]:
    journal = clusters_in(home / JOURNAL)
    rows = {row.cluster_id: row for row in db.scalars(select(Cluster).where(Cluster.user_id == user.id))}
    for key, seen in journal.items():
        row = rows.get(key)
        if row is None:
            row = Cluster(user_id=user.id, cluster_id=key, name=seen["name"], provider=seen["provider"], created=float(seen["created"]))
            db.add(row)
            rows[key] = row
        if row.ended is None:  # an end the server decided (a stop for the budget) is kept; the journal's closes the rest
            row.hourly_usd, row.expires, row.region, row.ended = seen["hourly_usd"], seen["expires"], seen["region"], seen["ended"]
    released = [held for held in db.scalars(select(Reservation).where(Reservation.user_id == user.id))
                if any(row.created > held.created for row in rows.values())]  # made after the server reserved (one clock: the server's machine)
    if released:
        # Money moves from reserved to committed in this commit: under the team's row lock, as a verb
        # reads what is left (views.money_lock), so that no verb reads the clusters before this commit
        # and the reservations after it, and finds the money in neither (seen: three $38.40 clusters from $100)
        db.execute(select(Team).where(Team.id == user.team_id).with_for_update())
    for held in released:
        db.delete(held)  # the verb's cluster is in the journal: its lease is what it commits from now on
    db.commit()
    return [row for row in rows.values() if row.ended is None]


