"""The server's state, in a real database through SQLAlchemy 2: PostgreSQL for a group, SQLite for
one person. The schema is Alembic's (``migrations/``): a server upgrades its database to the newest
revision before it answers, so that an older server's database is carried forward, never rebuilt."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from sqlalchemy import Float, ForeignKey, Integer, String, UniqueConstraint, create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from ..errors import BurstError

MIGRATIONS = Path(__file__).parent / "migrations"
ROLES = ("admin", "member")
MIGRATION_LOCK = 0x6275727375  # the PostgreSQL advisory lock a schema upgrade holds to its transaction's end


class Base(DeclarativeBase):
    pass


class Team(Base):
    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(40), unique=True)
    monthly_budget_usd: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    # The month (YYYY-MM) the guard stopped the team at its budget: no new spending until the budget changes or the month does.
    held_month: Mapped[Optional[str]] = mapped_column(String(7), nullable=True)
    created: Mapped[float] = mapped_column(Float, default=time.time)


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(40), unique=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"))
    role: Mapped[str] = mapped_column(String(10), default="member")
    # The user's id on shared infrastructure: part of every name the server's verbs make for them.
    uid: Mapped[str] = mapped_column(String(12), unique=True)
    monthly_budget_usd: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    held_month: Mapped[Optional[str]] = mapped_column(String(7), nullable=True)  # as a team's, for the user's own budget
    created: Mapped[float] = mapped_column(Float, default=time.time)


class Token(Base):
    """An API token: only its SHA-256 is kept (a token is 32 random bytes, so a fast hash is safe)."""
    __tablename__ = "tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created: Mapped[float] = mapped_column(Float, default=time.time)
    expires: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    revoked: Mapped[Optional[float]] = mapped_column(Float, nullable=True)


class WebSession(Base):
    """A browser signed in with a token: the cookie's SHA-256 (the cookie itself is never stored), the
    token it was opened with (revoking the token ends it), and the CSRF secret every action must echo."""
    __tablename__ = "web_sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("tokens.id"))
    csrf: Mapped[str] = mapped_column(String(64))
    created: Mapped[float] = mapped_column(Float)
    expires: Mapped[float] = mapped_column(Float)


class Cluster(Base):
    """One cluster a member brought up through the server, from its start to its end: what the
    team's money is counted from (price an hour, created, ended)."""
    __tablename__ = "clusters"
    __table_args__ = (UniqueConstraint("user_id", "cluster_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    name: Mapped[str] = mapped_column(String(40))
    cluster_id: Mapped[str] = mapped_column(String(64))
    provider: Mapped[str] = mapped_column(String(20))
    region: Mapped[str] = mapped_column(String(60), default="")
    hourly_usd: Mapped[float] = mapped_column(Float, default=0.0)
    created: Mapped[float] = mapped_column(Float)
    expires: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    ended: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    stopped_by: Mapped[Optional[str]] = mapped_column(String(200), nullable=True)


class Reservation(Base):
    """Money a verb under way may commit (``up``, ``run``, ``tune``: a cluster and its lease), held
    against its team's and member's month from before the verb starts until the member's journal
    shows a cluster it made (whose lease is then what is committed) or the verb ends; ``holder``:
    the server process that took it (``host:pid``), whose death frees it."""
    __tablename__ = "reservations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    usd: Mapped[float] = mapped_column(Float)
    created: Mapped[float] = mapped_column(Float)
    holder: Mapped[str] = mapped_column(String(120))


def engine_for(url: str) -> Engine:
    """An engine on ``url`` (``postgresql+psycopg://...`` or ``sqlite:///path``), refused in one line
    when the driver or the database cannot be reached."""
    try:
        engine = create_engine(url, pool_pre_ping=True)
    except Exception as exc:  # noqa: BLE001 - a malformed URL or a missing driver: SQLAlchemy's own words
        raise BurstError(f"database {redacted(url)}: {exc.__class__.__name__}: {str(exc).splitlines()[0]}; "
                         "give --db postgresql+psycopg://USER@HOST/DB or sqlite:///PATH") from None
    if engine.dialect.name == "sqlite":
        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(connection, _record):  # foreign keys on, and one writer waits for another
            connection.execute("PRAGMA foreign_keys=ON")
            connection.execute("PRAGMA busy_timeout=10000")
    return engine


def redacted(url: str) -> str:
    """A database URL fit for a message: its password replaced."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL at all: say so without echoing it
        return "(not a database URL)"


def upgrade(engine: Engine) -> None:
    """Bring the database to the newest schema (Alembic's ``upgrade head``), under Alembic's own
    version table; one line when the database refuses."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    try:
        with engine.begin() as connection:
            if engine.dialect.name == "postgresql":  # two servers starting at once upgrade one after the other
                connection.exec_driver_sql(f"select pg_advisory_xact_lock({MIGRATION_LOCK})")
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    except Exception as exc:  # noqa: BLE001 - the driver's error, said in one line
        raise BurstError(f"database {redacted(str(engine.url))} could not be opened or upgraded: {exc.__class__.__name__}: "
                         f"{str(exc).strip().splitlines()[0][:300]}") from None


def sessions(engine: Engine) -> sessionmaker:
    return sessionmaker(engine, expire_on_commit=False)
