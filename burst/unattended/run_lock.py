"""A managed run's lock in the group's database, held by its controller beside its file lock.

Servers of one group on two machines share the database and the members' state (a site's shared
disk), where a file lock does not hold across machines and a process id means nothing on the
other machine. A PostgreSQL advisory lock does: it belongs to the controller's own connection, and
the database frees it when that connection ends, at once for a killed process and within
``DEAD_PEER_S`` for a machine that is gone (TCP keepalives asked of the database for this session).
So two controllers never both control one run, and a server that finds a run's lock free knows its
controller is gone wherever it ran (``burst.server.guard.RunKeeper`` then starts one).

The server hands the processes it runs for members a database role that can take advisory locks
and nothing else (``lock_role_url``: CONNECT on the database, no table of burst's granted), in
``ENV``, never its own; with SQLite (one server, one machine) there is none and the file lock
alone decides.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Callable, Optional

ENV = "BURST_RUN_LOCK_DB"
LOCK_ROLE = "burst_run_locks"  # the role members' controllers hold their runs' locks as
LOCK_URL_FILE = "run-locks.url"  # under the server's data directory: that role's URL, made once
CHECK_S = 5.0  # how often a controller makes sure its hold is still there
# the database drops a connection whose machine stopped answering after idle + interval * count seconds
KEEPALIVE = {"idle": 10, "interval": 5, "count": 3}
DEAD_PEER_S = KEEPALIVE["idle"] + KEEPALIVE["interval"] * KEEPALIVE["count"]


def key_of(run_id: str) -> int:
    """The run's advisory lock key: 64 bits of a hash of its id (PostgreSQL's bigint form)."""
    return int.from_bytes(hashlib.blake2b(f"burst-run:{run_id}".encode(), digest_size=8).digest(), "big", signed=True)


def lock_engine(url: str):
    """An engine whose connections hold advisory locks for days (a run's, the guarding server's)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    # no pool: a connection closed is closed, and its lock released; libpq's keepalives find a dead database;
    # autocommit: the connection never sits idle in a transaction for the run's days (a snapshot held open
    # keeps VACUUM from cleaning up, and a site's idle_in_transaction_session_timeout would end the hold)
    return create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT",
                         connect_args={"keepalives": 1, "keepalives_idle": KEEPALIVE["idle"],
                                       "keepalives_interval": KEEPALIVE["interval"], "keepalives_count": KEEPALIVE["count"]})


def keep_alive(connection) -> None:
    """The database's side of a holder's connection: a holder's machine that is gone frees its locks within ``DEAD_PEER_S``."""
    for name, value in KEEPALIVE.items():
        connection.exec_driver_sql(f"set tcp_keepalives_{name} = {int(value)}")


class RunLock:
    """The hold of one controller on one run, on a database connection of its own."""

    def __init__(self, url: str, run_id: str):
        self.url, self.run_id, self.key = url, run_id, key_of(run_id)
        self._engine = lock_engine(url)
        self._connection = None
        self._stop = threading.Event()

    def take(self) -> bool:
        """Hold the run; False while another connection (another server's controller) holds it.
        Raises what the database driver raises when it cannot be reached."""
        connection = self._engine.connect()
        try:
            keep_alive(connection)
            got = bool(connection.exec_driver_sql(f"select pg_try_advisory_lock({self.key})").scalar())
        except BaseException:
            connection.close()
            raise
        if not got:
            connection.close()
            return False
        self._connection = connection
        return True

    def still_held(self) -> Optional[bool]:
        """True while the hold is there, or taken again after the connection broke; False when another holds
        the run now; None when the database cannot be reached (the hold is unknown: looked at again later)."""
        if self._connection is not None:
            try:
                self._connection.exec_driver_sql("select 1")
                return True
            except Exception:  # noqa: BLE001 - the connection broke: its lock is gone with it
                try:
                    self._connection.close()
                except Exception:  # noqa: BLE001
                    pass
                self._connection = None
        try:
            return self.take()
        except Exception:  # noqa: BLE001 - the database is away: no other can take the run meanwhile through it
            return None

    def keep(self, on_lost: Callable[[], None], on_unreachable: Callable[[], None] = lambda: None) -> None:
        """Look at the hold every ``CHECK_S`` in a thread of its own; ``on_lost`` once another holds the run."""
        def loop() -> None:
            while not self._stop.wait(CHECK_S):
                held = self.still_held()
                if held is False:
                    on_lost()
                    return
                if held is None:
                    on_unreachable()

        threading.Thread(target=loop, name=f"run-lock-{self.run_id}", daemon=True).start()

    def release(self) -> None:
        self._stop.set()
        if self._connection is not None:
            try:
                self._connection.close()  # the session ends: its advisory locks with it
            finally:
                self._connection = None
        self._engine.dispose()


def free(connection, run_id: str) -> bool:
    """Whether no controller anywhere holds the run (``connection``: a SQLAlchemy connection on the
    group's PostgreSQL). The look takes the lock for its own transaction only, and lets it go."""
    got = bool(connection.exec_driver_sql(f"select pg_try_advisory_xact_lock({key_of(run_id)})").scalar())
    connection.rollback()
    return got


def lock_role_url(engine, data_dir, given: Optional[str] = None) -> Optional[str]:
    """The URL members' processes hold run locks with: ``given`` (an admin's role), else the one this
    server made before (``LOCK_URL_FILE``), else a role made now, which may connect and take
    advisory locks and is granted nothing else (it needs CREATEROLE of the server's role). None
    when none can be made: members' controllers then hold their runs by file lock alone."""
    import secrets
    from pathlib import Path

    kept = Path(data_dir) / LOCK_URL_FILE
    if given:
        return given
    if kept.is_file():
        return kept.read_text().strip()
    password = secrets.token_hex(24)  # hex: nothing in it needs quoting in the statements below
    database = engine.url.database
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            exists = connection.exec_driver_sql(f"select 1 from pg_roles where rolname = '{LOCK_ROLE}'").scalar()
            verb = "alter" if exists else "create"
            connection.exec_driver_sql(f"{verb} role {LOCK_ROLE} with login nosuperuser nocreatedb nocreaterole noinherit password '{password}'")
            connection.exec_driver_sql(f'grant connect on database "{database}" to {LOCK_ROLE}')
    except Exception:  # noqa: BLE001 - the server's role may not make roles: said by the caller
        return None
    url = engine.url.set(username=LOCK_ROLE, password=password).render_as_string(hide_password=False)
    from ..home.records import write_text_atomic

    write_text_atomic(kept, url + "\n", private=True)
    return url
