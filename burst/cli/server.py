"""``burst server`` (start, admin), ``burst login``, ``logout``, ``costs`` and ``team``: burst for a group."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from ..errors import BurstError
from .render import console, emit_json, out

server_app = typer.Typer(no_args_is_help=True, help="a burst server for a research group: users, teams, budgets, runs in one place")
admin_app = typer.Typer(no_args_is_help=True, help="teams, users, tokens and budgets, in the server's database")
deploy_app = typer.Typer(no_args_is_help=True, help="the server as a group installs it: a systemd unit, a container image, Kubernetes manifests")
server_app.add_typer(admin_app, name="admin")
server_app.add_typer(deploy_app, name="deploy")

DataDir = Annotated[Path, typer.Option("--data", help="the server's directory: members' state, the default SQLite database",
                                       envvar="BURST_SERVER_DATA")]
DbUrl = Annotated[Optional[str], typer.Option("--db", help="postgresql+psycopg://USER@HOST/DB (a group) or sqlite:///PATH (default: "
                                                          "DATA/burst-server.db)", envvar="BURST_SERVER_DB")]
DEFAULT_DATA = Path("~/.burst-server").expanduser()


@server_app.command("start")
def start(
    data: DataDir = DEFAULT_DATA,
    db: DbUrl = None,
    host: Annotated[str, typer.Option(help="address to listen on (beyond loopback: --cert and --key, or --insecure-http)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8467,
    cert: Annotated[Optional[Path], typer.Option(help="TLS certificate (PEM)")] = None,
    key: Annotated[Optional[Path], typer.Option(help="TLS private key (PEM)")] = None,
    insecure_http: Annotated[bool, typer.Option("--insecure-http", help="listen beyond loopback without TLS (a trusted network only)")] = False,
    guard_seconds: Annotated[float, typer.Option(min=0.5, max=3600, help="how often the team budget guard looks at every cluster")] = 5.0,
    stop_timeout: Annotated[Optional[float], typer.Option(min=1, max=86400, help="seconds a guard's stop of a cluster may take before it is "
                                                          "ended and tried again (default: the checkpoint reserve and 30 minutes)")] = None,
    behind_tls_proxy: Annotated[bool, typer.Option("--behind-tls-proxy", help="members reach the server through a TLS proxy you run: "
                                                   "its cookies are Secure and browsers are told to keep to HTTPS")] = False,
    lock_db: Annotated[Optional[str], typer.Option("--lock-db", envvar="BURST_SERVER_LOCK_DB", help="PostgreSQL: the URL of a role that may "
                                                   "only connect, which members' managed runs hold their locks with (default: one the "
                                                   "server makes, if its role may create roles)")] = None,
) -> None:
    """Run the server in the foreground: the HTTP API and the team budget guard."""
    from ..server import serve

    serve.start(data.expanduser(), db, host, port, cert, key, insecure_http, guard_seconds, stop_timeout, behind_tls_proxy, lock_db)


def _sessions(data: Path, db: Optional[str]):
    from ..server import serve

    data = data.expanduser()
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    return serve.open_database(db or serve.default_db(data))[1]


@admin_app.command("team")
def admin_team(name: str, data: DataDir = DEFAULT_DATA, db: DbUrl = None,
               budget: Annotated[Optional[float], typer.Option("--budget", help="USD a month for the whole team")] = None) -> None:
    """Add a team."""
    from ..server import accounts

    with _sessions(data, db)() as session:
        accounts.add_team(session, name, budget)
    console.print(f"team {name} added" + (f" with ${budget:,.2f} a month" if budget is not None else " (no budget)"))


@admin_app.command("user")
def admin_user(name: str, team: Annotated[str, typer.Option("--team")], data: DataDir = DEFAULT_DATA, db: DbUrl = None,
               admin: Annotated[bool, typer.Option("--admin", help="may see and stop everything")] = False,
               budget: Annotated[Optional[float], typer.Option("--budget", help="USD a month for this user")] = None,
               days: Annotated[Optional[float], typer.Option("--days", help="the token expires after this many days")] = None) -> None:
    """Add a user to a team and print their first token (shown once: only its hash is kept)."""
    from ..server import accounts

    with _sessions(data, db)() as session:
        accounts.add_user(session, name, team, "admin" if admin else "member", budget)
        token = accounts.new_token(session, name, days)
    console.print(f"user {name} added to team {team}; their token (shown once):")
    print(token)


@admin_app.command("token")
def admin_token(name: str, data: DataDir = DEFAULT_DATA, db: DbUrl = None,
                days: Annotated[Optional[float], typer.Option("--days", help="expires after this many days")] = None) -> None:
    """A new token for a user (the old ones stay valid until revoked)."""
    from ..server import accounts

    with _sessions(data, db)() as session:
        token = accounts.new_token(session, name, days)
    print(token)


@admin_app.command("revoke")
def admin_revoke(name: str, data: DataDir = DEFAULT_DATA, db: DbUrl = None) -> None:
    """Revoke every token of a user."""
    from ..server import accounts

    with _sessions(data, db)() as session:
        count = accounts.revoke_tokens(session, name)
    console.print(f"{count} token(s) of {name} revoked")


@admin_app.command("budget")
def admin_budget(team: str, usd: Annotated[Optional[float], typer.Option("--usd", help="USD a month (omit: no budget)")] = None,
                 user: Annotated[Optional[str], typer.Option("--user", help="set this user's own budget instead")] = None,
                 data: DataDir = DEFAULT_DATA, db: DbUrl = None) -> None:
    """Set a team's (or one user's) monthly budget."""
    from ..server import accounts

    with _sessions(data, db)() as session:
        accounts.set_budget(session, team, usd, user)
    console.print(f"{'user ' + user if user else 'team ' + team}: " + (f"${usd:,.2f} a month" if usd is not None else "no budget"))


@admin_app.command("policy")
def admin_policy(file: Annotated[Optional[Path], typer.Argument(help="the site's policy YAML (omit: print the one in force)")] = None,
                 data: DataDir = DEFAULT_DATA, db: DbUrl = None) -> None:
    """Set the site's policy: the on-prem site, prices, stores and limits every member's verb is
    planned under (a member's own policy only narrows it). It is kept in DATA, which the servers of
    one group share (``--db`` is taken, as by every admin command, and not needed)."""
    from ..server import site_policy

    data = data.expanduser()
    if file is None:
        written = site_policy.path(data)
        sys.stdout.write(written.read_text() if written.is_file() else "# no site policy written: burst's packaged default is in force\n")
        return
    site_policy.write(data, file)
    console.print(f"site policy: {file} is in force for every member's verb from now on ({site_policy.path(data)})")


@admin_app.command("import")
def admin_import(name: str, source: Annotated[Path, typer.Option("--from", help="the member's burst state directory (their ~/.burst)")],
                 data: DataDir = DEFAULT_DATA, db: DbUrl = None) -> None:
    """Take a member's own ~/.burst into the server: finished runs, clusters on the group's targets, staged datasets."""
    from ..server import importing

    with _sessions(data, db)() as session:
        for line in importing.import_home(session, data.expanduser(), name, source):
            console.print(line)


@deploy_app.command("systemd")
def deploy_systemd(
    user: Annotated[str, typer.Option(help="the account the server runs as")] = "burst",
    data: Annotated[Path, typer.Option("--data", help="the server's directory on the login node")] = Path("/var/lib/burst"),
    host: str = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8467,
    cert: Annotated[Optional[Path], typer.Option(help="TLS certificate (PEM), needed beyond loopback")] = None,
    key: Annotated[Optional[Path], typer.Option(help="TLS private key (PEM)")] = None,
    env_file: Annotated[Path, typer.Option("--env-file", help="holds BURST_SERVER_DB=postgresql+psycopg://...")] = Path("/etc/burst/server.env"),
) -> None:
    """Print a systemd unit that runs the server on a login node (install as /etc/systemd/system/burst-server.service)."""
    from ..server import deploy

    print(deploy.systemd_unit(user, data, host, port, cert, key, env_file), end="")


@deploy_app.command("container")
def deploy_container() -> None:
    """Print a Containerfile for the server's image (build it beside `pip wheel --no-deps -w dist .`)."""
    from ..server import deploy

    print(deploy.containerfile(), end="")


@deploy_app.command("kubernetes")
def deploy_kubernetes(
    image: Annotated[str, typer.Option(help="the server's image, built from `burst server deploy container`")],
    namespace: str = "burst",
    db: Annotated[Optional[str], typer.Option("--db", help="PostgreSQL URL, kept in a Secret (default: SQLite on the claim, one replica)")] = None,
    storage_gi: Annotated[int, typer.Option("--storage-gi", help="the claim for the members' state")] = 20,
    tls_secret: Annotated[Optional[str], typer.Option("--tls-secret", help="a kubernetes.io/tls Secret: the server speaks TLS itself")] = None,
    replicas: Annotated[int, typer.Option(min=1, max=5, help="above 1: one guards the money, the others stand by (needs --db)")] = 1,
) -> None:
    """Print the Kubernetes manifests of the server (pipe them to `kubectl apply -f -`)."""
    from ..server import deploy

    print(deploy.as_yaml(deploy.kubernetes(namespace, image, db, storage_gi, tls_secret, replicas)), end="")


def login(url: str, token_file: Annotated[Optional[Path], typer.Option("--token-file", help="read the token from this file (default: "
                                                                                      "$BURST_TOKEN, else asked for)")] = None,
          ca_file: Annotated[Optional[Path], typer.Option("--ca-file", help="the CA that signed the server's certificate")] = None) -> None:
    """Send every command to the burst server at URL from now on (the token is kept in a user-only file)."""
    from ..client import server

    if token_file is not None:
        try:
            token = token_file.expanduser().read_text().strip()
        except OSError as exc:
            raise BurstError(f"--token-file {token_file}: {exc.strerror or exc}") from None
    else:
        token = os.environ.get("BURST_TOKEN") or typer.prompt("token", hide_input=True)
    me = server.login(url, token, str(ca_file) if ca_file else None)
    console.print(f"logged in to {url} as {me['user']} (team {me['team']}, {me['role']}); `burst logout` works on this machine again")


def logout() -> None:
    """Work on this machine alone again."""
    from ..client import server

    console.print("logged out" if server.logout() else "not logged in")


def _login():
    from ..client import server

    login = server.current()
    if login is None:
        raise BurstError("not logged in to a burst server: `burst login URL` first (costs and the team are the server's)")
    return server, login


def costs(by: Annotated[str, typer.Option("--by", help="user, team, target or month")] = "team",
          month: Annotated[Optional[str], typer.Option("--month", help="YEAR-MONTH (default: this month, UTC)")] = None,
          as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """What your team (an admin: every team) spent this month, what running clusters commit, and what is left."""
    server, login = _login()
    query = f"/v1/costs?by={by}" + (f"&month={month}" if month else "")
    answer = server.call(login, "GET", query)
    if as_json:
        emit_json(answer)
        return
    t = Table(title=f"costs in {answer['month']}, by {answer['by']}")
    for col in (answer["by"], "spent $", "committed $", "budget $", "left $"):
        t.add_column(col)
    money = lambda v: "-" if v is None else f"{v:,.2f}"  # noqa: E731
    for line in answer["lines"]:
        t.add_row(line["key"], money(line["spent_usd"]), money(line["committed_usd"]), money(line["budget_usd"]), money(line["left_usd"]))
    out.print(t)


def team(as_json: Annotated[bool, typer.Option("--json")] = False,
         stop: Annotated[Optional[str], typer.Option("--stop", help="OWNER/NAME: stop that cluster (yours; an admin: anyone's), its runs "
                                                                     "checkpointing first")] = None) -> None:
    """Your team's running clusters (an admin: everyone's), with their owners and what each has cost this month."""
    server, login = _login()
    if stop is not None:
        owner, _, name = stop.partition("/")
        if not owner or not name:
            raise BurstError(f"--stop {stop!r}: give OWNER/NAME, as `burst team` lists them")
        server.call(login, "DELETE", f"/v1/clusters/{owner}/{name}")
        console.print(f"{owner}'s cluster {name} stopped")
        return
    found = server.call(login, "GET", "/v1/clusters")
    if as_json:
        emit_json(found)
        return
    t = Table(title="the team's clusters")
    for col in ("owner", "name", "provider", "$/h", "age", "spent $", "note"):
        t.add_column(col)
    for c in found:
        t.add_row(c["owner"], c["name"], c["provider"], f"{c['hourly_usd']:.2f}", f"{int(time.time() - c['created'])} s",
                  f"{c['spent_usd']:.2f}", c["stopped_by"] or "")
    out.print(t)

