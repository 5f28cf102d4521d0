"""A group's session on a real burst server, printed command by command as each member saw it.

    python benchmarks/server_session.py

Starts a PostgreSQL of its own (``tests/support/postgres.py``: Debian's ``postgresql``), a burst
server on it (``tests/support/burst_server.py``), team cern (alice, bob) and team atlas (carol),
each member logged in from a state directory of their own. alice and bob both bring up a cluster
named k8s on the server's machine (priced at $360/h so that money moves in seconds); everyone
looks at the team and its costs; the team's budget is set to what is spent plus the stop's reserve
and a few dollars; the server's guard stops both clusters; the costs are shown again. Nothing is
left running. Figures differ from run to run (prices accrue by the second).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import postgres  # noqa: E402
from tests.support.burst_server import Server, add_group  # noqa: E402


def say(who: str, home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``burst ARGS`` as ``who`` from their own machine (state directory), printed with what it printed."""
    proc = subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "BURST_HOME": str(home), "COLUMNS": "110", "NO_COLOR": "1"})
    print(f"\n{who}$ burst {' '.join(args)}   # exit {proc.returncode}")
    for line in (proc.stdout + proc.stderr).rstrip().splitlines():
        print(f"  {line}")
    return proc


def main() -> int:
    why = postgres.missing()
    if why:
        print(why, file=sys.stderr)
        return 1

    root = Path(tempfile.mkdtemp(prefix="burst-session-"))
    with postgres.running() as url:
        server = Server(root, url)
        tokens = add_group(url, 1000)
        server.start()
        homes = {who: root / f"{who}-machine" for who in tokens}
        policy = root / "priced.yaml"
        policy.write_text("providers: [local]\nlocal: {usd_per_hour: 360}\n")
        try:
            for who, token in tokens.items():
                (root / f"{who}.token").write_text(token)
                say(who, homes[who], root, "login", server.url, "--token-file", str(root / f"{who}.token"))
            for who in ("alice", "bob"):
                say(who, homes[who], root, "up", "--provider", "local", "--name", "k8s", "--cpus", "1", "--policy", str(policy))
            for who in ("alice", "bob", "carol"):
                say(who, homes[who], root, "team")
            say("carol", homes["carol"], root, "down", "k8s")
            say("bob", homes["bob"], root, "team", "--stop", "alice/k8s")
            say("bob", homes["bob"], root, "costs", "--by", "user")
            lines = json.loads(say("bob", homes["bob"], root, "costs", "--json").stdout)["lines"]
            spent = next(line["spent_usd"] for line in lines if line["key"] == "cern")
            from burst.lifecycle.budget import CHECKPOINT_RESERVE_S, teardown_seconds

            budget = round(spent + 2 * 0.1 * (CHECKPOINT_RESERVE_S + teardown_seconds("local")) + 5, 2)  # both clusters' reserve, and $5
            print(f"\nadmin$ burst server admin budget cern --usd {budget}")
            server.admin("budget", "cern", "--usd", str(budget))
            deadline = time.time() + 180
            while time.time() < deadline and "stopping bob's cluster" not in server.log.read_text():
                time.sleep(1)
            while time.time() < deadline and json.loads(say("alice", homes["alice"], root, "team", "--json").stdout):
                time.sleep(2)
            print("\nthe server's log:")
            for line in server.log.read_text().splitlines():
                if "stopping" in line or "budget" in line:
                    print(f"  {line}")
            say("alice", homes["alice"], root, "costs", "--by", "user")
            say("bob", homes["bob"], root, "up", "--provider", "local", "--name", "more", "--cpus", "1", "--policy", str(policy))
        finally:
            server.stop()
            for member in (server.data / "users").glob("*"):
                if any((member / "clusters").glob("*.json")):
                    subprocess.run([sys.executable, "-m", "burst.cli", "down", "--all"], env={**os.environ, "BURST_HOME": str(member)},
                                   capture_output=True, timeout=120)
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
