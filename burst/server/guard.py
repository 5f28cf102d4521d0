"""The team budget guard: one loop in the server that charges every member's clusters against their
team's (and their own) month and stops them, checkpoint first, before the money is spent.

It acts while a reserve is left, as a run's own guard does: each open cluster's price for the time
a final checkpoint and a tear-down take. A cluster it stops is marked ``stopped_by`` so that one
stop is under way at a time; its end is the journal's, when the member's state directory says it
went. A stop that has not finished in ``STOP_TIMEOUT_S`` is ended and tried again, and a marked
cluster with no stop of this server under way (a server killed in the middle of one) is stopped
again at the next look."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker

from ..lifecycle.budget import CHECKPOINT_RESERVE_S, teardown_seconds
from ..unattended import run_lock
from . import ledger, money
from .database import Cluster, Team, User
from .verbs import as_member, home_of, member_env

log = logging.getLogger("burst.server")


def reserve_usd(open_clusters: list[Cluster]) -> float:
    return sum(c.hourly_usd * (CHECKPOINT_RESERVE_S + teardown_seconds(c.provider)) / 3600 for c in open_clusters)


#: how long a guard's stop may take: the runs' final checkpoint, then the slowest tear-down (a cloud
#: stack's destroy), with room; past it the stopper is ended and the next look tries again
STOP_TIMEOUT_S = CHECKPOINT_RESERVE_S + 30 * 60
GUARD_LOCK = 0x6275727374  # "burst": the PostgreSQL advisory lock the guarding server holds


class Leadership:
    """Which of the servers on one database guards the money: the one holding a PostgreSQL advisory
    lock on a connection of its own. A server that dies loses its connection, so the lock, and the
    next look of another server takes it (SQLite: one server per database file; it always guards)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._own: Optional[Engine] = None
        self._connection = None

    def held(self) -> bool:
        if self.engine.dialect.name != "postgresql":
            return True
        if self._connection is not None:
            try:
                self._connection.exec_driver_sql("select 1")  # autocommit: never left idle in a transaction
                return True
            except Exception:  # noqa: BLE001 - the database went away: the lock with it; try to take it again
                self._connection = None
        if self._own is None:  # as a run's lock: no pool, autocommit, keepalives (a dead server's machine frees it)
            self._own = run_lock.lock_engine(self.engine.url.render_as_string(hide_password=False))
        connection = self._own.connect()
        run_lock.keep_alive(connection)
        if connection.exec_driver_sql(f"select pg_try_advisory_lock({GUARD_LOCK})").scalar():
            self._connection = connection
            return True
        connection.close()
        return False

    def release(self) -> None:
        """Let the lock go now (a server that stops): another server guards from its next look."""
        if self._connection is not None:
            try:
                self._connection.close()
            finally:
                self._connection = None


