"""``burst server start``: open (and upgrade) the database, start the team budget guard, answer HTTP.

Beyond loopback the server speaks only TLS (a certificate and its key), unless told in so many
words that the network in between is trusted: tokens travel in every request."""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from pathlib import Path
from typing import Optional

from ..errors import BurstError
from . import database
from ..unattended import run_lock
from .guard import Leadership, RunKeeper, TeamGuard, revive_members
from .verbs import UPLOADS_KEPT_DAYS, VERB_TIMEOUT_S, sweep_uploads
from .views import release_dead_reservations

DEFAULT_PORT = 8467
# a server asked to stop waits this long for the requests it is answering, then closes them: a forwarded
# `burst run` holds one for the run's length, and what it started runs on without the server
STOP_GRACE_S = 10


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_db(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'burst-server.db'}"


def open_database(url: str, engine=None):
    """An engine on ``url`` (or the one given for it), upgraded to the newest schema, and its session factory."""
    engine = engine if engine is not None else database.engine_for(url)
    database.upgrade(engine)
    return engine, database.sessions(engine)


def _same_group(sessions, data_dir: Path, url: str) -> None:
    """Refuse to start on a database that is not this data directory's: members' state there and no
    user in the database (an environment file that was not read leaves --db at its SQLite default)."""
    from sqlalchemy import func, select

    members = [p for p in (data_dir / "users").glob("*") if p.is_dir()]
    if not members:
        return
    with sessions() as session:
        users = session.scalar(select(func.count()).select_from(database.User))
    if not users:
        raise BurstError(f"{data_dir} holds {len(members)} members' state but database {database.redacted(url)} has no users: "
                         "this is not the group's database (is BURST_SERVER_DB set? the environment file may not have been read); "
                         "give --db the group's database")


def start(data_dir: Path, db_url: Optional[str] = None, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          cert: Optional[Path] = None, key: Optional[Path] = None, insecure_http: bool = False, guard_seconds: float = 5.0,
          stop_timeout_s: Optional[float] = None, behind_tls_proxy: bool = False, lock_db: Optional[str] = None) -> None:
    import uvicorn

    from .app import build

    if not is_loopback(host) and cert is None and not insecure_http:
        raise BurstError(f"--host {host} listens beyond this machine, where tokens would cross the network in clear: give --cert and "
                         "--key (TLS), or --insecure-http if the network in between is trusted")
    if (cert is None) != (key is None):
        raise BurstError("--cert and --key go together: the certificate and its private key")
    for path in (cert, key):
        if path is not None and not Path(path).is_file():
            raise BurstError(f"{path}: no such file (TLS needs the certificate and its key as PEM files)")
    url = db_url or default_db(data_dir)
    engine = database.engine_for(url)  # a malformed URL is said before anything is made
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    engine, sessions = open_database(url, engine)
    _same_group(sessions, data_dir, url)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    swept = sweep_uploads(data_dir)
    if swept:
        logging.getLogger("burst.server").warning("removed %d members' uploads older than %d days", swept, UPLOADS_KEPT_DAYS)
    freed = release_dead_reservations(sessions, VERB_TIMEOUT_S)
    if freed:
        logging.getLogger("burst.server").warning("released %d reservations of verbs a stopped server left", freed)
    os.environ.pop(run_lock.ENV, None)
    if engine.dialect.name == "postgresql":  # what the controllers it starts for members hold their runs with: never its own role
        lock_url = run_lock.lock_role_url(engine, data_dir, lock_db)
        if lock_url is not None:
            os.environ[run_lock.ENV] = lock_url
        else:
            logging.getLogger("burst.server").warning(
                "the database role may not create the members' run-lock role: managed runs are held by file locks alone, which do not hold "
                "across machines; create a role that may only connect (CREATE ROLE %s LOGIN PASSWORD '...'; GRANT CONNECT ON DATABASE ... "
                "TO %s) and give its URL as --lock-db", run_lock.LOCK_ROLE, run_lock.LOCK_ROLE)
    guard = TeamGuard(sessions, data_dir, interval_s=guard_seconds, leadership=Leadership(engine),
                      keeper=RunKeeper(sessions, data_dir, engine), stop_timeout_s=stop_timeout_s)
    guard.start()
    threading.Thread(target=revive_members, args=(sessions, data_dir), name="revive-members", daemon=True).start()
    scheme = "https" if cert else "http"
    logging.getLogger("burst.server").warning("burst server on %s://%s:%d, database %s, data in %s", scheme, host, port,
                                               database.redacted(db_url or default_db(data_dir)), data_dir)
    try:
        uvicorn.run(build(sessions, data_dir, secure_cookies=cert is not None or behind_tls_proxy), host=host, port=port, ssl_certfile=str(cert) if cert else None,
                    ssl_keyfile=str(key) if key else None, log_level="warning", timeout_graceful_shutdown=STOP_GRACE_S)
    finally:
        guard.close()
