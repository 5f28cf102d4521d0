"""A real PostgreSQL for the server's tests: Debian's ``postgresql`` binaries, a cluster made by
``initdb`` in a temporary directory and a ``postgres`` listening on a loopback port, gone with the
test session. As root it runs as the ``postgres`` user (PostgreSQL refuses root). Missing here: the
tests skip, saying how to install it; under ``BURST_REQUIRE_SITE_TESTS=1`` (CI) they fail instead."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from burst.runtime.ray_head import free_port

HOW_TO_ENABLE = "the server's PostgreSQL tests need Debian's postgresql: apt-get install postgresql"


def binaries() -> Optional[Path]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing() -> Optional[str]:
    if binaries() is None:
        return HOW_TO_ENABLE
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return f"{HOW_TO_ENABLE} (as root PostgreSQL runs as its own user, postgres, which the package makes)"
    return None


@contextmanager
def running() -> Iterator[str]:
    """A PostgreSQL cluster in a directory of its own (pytest's are the test user's alone, which the
    postgres user may not enter); yields the SQLAlchemy URL of its database ``burst``."""
    root = Path(tempfile.mkdtemp(prefix="burst-pg-", dir="/tmp"))
    try:
        with _cluster(root) as url:
            yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _cluster(root: Path) -> Iterator[str]:
    bin_dir = binaries()
    data, sockets = root / "pgdata", root / "pgsock"
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    for d in (data, sockets):
        d.mkdir(parents=True, exist_ok=True)
    if as_postgres:
        owner = pwd.getpwnam("postgres")
        for d in (root, data, sockets):
            os.chown(d, owner.pw_uid, owner.pw_gid)
    made = subprocess.run([*as_postgres, str(bin_dir / "initdb"), "-D", str(data), "-U", "burst", "-A", "trust", "--no-sync", "-E", "UTF8"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise RuntimeError(f"initdb failed: {made.stderr[-2000:]}")
    port = free_port()
    log = root / "postgres.log"
    server = subprocess.Popen([*as_postgres, str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sockets),
                               "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=60"],
                              stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 30
        while subprocess.run([str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)], capture_output=True).returncode != 0:
            if server.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"PostgreSQL did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        subprocess.run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "burst", "burst"], check=True, capture_output=True)
        yield f"postgresql+psycopg://burst@127.0.0.1:{port}/burst"
    finally:
        os.killpg(server.pid, signal.SIGINT)  # PostgreSQL's fast shutdown (runuser and postgres are one process group)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
