"""The burst server's HTTP API (FastAPI): every request names its user by token; a member runs
verbs as themselves and sees their team's clusters and money; an admin sees and stops everything.
Another team's objects do not exist for a member (404); a missing or bad token is 401. The web
view (``web``) is served beside it, on the same rules."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote
from typing import Annotated, Optional

from fastapi import Depends, FastAPI, Header, HTTPException, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ..errors import BurstError
from ..values.served import FORWARDED, PROMETHEUS_READS, split_option
from . import accounts, ledger, limits, money, site_policy, verbs, views, web
from .database import Cluster, User
from .guard import stop_as_member


class VerbCall(BaseModel):
    args: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=200)
    files: list[Annotated[str, Field(max_length=1_000_000)]] = Field(default_factory=list, max_length=4)


_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def prometheus_read_path(path: str) -> bool:
    """Whether ``path`` (under ``/api/v1/``, decoded) is one of Prometheus' read endpoints, exactly:
    ``query``, ``series``, ... , ``label/NAME/values``, ``targets/metadata``, ``status/WHAT``; no
    empty, ``.`` or ``..`` segment, which Prometheus would clean into another endpoint."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts) or "\\" in path or "%" in path:
        return False
    if parts[0] not in PROMETHEUS_READS:
        return False
    if parts[0] == "label":
        return len(parts) == 3 and bool(_LABEL.fullmatch(parts[1])) and parts[2] == "values"
    if parts[0] == "status":
        return len(parts) == 2 and parts[1] in ("config", "flags", "runtimeinfo", "buildinfo", "tsdb", "walreplay")
    if parts[0] == "targets":
        return len(parts) == 1 or parts[1:] == ["metadata"]
    return len(parts) == 1


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as it is (Prometheus redirects a path it cleans): never followed."""

    def redirect_request(self, *args, **kwargs):
        return None


def _ask_prometheus(url: str, form: Optional[bytes], cluster: str) -> Response:
    """One request to a cluster's Prometheus on this machine's loopback: its answer as it gave it."""
    import urllib.error

    request = urllib.request.Request(url, data=form, headers={"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {})
    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=30) as answer:
            return Response(answer.read(), status_code=answer.status, media_type="application/json")
    except urllib.error.HTTPError as exc:  # a bad query: Prometheus' own answer, its status with it
        return Response(exc.read(), status_code=exc.code, media_type="application/json")
    except OSError as exc:
        raise HTTPException(502, f"cluster {cluster!r}'s Prometheus did not answer: {exc}") from None


def build(sessions: sessionmaker, data_dir: Path, secure_cookies: bool = False) -> FastAPI:
    """The API and the web view; ``secure_cookies``: the server is reached over TLS (its own, or a
    proxy's its admin names), so cookies are Secure and browsers are told to keep to HTTPS."""
    app = FastAPI(title="burst server", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(limits.BodyLimit)  # before any route, authentication included, reads a body
    if secure_cookies:
        app.add_middleware(limits.StrictTransport)

    def db() -> Session:
        with sessions() as session:
            yield session

    def user(authorization: Annotated[Optional[str], Header()] = None, session: Session = Depends(db)) -> User:
        token = authorization[7:] if authorization and authorization.lower().startswith("bearer ") else None
        found = accounts.authenticate(session, token)
        if found is None:
            raise HTTPException(401, "no valid token: a missing, unknown, revoked or expired token", headers={"WWW-Authenticate": "Bearer"})
        return found

    @app.get("/v1/me")
    def me(member: User = Depends(user), session: Session = Depends(db)) -> dict:
        return {"user": member.name, "team": views.team_of(session, member).name, "role": member.role, "uid": member.uid}

    @app.post("/v1/verbs/{verb}")
    def verb(verb: str, call: VerbCall, member: User = Depends(user), session: Session = Depends(db)) -> dict:
        if verb not in FORWARDED:
            raise HTTPException(404, f"no verb {verb!r} on this server; it runs {', '.join(FORWARDED)}")
        if verb == "monitor" and any(split_option(arg)[0] == "--port" for arg in call.args):
            raise HTTPException(400, "--port picks a port on the server's machine: a member's Prometheus takes a free one")
        session.close()  # a verb may last hours: no connection held meanwhile
        try:  # in FastAPI's thread pool: one thread per verb under way
            rc, out, err = views.run_verb(sessions, data_dir, member, verb, call.args, call.files)
        except BurstError as exc:  # refused before anything ran (a bad upload reference, a policy that says what only admins may): as the command line says it
            return {"rc": 2, "stdout": "", "stderr": f"error: {exc}\n"}
        return {"rc": rc, "stdout": out, "stderr": err}

    @app.get("/v1/site-policy")
    def site(member: User = Depends(user)) -> dict:
        """The site's policy every verb is planned under (its admins'), and what a member's own may set."""
        return {"policy": site_policy.site_document(data_dir), "yours_may_set": list(site_policy.ALLOWED)}

    @app.get("/v1/clusters")
    def clusters(member: User = Depends(user), session: Session = Depends(db)) -> list[dict]:
        return views.open_clusters(session, member, data_dir)

    @app.delete("/v1/clusters/{owner}/{name}")
    def stop_cluster(owner: str, name: str, member: User = Depends(user), session: Session = Depends(db)) -> dict:
        whose = stoppable(session, member, owner, name)
        session.close()
        if not stop_as_member(verbs.home_of(data_dir, whose.uid), name, f"stopped by {member.name}", owner=owner):
            raise HTTPException(502, f"cluster {name!r} could not be taken down: see the server's log")
        return {"stopped": name, "owner": owner}

    def stoppable(session: Session, member: User, owner: str, name: str) -> User:
        """The owner of cluster ``name`` when ``member`` may stop it: 404 for what they cannot see, 403 for a teammate's."""
        whose = views.visible_person(session, member, owner)
        row = None
        if whose is not None:
            ledger.sync(session, whose, verbs.home_of(data_dir, whose.uid))
            row = session.scalar(select(Cluster).where(Cluster.user_id == whose.id, Cluster.name == name, Cluster.ended.is_(None)))
        if row is None:
            raise HTTPException(404, f"no cluster {name!r} of {owner!r}")
        if not views.may_act(member, whose):
            raise HTTPException(403, f"cluster {name!r} is {owner}'s: only they or an admin may stop it")
        return whose

    @app.get("/v1/runs/{run_id}")
    def run(run_id: str, member: User = Depends(user), session: Session = Depends(db)) -> dict:
        """A run the member sees: its state and where the web view shows its report (collected first
        when it succeeded unfollowed, as `burst report` does); another team's run is 404."""
        found = views.run_of(session, member, data_dir, run_id)
        if found is None:
            raise HTTPException(404, f"no run {run_id!r}; `burst status` lists your runs")
        owner, record = found
        session.close()
        if views.report_root(record) is None and record.state not in ("FAILED", "LOST"):
            looked = views.look_at_run(verbs.home_of(data_dir, owner.uid), run_id)
            record = views.run_of_owner(data_dir, owner, run_id) or record
        else:
            looked = {}
        root = views.report_root(record)
        return {"run_id": run_id, "owner": owner.name, "state": looked.get("state", record.state), "message": record.message,
                "report": views.report_url(run_id) if root is not None else None}

    def monitor_of(session: Session, member: User, owner: str, name: str):
        """The running Prometheus of ``owner``'s cluster ``name``, for a member of their team (another
        team's: 404, as is a cluster with none running)."""
        from .. import monitor as prometheus

        whose = views.visible_person(session, member, owner)
        session.close()
        mon = prometheus.running(name, verbs.home_of(data_dir, whose.uid)) if whose is not None else None
        if mon is None:
            raise HTTPException(404, f"no Prometheus runs for cluster {name!r} of {owner!r}; `burst monitor {name}` (its owner) starts one")
        return mon

    @app.api_route("/v1/monitor/{owner}/{name}/api/v1/{path:path}", methods=["GET", "POST"])
    async def prometheus_read(owner: str, name: str, path: str, request: Request, member: User = Depends(user),
                              session: Session = Depends(db)) -> Response:
        """Prometheus' read API (``burst monitor`` through this server) passed on to the cluster's
        Prometheus, which listens on the server's loopback only: queries, series, labels, metadata,
        targets; never its admin or write API. POST too, with its form (Grafana's default method)."""
        import asyncio

        if not prometheus_read_path(path):
            raise HTTPException(404, f"/api/v1/{path}: only Prometheus' read API is passed on ({', '.join(PROMETHEUS_READS)})")
        mon = await asyncio.to_thread(monitor_of, session, member, owner, name)
        url = f"{mon.url}/api/v1/{quote(path, safe='/')}" + (f"?{request.url.query}" if request.url.query else "")
        form = await request.body() if request.method == "POST" else None
        return await asyncio.to_thread(_ask_prometheus, url, form, name)

    @app.get("/v1/monitor/{owner}/{name}/dashboards/{file}")
    def prometheus_dashboard(owner: str, name: str, file: str, member: User = Depends(user), session: Session = Depends(db)) -> Response:
        """A Grafana dashboard of the cluster's monitor (burst's, Ray's), to import with the read API as its data source."""
        mon = monitor_of(session, member, owner, name)
        found = [Path(p) for p in mon.dashboards if Path(p).name == file]
        if not found or not found[0].is_file():
            raise HTTPException(404, f"no dashboard {file!r} for cluster {name!r}")
        return Response(found[0].read_bytes(), media_type="application/json")

    @app.get("/v1/costs")
    def costs(by: str = "team", month: Optional[str] = None, member: User = Depends(user), session: Session = Depends(db)) -> dict:
        if by not in money.GROUPINGS:
            raise HTTPException(400, f"--by {by!r}: one of {', '.join(money.GROUPINGS)}")
        month = month or money.month_of(time.time())
        try:
            lines = views.costs(session, member, data_dir, by, month)
        except ValueError:
            raise HTTPException(400, f"--month {month!r}: give YEAR-MONTH, e.g. 2026-11") from None
        return {"month": month, "by": by, "lines": [line.as_dict() for line in lines]}

    web.mount(app, sessions, data_dir, stoppable, secure_cookies)
    return app
