"""The web view of a burst server: the group's clusters, runs and money, and a plan form, as
server-rendered HTML (Jinja2) with a little plain JavaScript for a run's live part.

Signing in turns a user's API token into a session cookie (HttpOnly, SameSite=Strict, Secure under
TLS); the token itself is never put in a page, a URL or a cookie. Every action is a POST that must
carry the session's CSRF secret, after a confirmation page. What a member may see and do is what
the API lets them (``views``): their team's objects; acting on their own; another team's objects
do not exist (404)."""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import parse_qs, quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from .. import workloads
from ..errors import BurstError
from ..home.state import ClusterHandle, RunRecord
from . import accounts, limits, money, verbs, views
from .database import User, WebSession
from .guard import stop_as_member
from .money_chart import month_chart

COOKIE = "burst_session"
HERE = Path(__file__).parent
PAGES = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
PAGES.filters["when"] = lambda at: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))
LIVE_CACHE_S = 5.0   # viewers of one run within this long share one look at its cluster
RESUMABLE = ("STOPPED", "STOPPED_BUDGET", "LOST", "FAILED", "UNREACHABLE")
HEADERS = {  # no page of the view may be framed, sniffed or run a script from elsewhere
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
                               "frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "Cache-Control": "no-store"}


REFUSALS = {400: "Not understood", 401: "Signed out", 403: "Not yours", 404: "Not found", 413: "Too large", 502: "Not done"}


class SignIn(Exception):
    """No session: a page sends the browser to the sign-in form."""


def mount(app: FastAPI, sessions: sessionmaker, data_dir: Path, stoppable: Callable, secure_cookies: bool = False) -> None:
    """The view's pages and actions on ``app``; ``stoppable``: the API's rule for who may stop a cluster."""
    sign_ins = limits.SignInLimit()
    live_cache: dict[str, tuple[float, dict]] = {}
    stopping: dict[tuple[str, str], str] = {}  # (owner, cluster) -> who asked, while a stop goes on in the background
    cache_lock = threading.Lock()

    def db() -> Session:
        with sessions() as session:
            yield session

    def signed_in(request: Request, session: Session = Depends(db)) -> tuple[User, WebSession]:
        found = accounts.web_session(session, request.cookies.get(COOKIE))
        if found is None:
            raise SignIn()
        return found

    @app.exception_handler(SignIn)
    def _to_sign_in(request: Request, _exc: SignIn) -> Response:
        if request.method == "GET" and not request.url.path.endswith("/live"):
            return RedirectResponse("/signin", status_code=303, headers=HEADERS)
        return page("error.html", None, status=401, title="Signed out", message="Your session has ended: sign in again.", signed_in=False)

    @app.exception_handler(HTTPException)
    async def _refused(request: Request, exc: HTTPException) -> Response:
        """The view's refusals (403, 404, ...) as a page with its header; the API's stay JSON, as FastAPI says them."""
        if not request.url.path.startswith(("/ui/", "/signin", "/signout")):
            return await http_exception_handler(request, exc)
        who = await run_in_threadpool(_session_of, request.cookies.get(COOKIE))
        return page("error.html", who, status=exc.status_code, title=REFUSALS.get(exc.status_code, "Refused"), message=str(exc.detail),
                    signed_in=who is not None)

    def _session_of(cookie: Optional[str]):
        with sessions() as session:
            return accounts.web_session(session, cookie)

    def _open_session(token: str):
        with sessions() as session:
            return accounts.open_web_session(session, token)

    def _close_session(cookie: Optional[str]) -> None:
        with sessions() as session:
            accounts.close_web_session(session, cookie)

    def page(template: str, who: Optional[tuple[User, WebSession]], status: int = 200, **values) -> HTMLResponse:
        user, web = who if who else (None, None)
        html = PAGES.get_template(template).render(user=user, csrf=web.csrf if web else "", **values)
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    async def form_of(request: Request, web: Optional[WebSession]) -> dict[str, str]:
        """The posted form (urlencoded), its CSRF secret checked against the session's."""
        body = (await request.body())[:200_000].decode(errors="replace")
        form = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
        if web is not None and not secrets.compare_digest(form.get("csrf", ""), web.csrf):
            raise HTTPException(403, "the form's CSRF secret is missing or wrong: reload the page and try again")
        return form

    @app.get("/", include_in_schema=False)
    def root() -> Response:
        return RedirectResponse("/ui/clusters", status_code=303)

    @app.get("/signin", include_in_schema=False)
    def sign_in_form() -> HTMLResponse:
        return page("signin.html", None, title="Sign in")

    @app.post("/signin", include_in_schema=False)
    async def sign_in(request: Request) -> Response:
        if not limits.same_origin(request.headers, request.headers.get("host", "")):
            raise HTTPException(403, "a sign-in is posted from this server's own sign-in page, not from another site")
        if not sign_ins.allows(request.client.host if request.client else "?"):
            return page("signin.html", None, status=429, title="Sign in", error="Too many sign-ins from here in the last minute: "
                                                                                   "wait a minute and try again.")
        form = await form_of(request, None)
        opened = await run_in_threadpool(_open_session, form.get("token", "").strip())
        if opened is None:
            return page("signin.html", None, status=401, title="Sign in", error="That token does not let you in (unknown, revoked or "
                                                                                   "expired): ask an admin for a new one.")
        cookie, _ = opened
        response = RedirectResponse("/ui/clusters", status_code=303, headers=HEADERS)
        response.set_cookie(COOKIE, cookie, max_age=int(accounts.WEB_SESSION_S), httponly=True, samesite="strict", secure=secure_cookies,
                            path="/")
        return response

    @app.post("/signout", include_in_schema=False)
    async def sign_out(request: Request, who=Depends(signed_in)) -> Response:
        await form_of(request, who[1])
        await run_in_threadpool(_close_session, request.cookies.get(COOKIE))
        response = RedirectResponse("/signin", status_code=303, headers=HEADERS)
        response.delete_cookie(COOKIE, path="/")
        return response

    # ------------------------------------------------------------------ clusters

    @app.get("/ui/clusters", include_in_schema=False)
    def clusters_page(who=Depends(signed_in), session: Session = Depends(db)) -> HTMLResponse:
        user = who[0]
        rows = views.open_clusters(session, user, data_dir)
        people = {u.name: u for u in views.visible(session, user)}
        runs_on = {}
        for owner, record in views.runs_of(session, user, data_dir):
            if record.state == "RUNNING":
                runs_on.setdefault((owner.name, record.cluster), record)
        now = time.time()
        for row in rows:
            handle = views.member_record(data_dir, people[row["owner"]], ClusterHandle, row["name"])
            row["layout"] = _layout(handle)
            row["lease_left_s"] = row["expires"] - now if row["expires"] else None
            row["idle_minutes"] = handle.idle_minutes if handle else None
            run = runs_on.get((row["owner"], row["name"]))
            row["usage"] = run.progress.get("usage") if run else None
            row["run"] = run.run_id if run else None
            row["mine"] = views.may_act(user, people[row["owner"]])
            row["stopping"] = stopping.get((row["owner"], row["name"]))
        return page("clusters.html", who, title="Clusters", rows=rows)

    @app.get("/ui/clusters/{owner}/{name}/stop", include_in_schema=False)
    def confirm_stop(owner: str, name: str, who=Depends(signed_in), session: Session = Depends(db)) -> HTMLResponse:
        stoppable(session, who[0], owner, name)
        return page("confirm.html", who, title="Stop a cluster", action=f"/ui/clusters/{quote(owner)}/{quote(name)}/stop",
                    question=f"Stop cluster {name} of {owner}? Every run on it checkpoints first, then the cluster is taken down.",
                    button="Stop the cluster", back="/ui/clusters")

    @app.post("/ui/clusters/{owner}/{name}/stop", include_in_schema=False)
    async def stop_cluster(owner: str, name: str, request: Request, who=Depends(signed_in)) -> Response:
        await form_of(request, who[1])

        def owner_uid() -> str:
            with sessions() as session:
                return stoppable(session, who[0], owner, name).uid

        uid = await run_in_threadpool(owner_uid)
        key = (owner, name)
        if key not in stopping:
            stopping[key] = who[0].name

            def stop() -> None:
                try:
                    stop_as_member(verbs.home_of(data_dir, uid), name, f"stopped by {who[0].name} in the web view", owner=owner)
                finally:
                    stopping.pop(key, None)

            threading.Thread(target=stop, name=f"web-stop-{name}", daemon=True).start()
        return RedirectResponse("/ui/clusters", status_code=303, headers=HEADERS)

    # ------------------------------------------------------------------ runs

    def visible_run(session: Session, user: User, run_id: str) -> tuple[User, RunRecord]:
        found = views.run_of(session, user, data_dir, run_id)
        if found is None:
            raise HTTPException(404, f"no run {run_id!r}")
        return found

    def acting_on(user: User, owner: User) -> None:
        if not views.may_act(user, owner):
            raise HTTPException(403, f"the run is {owner.name}'s: only they or an admin may act on it")

    @app.get("/ui/runs", include_in_schema=False)
    def runs_page(who=Depends(signed_in), session: Session = Depends(db)) -> HTMLResponse:
        now = time.time()
        rows = [{"owner": owner.name, "record": record, "cost": _cost_so_far(record, now)} for owner, record in
                views.runs_of(session, who[0], data_dir)]
        return page("runs.html", who, title="Runs", rows=rows)

    @app.get("/ui/runs/{run_id}", include_in_schema=False)
    def run_page(run_id: str, who=Depends(signed_in), session: Session = Depends(db)) -> HTMLResponse:
        owner, record = visible_run(session, who[0], run_id)
        mine = views.may_act(who[0], owner)
        return page("run.html", who, title=f"Run {run_id}", owner=owner.name, record=record, cost=_cost_so_far(record, time.time()),
                    may_cancel=mine and record.state in ("RUNNING", "PENDING"), may_resume=mine and record.state in RESUMABLE)

    @app.get("/ui/runs/{run_id}/live", include_in_schema=False)
    def run_live(run_id: str, who=Depends(signed_in), session: Session = Depends(db)) -> JSONResponse:
        owner, record = visible_run(session, who[0], run_id)
        session.close()
        with cache_lock:
            cached = live_cache.get(run_id)
        if cached is None or time.time() - cached[0] > LIVE_CACHE_S:
            looked = views.look_at_run(verbs.home_of(data_dir, owner.uid), run_id)
            looked["cost_usd"] = round(_cost_so_far(record, time.time()), 4)
            looked["forecast_usd"] = _forecast(record, looked)
            looked["report"] = views.report_url(run_id) if looked.get("report") else None
            cached = (time.time(), looked)
            with cache_lock:
                live_cache[run_id] = cached
        return JSONResponse(cached[1], headers=HEADERS)

    @app.get("/ui/runs/{run_id}/report/{name:path}", include_in_schema=False)
    def run_report(run_id: str, name: str, who=Depends(signed_in), session: Session = Depends(db)) -> Response:
        _owner, record = visible_run(session, who[0], run_id)
        root = views.report_root(record)
        if root is None:
            raise HTTPException(404, f"run {run_id} has no report yet")
        path = (root / name).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise HTTPException(404, f"no {name!r} in run {run_id}'s report")
        return FileResponse(path, headers=HEADERS)

    @app.get("/ui/runs/{run_id}/{action}", include_in_schema=False)
    def confirm_run_action(run_id: str, action: str, who=Depends(signed_in), session: Session = Depends(db)) -> HTMLResponse:
        if action not in ("cancel", "resume"):
            raise HTTPException(404, f"no page {action!r} for a run")
        owner, record = visible_run(session, who[0], run_id)
        acting_on(who[0], owner)
        question = (f"Cancel run {run_id}? It checkpoints and stops; Resume goes on from there." if action == "cancel" else
                    f"Resume run {run_id} on cluster {record.cluster} from its last checkpoint? It is charged to {owner.name}'s team.")
        return page("confirm.html", who, title=f"{action.title()} a run", action=f"/ui/runs/{quote(run_id)}/{action}", question=question,
                    button=f"{action.title()} the run", back=f"/ui/runs/{quote(run_id)}")

    @app.post("/ui/runs/{run_id}/{action}", include_in_schema=False)
    async def run_action(run_id: str, action: str, request: Request, who=Depends(signed_in)) -> Response:
        if action not in ("cancel", "resume"):
            raise HTTPException(404, f"no action {action!r} for a run")
        await form_of(request, who[1])

        def act() -> str:  # off the event loop: the database, and a member process that may take a minute
            with sessions() as session:
                owner, record = visible_run(session, who[0], run_id)
                acting_on(who[0], owner)
            home = verbs.home_of(data_dir, owner.uid)
            if action == "cancel":
                try:
                    proc = verbs.as_member(home, ["burst.server.peek", "cancel", run_id], views.PEEK_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    return f"the run's cluster did not answer in {views.PEEK_TIMEOUT_S:.0f} s; try again"
                return (proc.stdout + proc.stderr).strip()
            # the owner's own verb, held to their team's money, in the background: it follows the run to its end
            args = [record.workload, "--resume", run_id, "--cluster", record.cluster, "--detach"]
            rc, out, err = views.run_verb(sessions, data_dir, owner, "train", args, [])
            return (out + err).strip() or f"burst train exited {rc}"

        said = await run_in_threadpool(act)
        with cache_lock:
            live_cache.pop(run_id, None)
        return page("done.html", who, title=f"{action.title()} run {run_id}", said=said, back=f"/ui/runs/{quote(run_id)}")

    # ------------------------------------------------------------------ money and plan

    @app.get("/ui/money", include_in_schema=False)
    def money_page(month: Optional[str] = None, who=Depends(signed_in), session: Session = Depends(db)) -> HTMLResponse:
        month = month or money.month_of(time.time())
        try:
            lines = views.costs_by(session, who[0], data_dir, ("team", "user", "target"), month)
        except ValueError:
            raise HTTPException(400, f"month {month!r}: give YEAR-MONTH, e.g. 2026-11") from None
        teams, by_user, by_target = lines["team"], lines["user"], lines["target"]
        return page("money.html", who, title="Money", month=month, teams=teams, by_user=by_user, by_target=by_target,
                    chart=month_chart(teams), user_chart=month_chart(by_user), target_chart=month_chart(by_target))

    @app.get("/ui/plan", include_in_schema=False)
    def plan_form(who=Depends(signed_in)) -> HTMLResponse:
        return page("plan.html", who, title="Plan", workload=workloads.DEFAULT, policy="", flags="", result=None)

    @app.post("/ui/plan", include_in_schema=False)
    async def plan(request: Request, who=Depends(signed_in)) -> HTMLResponse:
        form = await form_of(request, who[1])
        workload, policy, flags = form.get("workload", workloads.DEFAULT).strip(), form.get("policy", ""), form.get("flags", "")
        try:
            words = _flags(flags)
        except ValueError as exc:
            return page("plan.html", who, status=400, title="Plan", workload=workload, policy=policy, flags=flags, result=None, error=str(exc))
        args = [workload, *words, "--json"] + (["--policy", "@upload:0"] if policy.strip() else [])
        try:
            rc, out, err = await run_in_threadpool(views.run_verb, sessions, data_dir, who[0], "plan", args, [policy] if policy.strip() else [])
        except BurstError as exc:
            rc, out, err = 2, "", str(exc)
        result = None
        if rc == 0:
            try:
                result = json.loads(out)
            except ValueError:
                rc, err = 1, "the plan's answer was not JSON"
        return page("plan.html", who, status=200 if rc == 0 else 400, title="Plan", workload=workload, policy=policy, flags=flags,
                    result=result, error=None if rc == 0 else (err.strip() or out.strip())[-2000:])

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        path = HERE / "static" / name
        if "/" in name or not path.is_file():
            raise HTTPException(404, "no such file")
        return FileResponse(path, headers={**HEADERS, "Cache-Control": "max-age=300"})


def _layout(handle: Optional[ClusterHandle]) -> str:
    if handle is None:
        return ""
    layout = handle.layout or {}
    if layout.get("description"):
        return str(layout["description"])
    parts = [f"{layout[k]} {k if layout[k] != 1 else k[:-1]}".replace("gpu", "GPU").replace("tpu", "TPU").replace("cpu", "CPU")
             for k in ("nodes", "gpus", "tpus", "cpus") if layout.get(k)]
    if handle.accelerator:
        parts.append(handle.accelerator)
    return ", ".join(parts)


def _cost_so_far(record: RunRecord, now: float) -> float:
    return record.hourly_usd * max(0.0, (record.finished or now) - record.created) / 3600


def _forecast(record: RunRecord, looked: dict) -> Optional[float]:
    """The run's cost at its last epoch, at the pace it has kept so far; None before its first epoch."""
    done = len(looked.get("epochs") or [])
    planned = looked.get("epochs_planned") or 0
    if not done or not planned or record.finished:
        return None
    return round(_cost_so_far(record, time.time()) * planned / done, 2)


def _flags(text: str) -> list[str]:
    """The plan form's flags as words; only placement options (each ``--name`` or ``--name value``), so no path on the server is named."""
    import shlex

    words = shlex.split(text)
    for word in words:
        if word.startswith("-") and not word.startswith("--"):
            raise ValueError(f"{word}: give flags in their long form (--gpus 8)")
        if word in ("--policy", "--catalog") or word.startswith(("--policy=", "--catalog=")):
            raise ValueError(f"{word}: paste the policy into the form's policy box instead")
    return words
