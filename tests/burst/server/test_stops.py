"""The team budget guard's stops finish: a stopper that hangs is ended and tried again, and a
server killed in the middle of a stop stops the cluster again at its first look once it is back.
A real server on a real PostgreSQL; the site is the Kubernetes stand-ins, whose deletes hang while
the file ``hang-delete`` is there (an API server that never answers, as kubectl waits for one)."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from burst.runtime.ray_head import free_port
from tests.support import kube_site, postgres
from tests.support.burst_server import Server, add_group
from tests.support.cli_runs import burst
from tests.support.slurm_site import needs

pytestmark = needs(postgres.missing())


@pytest.fixture
def team(database, tmp_path):
    """A server's data, alice of team cern logged in, the Kubernetes stand-ins as the site; the server not started yet."""
    fake = tmp_path / "kube"
    fake.mkdir()
    kube_site.site_operator(fake)
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    server = Server(tmp_path, database)
    suffix = str(free_port())
    names = {who: f"{who}{suffix}" for who in ("alice", "bob", "carol", "cern", "atlas")}
    tokens = add_group(database, 100, names)
    site = tmp_path / "site.yaml"
    site.write_text(kube_site.SITE % "")
    server.admin("policy", str(site))
    (tmp_path / "alice.token").write_text(tokens["alice"])
    yield server, fake, names, tmp_path / "alice-machine"
    server.stop()
    _kill_stoppers()


def _stoppers() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if "burst.server.act" in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def _kill_stoppers() -> None:
    for p in _stoppers():
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _cluster_up(server: Server, home, tmp_path) -> None:
    burst("login", server.url, "--token-file", str(tmp_path / "alice.token"), home=home, cwd=tmp_path, check=True)
    burst("up", "--provider", "kubernetes", "--gpus", "4", "--hours", "1", "--name", "c1", home=home, cwd=tmp_path, check=True)


def _open(server: Server, home, tmp_path) -> list:
    return json.loads(burst("team", "--json", home=home, cwd=tmp_path, check=True).stdout)


def _wait(condition, seconds: float, what: str) -> float:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(0.3)
    raise AssertionError(f"waited {seconds:.0f} s for {what}")


def test_a_stopper_that_hangs_is_ended_and_the_cluster_still_goes_down(team):
    server, fake, names, home = team
    tmp_path = home.parent
    server.start(1.0, kube_site.env(fake), "--stop-timeout", "3")
    _cluster_up(server, home, tmp_path)
    (fake / "hang-delete").touch()
    server.admin("budget", names["cern"], "--usd", "0")  # the money is gone: the guard stops the cluster, and its delete hangs
    _wait(lambda: "the stop did not finish in 3 s and was ended" in server.log.read_text(), 60, "the hung stopper to be ended")
    assert _open(server, home, tmp_path) != []  # not down yet: the site never answered
    (fake / "hang-delete").unlink()  # the site answers again: the guard's next look stops it
    _wait(lambda: _open(server, home, tmp_path) == [], 60, "the cluster to go at the guard's next try")
    assert kube_site.left_on(fake) == ["ray-system_deployment_kuberay-operator"]
    assert server.log.read_text().count(f"stopping {names['alice']}'s cluster c1") >= 2  # the ended stop, then the one that finished
    _wait(lambda: _stoppers() == [], 30, "no stopper left")


def test_a_server_killed_in_the_middle_of_a_stop_stops_the_cluster_at_its_first_look_when_it_is_back(team):
    server, fake, names, home = team
    tmp_path = home.parent
    server.start(1.0, kube_site.env(fake))
    _cluster_up(server, home, tmp_path)
    (fake / "hang-delete").touch()
    server.admin("budget", names["cern"], "--usd", "0")
    _wait(lambda: any(c["argv"][:1] == ["delete"] or "delete" in c["argv"][:3] for c in kube_site.calls(fake)), 60,
          "the guard's stop to reach the site's delete")
    killed = time.monotonic()
    os.killpg(server.proc.pid, signal.SIGKILL)  # the server's machine goes down, its stopper with it
    server.proc.wait()
    _kill_stoppers()
    (fake / "hang-delete").unlink()
    restarted = time.monotonic()
    server.start(1.0, kube_site.env(fake))
    gone = _wait(lambda: _open(server, home, tmp_path) == [], 60, "the cluster to go after the restart")
    log = server.log.read_text()
    assert "again (its stop had not finished)" in log and kube_site.left_on(fake) == ["ray-system_deployment_kuberay-operator"]
    print(f"stop interrupted by a server kill: killed at 0 s, started again at {restarted - killed:.1f} s, "
          f"cluster gone at {gone - killed:.1f} s ({gone - restarted:.1f} s after the restart, guard looks every 1 s)")
