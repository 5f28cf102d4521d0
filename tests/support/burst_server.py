"""A real burst server for the tests: ``burst server start`` in a process group of its own on a free
loopback port, its accounts made by ``burst server admin``, and a JSON client for its API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from burst.runtime.ray_head import free_port


class Server:
    """One ``burst server`` on ``db`` (None: its default SQLite) with its data under ``root``."""

    def __init__(self, root: Path, db: Optional[str] = None, name: str = "server"):
        self.root, self.db, self.port = root, db, free_port()
        self.data = root / "server-data"  # two servers of one group share it (a site's shared disk) as they share the database
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / f"{name}.log"
        self.proc = None

    def _db(self) -> list[str]:
        return ["--db", self.db] if self.db else []  # none: SQLite in the server's directory, one person's default

    def admin(self, *args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "burst.cli", "server", "admin", *args, *self._db(), "--data", str(self.data)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    def start(self, guard_seconds: float = 1.0, env: dict | None = None, *extra: str) -> "Server":
        said = len(self.log.read_text()) if self.log.exists() else 0
        self.proc = subprocess.Popen([sys.executable, "-m", "burst.cli", "server", "start", *self._db(), "--data", str(self.data),
                                      "--port", str(self.port), "--guard-seconds", str(guard_seconds), *extra],
                                     stdout=open(self.log, "a"), stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})})
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                if "address already in use" in self.log.read_text()[said:]:  # taken between free_port and the bind: another port
                    self.port = free_port()
                    self.url = f"http://127.0.0.1:{self.port}"
                    return self.start(guard_seconds, env, *extra)
                raise AssertionError(self.log.read_text())
            # its own process listening, not another test's server that took the port first (a 401 from
            # that one once passed for this one's, and every token made here was then refused)
            if self._listening() and self.http("GET", "/v1/me", None)[0] == 401:
                return self
            time.sleep(0.3)
        raise AssertionError(f"the server did not answer: {self.log.read_text()}")

    def _listening(self) -> bool:
        """This server's own process (or one it started) listens on its port."""
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            for proc in (root, *root.children(recursive=True)):
                if any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port for c in proc.net_connections(kind="inet")):
                    return True
        except psutil.Error:
            pass
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)

    def http(self, method: str, path: str, token, body=None, form: Optional[dict] = None) -> tuple[int, dict]:
        """One API request (``body`` as JSON, or ``form`` as a URL-encoded form); its status and JSON answer."""
        from urllib.parse import urlencode

        data, kind = (urlencode(form).encode(), "application/x-www-form-urlencoded") if form is not None else \
            (json.dumps(body).encode() if body is not None else None, "application/json")
        request = urllib.request.Request(self.url + path, method=method, data=data,
                                         headers={"Content-Type": kind, **({"Authorization": f"Bearer {token}"} if token else {})})
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except (urllib.error.URLError, ConnectionError):
            return 0, {}


def add_group(db_url: str, cern_budget_usd: float, names: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Team cern (alice, bob; ``cern_budget_usd`` a month) and team atlas (carol) on the database, made
    in one session (``names``: the accounts' names for each of those five, when not the words
    themselves); each member's token, by who."""
    from burst.server import accounts, serve

    name = (names or {}).get
    with serve.open_database(db_url)[1]() as db:
        accounts.add_team(db, name("cern", "cern"), cern_budget_usd)
        accounts.add_team(db, name("atlas", "atlas"))
        tokens = {}
        for who, team in (("alice", "cern"), ("bob", "cern"), ("carol", "atlas")):
            accounts.add_user(db, name(who, who), name(team, team))
            tokens[who] = accounts.new_token(db, name(who, who))
    return tokens
