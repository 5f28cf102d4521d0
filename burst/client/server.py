"""This machine as a burst server's client: the login it keeps (the server's address in
``server.json``, the token alone in a user-only file), one HTTP call, every failure one line, and
``ServerClient``, the server's API from Python (``burst.api.connect``)."""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Optional

from ..errors import BurstError
from ..home.records import write_text_atomic
from ..home.state import home, home_path

LOGIN_FILE = "server.json"
TOKEN_FILE = "server.token"
TIMEOUT_S = 6 * 3600 + 60  # a forwarded `burst run` lasts as long as its run


@dataclass
class Login:
    url: str
    token: str
    ca_file: Optional[str] = None


def current() -> Optional[Login]:
    """The server this machine is logged in to, or None (burst works here, as without a server)."""
    root = home_path()
    try:
        saved = json.loads((root / LOGIN_FILE).read_text())
        token = (root / TOKEN_FILE).read_text().strip()
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or not isinstance(saved.get("url"), str) or not token:
        return None
    return Login(saved["url"].rstrip("/"), token, saved.get("ca_file"))


def login(url: str, token: str, ca_file: Optional[str] = None) -> dict:
    """Check ``token`` against the server at ``url`` and keep both; returns who the server says it is."""
    if not url.startswith(("http://", "https://")):
        raise BurstError(f"{url!r} is not a server address: give http://HOST:PORT or https://HOST:PORT")
    candidate = Login(url.rstrip("/"), token.strip(), ca_file)
    me = call(candidate, "GET", "/v1/me")
    root = home()
    write_text_atomic(root / TOKEN_FILE, candidate.token + "\n", private=True)
    write_text_atomic(root / LOGIN_FILE, json.dumps({"url": candidate.url, "ca_file": ca_file}), private=True)
    return me


def logout() -> bool:
    root = home_path()
    found = (root / TOKEN_FILE).exists() or (root / LOGIN_FILE).exists()
    for name in (TOKEN_FILE, LOGIN_FILE):
        (root / name).unlink(missing_ok=True)
    return found


class _KeepsTheToken(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: urllib would send the token (``Authorization``) to wherever it
    points, another host included; the answer is said as the server gave it."""

    def redirect_request(self, *args, **kwargs):
        return None


def call(login: Login, method: str, path: str, body: Optional[dict] = None, timeout: float = TIMEOUT_S) -> dict:
    """One request to the server, its JSON answer; a refusal, an error or no answer is one line."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(login.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {login.token}", "Content-Type": "application/json"})
    context = ssl.create_default_context(cafile=login.ca_file) if login.url.startswith("https://") else None
    opener = urllib.request.build_opener(_KeepsTheToken, urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=timeout) as answer:
            return json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = _detail(exc)
        if exc.code == 401:
            raise BurstError(f"the burst server at {login.url} refused the token ({detail}): ask an admin for a new one and "
                             "`burst login URL` again", exit_code=1) from None
        if 300 <= exc.code < 400:
            raise BurstError(f"the burst server at {login.url} answered a redirect ({exc.code}) to {exc.headers.get('Location', '?')}: "
                             "burst does not send your token on to another address; `burst login` the server's own", exit_code=1) from None
        raise BurstError(f"the burst server at {login.url} answered {exc.code}: {detail}", exit_code=1) from None
    except (http.client.HTTPException, ConnectionError) as exc:
        # sent, then no answer: the server (or the way to it) died while it ran the request, which
        # for a forwarded `burst run` may be hours in; what it started goes on there without it
        raise BurstError(f"the burst server at {login.url} went away before it answered ({exc.__class__.__name__}: {exc}); what it "
                         "had started runs on there (a managed run's controller starts again with the server): `burst status` "
                         "once it answers", exit_code=1) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise BurstError(f"the burst server at {login.url} cannot be reached ({why}): start it, or `burst logout` to work on this "
                         "machine alone", exit_code=1) from None


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        said = json.loads(exc.read() or b"{}").get("detail")
    except (ValueError, AttributeError):
        said = None
    return str(said) if said else exc.reason



@dataclass
class VerbResult:
    """What a verb run on the server as its member said: its exit code and its output."""
    rc: int
    stdout: str
    stderr: str

    def json(self):
        """The output of a ``--json`` verb, read back; ``BurstError`` when the verb failed."""
        if self.rc != 0:
            raise BurstError((self.stderr.strip().splitlines() or [f"the verb exited {self.rc}"])[-1], exit_code=self.rc)
        return json.loads(self.stdout)


class ServerClient:
    """A burst server from Python, as a member (or an admin) with their token: who they are, their
    team's clusters, runs and money, and any verb the server runs for them. Each call is one
    request; a refusal (a bad token, another team's object, a budget spent) is ``BurstError``."""

    def __init__(self, url: str, token: str, ca_file: Optional[str] = None):
        if not url.startswith(("http://", "https://")):
            raise BurstError(f"{url!r} is not a server address: give http://HOST:PORT or https://HOST:PORT")
        self.login = Login(url.rstrip("/"), token.strip(), ca_file)

    def me(self) -> dict:
        return call(self.login, "GET", "/v1/me")

    def clusters(self) -> list[dict]:
        """The running clusters the member sees, each with its owner, price and what it cost this month."""
        return call(self.login, "GET", "/v1/clusters")

    def costs(self, by: str = "team", month: Optional[str] = None) -> dict:
        """The month's spent, committed and left, by team, user, target or month (``burst costs --json``)."""
        from urllib.parse import urlencode

        query = urlencode({"by": by, **({"month": month} if month else {})})
        return call(self.login, "GET", f"/v1/costs?{query}")

    def run(self, run_id: str) -> dict:
        """A run's state and the web view's address of its report."""
        from urllib.parse import quote

        return call(self.login, "GET", f"/v1/runs/{quote(run_id, safe='')}")

    def stop(self, owner: str, cluster: str) -> dict:
        """Stop a cluster (every run on it checkpoints first): the member's own, or anyone's for an admin."""
        from urllib.parse import quote

        return call(self.login, "DELETE", f"/v1/clusters/{quote(owner, safe='')}/{quote(cluster, safe='')}")

    def verb(self, name: str, *args: str, files: tuple[str, ...] = ()) -> VerbResult:
        """``burst NAME ARGS`` run on the server as the member, held to their team's money; ``files``:
        the texts ``@upload:N`` in ``args`` stands for (a policy, a gate)."""
        answer = call(self.login, "POST", f"/v1/verbs/{name}", {"args": list(args), "files": list(files)})
        return VerbResult(int(answer.get("rc", 1)), answer.get("stdout", ""), answer.get("stderr", ""))