class RunKeeper:
    """The leading server's look at every member's unfinished managed runs: a run whose controller is
    gone (its lock in the group's database free, ``burst.unattended.run_lock``, and no controller of
    this machine holding its file lock or starting) gets one again, as the member's `burst status`
    would start it. A server that died with its controllers on another machine loses no run: the
    server left takes them over within a look, and the lock keeps two controllers off one run."""

    REVIVE_AGAIN_S = 30.0  # a controller that ends at once (its database away) is not started again at every look
    # a record written this recently belongs to a run being handed over, or to a controller still starting (on
    # another machine, where its process id says nothing) that has not taken its locks yet: left for a later look
    STARTING_S = 15.0

    def __init__(self, sessions: sessionmaker, data_dir: Path, engine: Engine):
        self.sessions, self.data_dir, self.engine = sessions, data_dir, engine
        self._revived: dict[str, float] = {}  # run id: when this server last started its controller

    def look(self, now: Optional[float] = None) -> list[str]:
        """One look at every member's unfinished managed runs; returns what it started."""
        import json

        from ..unattended.managed import is_controller, lock_held

        now = time.time() if now is None else now
        with self.sessions() as db:
            members = [(u.name, u.uid) for u in db.scalars(select(User))]
        said = []
        for name, uid in members:
            managed = self.data_dir / "users" / uid / "managed"
            for record in sorted(managed.glob("*.json")) if managed.is_dir() else []:
                run_id = record.stem
                if record.name.endswith(".policy.json") or now - self._revived.get(run_id, 0.0) < self.REVIVE_AGAIN_S:
                    continue
                try:
                    if now - record.stat().st_mtime < self.STARTING_S:
                        continue
                    m = json.loads(record.read_text())
                except (OSError, ValueError):  # being written, or damaged: `burst status` says which to the member
                    continue
                if m.get("phase") == "finished" or self._held_in_database(run_id):
                    continue
                if lock_held(managed / f"{run_id}.lock") or is_controller(m.get("controller_pid")):
                    continue
                self._revived[run_id] = now
                proc = as_member(managed.parent, ["burst.server.act", "revive", run_id], timeout=120)
                said += [f"{name}: {line} (its controller was gone; this server took the run over)" for line in proc.stdout.splitlines()]
                if proc.returncode:
                    said.append(f"{name}: the controller of managed run {run_id} could not be started again: "
                                f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        return said

    def _held_in_database(self, run_id: str) -> bool:
        if self.engine.dialect.name != "postgresql":
            return False  # SQLite: one server, one machine; the file lock decides
        with self.engine.connect() as connection:
            return not run_lock.free(connection, run_id)


class TeamGuard:
    """The money's guard, and the runs' keeper, in the one server of a database that leads."""

    def __init__(self, sessions: sessionmaker, data_dir: Path, interval_s: float = 5.0,
                 stopper: Optional[Callable[..., bool]] = None, leadership: Optional[Leadership] = None,
                 keeper: Optional[RunKeeper] = None, stop_timeout_s: Optional[float] = None):
        self.sessions, self.data_dir, self.interval_s = sessions, data_dir, interval_s
        self.stopper = stopper or stop_as_member
        self.stop_timeout_s = STOP_TIMEOUT_S if stop_timeout_s is None else stop_timeout_s
        self._under_way: set[int] = set()  # the clusters this server's stoppers are taking down now
        self._under_way_lock = threading.Lock()
        self.leadership = leadership
        self.keeper = keeper
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._guarding: Optional[bool] = None
        self._said: set[str] = set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="team-budget-guard", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                guarding = self.leadership is None or self.leadership.held()
                if guarding != self._guarding:
                    self._guarding = guarding
                    log.warning("the team budget guard runs in this server" if guarding else
                                "the team budget guard runs in another server on this database; this one takes over if it stops")
                if not guarding:
                    continue
                for line in self.look() + (self.keeper.look() if self.keeper is not None else []):
                    log.warning(line)
            except Exception:  # noqa: BLE001 - a guard that died would leave every team unguarded: said, and looked again
                log.exception("the team budget guard's look failed; trying again")
        if self.leadership is not None:  # closed: another server guards from its next look (in this thread, which uses it)
            self.leadership.release()

    def look(self, now: Optional[float] = None) -> list[str]:
        """One look at every team and member; returns what it did."""
        now = time.time() if now is None else now
        month = money.month_of(now)
        said = []
        with self.sessions() as db:
            users = db.scalars(select(User)).all()
            open_by_user = {u.id: ledger.sync(db, u, home_of(self.data_dir, u.uid)) for u in users}
            everyone = db.scalars(select(Cluster)).all()
            for team in db.scalars(select(Team)).all():
                members = [u for u in users if u.team_id == team.id]
                if team.monthly_budget_usd is not None:
                    mine = [c for c in everyone if any(c.user_id == u.id for u in members)]
                    said += self._hold(db, team, f"team {team.name}", money.team_month(team, mine, month, now),
                                       [c for u in members for c in open_by_user[u.id]], users, month)
                for user in members:
                    if user.monthly_budget_usd is not None:
                        said += self._hold(db, user, f"user {user.name}", money.user_month(user, everyone, month, now),
                                           open_by_user[user.id], users, month)
        return said

    def _hold(self, db, holder, whose: str, line: money.Line, open_clusters: list[Cluster], users: list[User], month: str) -> list[str]:
        """Stop every running cluster of ``holder`` (a team or a user) once its spending and the reserve reach its budget;
        the holder spends nothing more this month until its budget changes."""
        budget = money.budget_of(holder)
        damage = money.damaged_budget(holder)
        if damage and damage not in self._said:  # once, not at every look
            self._said.add(damage)
            log.warning(damage)
        running = [c for c in open_clusters if c.stopped_by is None]
        with self._under_way_lock:  # marked, and no stop of this server under way: one that a stopped server left, or that failed
            stalled = [c for c in open_clusters if c.stopped_by is not None and c.id not in self._under_way]
        if line.spent_usd + reserve_usd(running) < budget:
            return []
        if holder.held_month != month:
            holder.held_month = month
            db.commit()
        said = []
        reason = f"{whose}'s budget of ${budget:,.2f} this month: ${line.spent_usd:,.2f} spent"
        for cluster in running + stalled:
            owner = next(u for u in users if u.id == cluster.user_id)
            again = cluster.stopped_by is not None
            cluster.stopped_by = cluster.stopped_by or reason[:200]
            db.commit()
            said.append(f"stopping {owner.name}'s cluster {cluster.name} ({cluster.provider}) "
                        f"{'again (its stop had not finished)' if again else ''}: {reason}".replace(" :", ":"))
            with self._under_way_lock:
                self._under_way.add(cluster.id)
            threading.Thread(target=self._stop_one, args=(cluster.id, home_of(self.data_dir, owner.uid), cluster.name, reason, owner.name),
                             daemon=True).start()
        return said

    def _stop_one(self, row_id: int, home: Path, name: str, reason: str, owner: str) -> None:
        """Stop one cluster; one that could not be stopped in time is unmarked, so that the next look tries again."""
        try:
            if self.stopper(home, name, reason, owner=owner, timeout=self.stop_timeout_s):
                return
            with self.sessions() as db:
                row = db.get(Cluster, row_id)
                if row is not None and row.ended is None:
                    row.stopped_by = None
                    db.commit()
        finally:
            with self._under_way_lock:
                self._under_way.discard(row_id)


def stop_as_member(home: Path, name: str, reason: str, owner: str = "", timeout: Optional[float] = STOP_TIMEOUT_S) -> bool:
    """``burst.server.act stop`` as the member (their state directory), its words in the server's log
    under ``OWNER/NAME``; True when it is down. One that has not finished in ``timeout`` is ended
    (interrupted first, so that the tear-down it is in can finish) and counts as not down."""
    who = f"{owner}/{name}" if owner else name
    try:
        proc = as_member(home, ["burst.server.act", "stop", name, reason], timeout)
    except subprocess.TimeoutExpired as late:
        for line in ((late.output or "") + (late.stderr or "")).splitlines():
            log.warning("%s: %s", who, line)
        log.warning("%s: the stop did not finish in %.0f s and was ended (interrupted, then terminated, then killed); "
                    "the guard's next look tries again", who, timeout)
        return False
    for line in (proc.stdout + proc.stderr).splitlines():
        log.warning("%s: %s", who, line)
    return proc.returncode == 0


def revive_members(sessions: sessionmaker, data_dir: Path) -> list[str]:
    """At the server's start: every member's unattended processes that a stopped server machine left
    dead (a managed run's controller, a cluster's watcher) started again, as ``burst status`` does
    for one person (run as each member). Returns what was revived, also in the server's log."""
    import json

    with sessions() as db:
        members = [(u.name, u.uid) for u in db.scalars(select(User))]
    said = []
    for name, uid in members:
        home = home_of(data_dir, uid)
        if not any((home / kind).exists() for kind in ("clusters", "managed")):
            continue
        proc = subprocess.run([sys.executable, "-m", "burst.cli", "status", "--json"], capture_output=True, text=True, env=member_env(home),
                              stdin=subprocess.DEVNULL, timeout=300, cwd=home)
        try:
            status = json.loads(proc.stdout)
        except ValueError:
            said.append(f"{name}: `burst status` could not be read ({proc.stderr.strip()[-300:]})")
            continue
        said += [f"{name}: the controller of managed run {run_id} started again" for run_id in status.get("revived", [])]
        said += [f"{name}: the watcher of cluster {cluster} started again" for cluster in status.get("revived_watchers", [])]
    for line in said:
        log.warning(line)
    return said

