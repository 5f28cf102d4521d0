"""A team's money this month, from the clusters its members brought up: spent (what the clusters
have cost so far, at their hourly price from creation to end), committed (what running clusters
will cost to the end of their lease) and left (the budget less both).

Months are calendar months in UTC; a cluster that spans two months is charged to each for its
hours in it."""

from __future__ import annotations

import calendar
import math
import time
from dataclasses import asdict, dataclass
from typing import Iterable, Optional

from .database import Cluster, Team, User

GROUPINGS = ("user", "team", "target", "month")
BUDGET_LIMIT = 1e8


def budget_of(holder) -> Optional[float]:
    """A team's or user's monthly budget; one the database holds damaged (not a number, negative,
    beyond any budget: written around `burst server admin`) counts as nothing left to spend."""
    usd = holder.monthly_budget_usd
    if usd is None:
        return None
    return usd if damaged_budget(holder) is None else 0.0


def damaged_budget(holder) -> Optional[str]:
    """Why a holder's budget in the database cannot be a budget (None: it can, or there is none)."""
    usd = holder.monthly_budget_usd
    if usd is None or (isinstance(usd, (int, float)) and math.isfinite(usd) and 0 <= usd <= BUDGET_LIMIT):
        return None
    kind = "team" if not hasattr(holder, "team_id") else "user"
    return (f"{kind} {holder.name}'s budget in the database is {usd!r}, not an amount: nothing more is spent until an admin sets it "
            f"again (`burst server admin budget {'TEAM --user ' + holder.name if kind == 'user' else holder.name} --usd N`)")


def month_of(at: float) -> str:
    return time.strftime("%Y-%m", time.gmtime(at))


def month_bounds(month: str) -> tuple[float, float]:
    year, number = (int(part) for part in month.split("-"))
    start = calendar.timegm((year, number, 1, 0, 0, 0))
    end = calendar.timegm((year + number // 12, number % 12 + 1, 1, 0, 0, 0))
    return float(start), float(end)


def spent(cluster: Cluster, start: float, end: float, now: float) -> float:
    """What ``cluster`` cost between ``start`` and ``end`` (up to ``now`` while it runs)."""
    until = min(cluster.ended if cluster.ended is not None else now, end, now)
    hours = max(0.0, until - max(cluster.created, start)) / 3600
    return cluster.hourly_usd * hours


def committed(cluster: Cluster, end: float, now: float) -> float:
    """What a running cluster will still cost this month, to its lease's end (nothing past the month
    or for a cluster with no lease: the guard stops those when the money runs out)."""
    if cluster.ended is not None or cluster.expires is None:
        return 0.0
    return cluster.hourly_usd * max(0.0, min(cluster.expires, end) - now) / 3600


@dataclass
class Line:
    key: str
    spent_usd: float
    committed_usd: float
    budget_usd: Optional[float]
    left_usd: Optional[float]

    def as_dict(self) -> dict:
        """As JSON: an amount that is not a finite number (a damaged row) is null."""
        return {k: ((round(v, 4) if math.isfinite(v) else None) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def line_for(key: str, clusters: Iterable[Cluster], month: str, budget: Optional[float], now: float) -> Line:
    """What ``clusters`` spent in ``month`` and still commit to it, against ``budget`` (None: no budget, nothing left to say)."""
    start, end = month_bounds(month)
    clusters = list(clusters)
    used = sum(spent(c, start, end, now) for c in clusters)
    promised = sum(committed(c, end, now) for c in clusters)
    return Line(key, used, promised, budget, None if budget is None else budget - used - promised)


def team_month(team: Team, clusters: Iterable[Cluster], month: str, now: Optional[float] = None) -> Line:
    """The team's month, from its members' clusters (the caller gives only those)."""
    return line_for(team.name, clusters, month, budget_of(team), time.time() if now is None else now)


def user_month(user: User, clusters: Iterable[Cluster], month: str, now: Optional[float] = None) -> Line:
    """The user's own month, from every cluster given (theirs are picked)."""
    return line_for(user.name, [c for c in clusters if c.user_id == user.id], month, budget_of(user), time.time() if now is None else now)


def breakdown(by: str, clusters: list[Cluster], users: dict[int, User], teams: dict[int, Team], month: str,
              now: Optional[float] = None) -> list[Line]:
    """Spent and committed per user, team, target or month (``month``: every month any cluster touched)."""
    now = time.time() if now is None else now
    if by == "month":
        return [line_for(each, clusters, each, None, now) for each in sorted({m for c in clusters for m in _months_touched(c, now)})]
    keys = {"user": lambda c: users[c.user_id].name, "team": lambda c: teams[users[c.user_id].team_id].name,
            "target": lambda c: c.provider}[by]
    budgets = {"user": {u.name: budget_of(u) for u in users.values()}, "team": {t.name: budget_of(t) for t in teams.values()}}.get(by, {})
    groups: dict[str, list[Cluster]] = {}
    for c in clusters:
        groups.setdefault(keys(c), []).append(c)
    return [line_for(key, members, month, budgets.get(key), now) for key, members in sorted(groups.items())]


def _months_touched(cluster: Cluster, now: float) -> set[str]:
    until = cluster.ended if cluster.ended is not None else now
    months, at = set(), cluster.created
    while at <= until:
        months.add(month_of(at))
        _, end = month_bounds(month_of(at))
        at = end
    months.add(month_of(until))
    return months
