"""Teams, users and their API tokens: what ``burst server admin`` manages and every request is checked against.

A token is shown once, when it is made; the database keeps only its SHA-256. A request's token
names its user; a missing, unknown, revoked or expired token is refused alike (401), so that a
caller learns nothing about which tokens exist."""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Optional

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..errors import BurstError
from ..home.state import check_name
from .database import ROLES, Team, Token, User, WebSession

TOKEN_PREFIX = "burst_"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def add_team(db: Session, name: str, monthly_budget_usd: Optional[float] = None) -> Team:
    check_name(name, "team")
    if db.scalar(select(Team).where(Team.name == name)) is not None:
        raise BurstError(f"team {name!r} exists already; `burst server admin budget {name} --usd N` changes its budget")
    team = Team(name=name, monthly_budget_usd=_budget(monthly_budget_usd), created=time.time())
    db.add(team)
    db.commit()
    return team


def add_user(db: Session, name: str, team: str, role: str = "member", monthly_budget_usd: Optional[float] = None) -> User:
    check_name(name, "user")
    if role not in ROLES:
        raise BurstError(f"role {role!r} is not one of {', '.join(ROLES)}")
    owner = team_named(db, team)
    if db.scalar(select(User).where(User.name == name)) is not None:
        raise BurstError(f"user {name!r} exists already; `burst server admin token {name}` gives them a new token")
    user = User(name=name, team_id=owner.id, role=role, uid=secrets.token_hex(4), monthly_budget_usd=_budget(monthly_budget_usd),
                created=time.time())
    db.add(user)
    db.commit()
    return user


def set_budget(db: Session, team: str, usd: Optional[float], user: Optional[str] = None) -> None:
    """A new budget; a team (or user) the guard stopped at its old one may spend again."""
    holder = user_named(db, user) if user is not None else team_named(db, team)
    holder.monthly_budget_usd = _budget(usd)
    holder.held_month = None
    db.commit()


def new_token(db: Session, user: str, days: Optional[float] = None) -> str:
    """A new API token for ``user``, valid for ``days`` (None: until revoked); returned once, kept only as a hash."""
    owner = user_named(db, user)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = time.time()
    db.add(Token(user_id=owner.id, digest=digest(token), created=now, expires=now + days * 86400 if days else None))
    db.commit()
    return token


def revoke_tokens(db: Session, user: str) -> int:
    owner = user_named(db, user)
    tokens = db.scalars(select(Token).where(Token.user_id == owner.id, Token.revoked.is_(None))).all()
    for token in tokens:
        token.revoked = time.time()
    db.commit()
    return len(tokens)


def valid_token(db: Session, token: Optional[str]) -> Optional[Token]:
    """The token's row while it lets its bearer in (known, not revoked, not expired), else None."""
    if not token:
        return None
    return _usable(db.scalar(select(Token).where(Token.digest == digest(token))))


def _usable(found: Optional[Token]) -> Optional[Token]:
    if found is None or found.revoked is not None or (found.expires is not None and found.expires < time.time()):
        return None
    return found


def authenticate(db: Session, token: Optional[str]) -> Optional[User]:
    """The user a token names, or None for any token that does not let its bearer in."""
    found = valid_token(db, token)
    return None if found is None else db.get(User, found.user_id)


WEB_SESSION_S = 12 * 3600  # a browser signs in again after a working day


def open_web_session(db: Session, token: Optional[str]) -> Optional[tuple[str, WebSession]]:
    """A browser session for the bearer of ``token``: the cookie's value (returned once, kept as a
    hash) and its row (with its CSRF secret); None for a token that does not let its bearer in."""
    found = valid_token(db, token)
    if found is None:
        return None
    cookie = secrets.token_urlsafe(32)
    now = time.time()
    for old in db.scalars(select(WebSession).where(WebSession.expires < now)):  # ended sessions go as new ones come
        db.delete(old)
    row = WebSession(digest=digest(cookie), token_id=found.id, csrf=secrets.token_urlsafe(24), created=now, expires=now + WEB_SESSION_S)
    db.add(row)
    db.commit()
    return cookie, row


def web_session(db: Session, cookie: Optional[str]) -> Optional[tuple[User, WebSession]]:
    """The user and session a browser's cookie names while both the session and the token it was
    opened with are good; None otherwise (signed out, expired, the token revoked)."""
    if not cookie:
        return None
    row = db.scalar(select(WebSession).where(WebSession.digest == digest(cookie)))
    if row is None or row.expires < time.time():
        return None
    token = _usable(db.get(Token, row.token_id))
    return None if token is None else (db.get(User, token.user_id), row)


def close_web_session(db: Session, cookie: Optional[str]) -> None:
    if cookie:
        row = db.scalar(select(WebSession).where(WebSession.digest == digest(cookie)))
        if row is not None:
            db.delete(row)
            db.commit()


def team_named(db: Session, name: str) -> Team:
    team = db.scalar(select(Team).where(Team.name == name))
    if team is None:
        raise BurstError(f"no team {name!r}: `burst server admin team {name}` makes it")
    return team


def user_named(db: Session, name: str) -> User:
    user = db.scalar(select(User).where(User.name == name))
    if user is None:
        raise BurstError(f"no user {name!r}: `burst server admin user {name} --team TEAM` makes them")
    return user


def _budget(usd: Optional[float]) -> Optional[float]:
    if usd is not None and not (0 <= usd <= 1e8):
        raise BurstError(f"a monthly budget of {usd} USD is not allowed: give 0 to 100,000,000")
    return usd
