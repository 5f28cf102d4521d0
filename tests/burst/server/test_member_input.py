"""A member of a group, read as an attacker would be, against a real server on a real PostgreSQL
with two teams: what a site is, costs or may reach is the admins' word (``burst server admin
policy``), never a member's file. Each attempt is refused in one line, through the command line and
the raw API; nothing is read, contacted, written or started."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from burst.runtime.ray_head import free_port
from tests.support import postgres
from tests.support.burst_server import Server, add_group
from tests.support.cli_runs import burst
from tests.support.slurm_site import needs

pytestmark = needs(postgres.missing())


@pytest.fixture
def group(database, tmp_path):
    server = Server(tmp_path, database)
    suffix = str(free_port())
    names = {who: f"{who}{suffix}" for who in ("alice", "bob", "carol", "cern", "atlas")}
    tokens = add_group(database, 1000, names)
    site = tmp_path / "site.yaml"  # the admins': a Ray site at its own address, priced; this machine priced too
    site.write_text("providers: [local, ray, gcp]\nbudget_usd: 500\nmax_gpus: 16\nregions: ['europe-*']\n"
                    "local: {usd_per_hour: 2}\n"
                    "onprem: {name: lab, accelerator: V100, gpus: 8, usd_per_gpu_hour: 1.5, ray_address: 'http://127.0.0.1:1'}\n")
    server.admin("policy", str(site))
    server.start()
    home = tmp_path / "alice-machine"
    (tmp_path / "alice.token").write_text(tokens["alice"])
    burst("login", server.url, "--token-file", str(tmp_path / "alice.token"), home=home, cwd=tmp_path, check=True)
    try:
        yield server, tokens, home
    finally:
        server.stop()


class Listener:
    """A port on the member's own host, to see whether the server's side ever connects to it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port, self.heard, self.running = self.sock.getsockname()[1], [], True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                continue
            connection.settimeout(2)
            try:
                self.heard.append(connection.recv(65536))
            except OSError:
                self.heard.append(b"")
            connection.close()

    def close(self):
        self.running = False
        self.thread.join(timeout=2)
        self.sock.close()


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    return stderr.strip()


def test_a_member_s_policy_cannot_say_what_a_site_is_costs_or_reaches(group, tmp_path):
    server, tokens, home = group
    secret = server.data / "server.env"  # what a server's environment file holds: the database URL and its password
    secret.write_text("BURST_SERVER_DB=postgresql+psycopg://burst:hunter2@db/burst\n")
    listener = Listener()
    attacks = {
        "a site at my host with the server's file as its token": (
            f"onprem: {{accelerator: V100, gpus: 8, ray_address: 'http://127.0.0.1:{listener.port}', token_file: {secret}}}\n",
            "policy field onprem: through a burst server the site, its prices and its stores are the admins' word"),
        "this machine for free": ("local: {usd_per_hour: 0}\n", "policy field local:"),
        "a store in the server's own directory": (f"stores: {{named: {{local: {server.data}}}}}\n", "policy field stores:"),
        "free egress": ("data: {location: onprem, egress_usd_per_gb: 0}\n", "policy field data.egress_usd_per_gb:"),
        "spot estimates of my own": ("preemption_rate_per_hour: {gcp: 0}\n", "policy field preemption_rate_per_hour:"),
        "a bigger budget than the site's": ("budget_usd: 5000\n", "policy field budget_usd: 5000 is over the site's 500"),
        "a provider the site does not offer": ("providers: [local, azure]\n", "policy field providers: azure not allowed by the site's policy"),
        "regions the site does not allow": ("regions: ['us-*']\n", "policy field regions: us-* not allowed by the site's policy"),
        "more GPUs than the site's cap": ("max_gpus: 64\n", "policy field max_gpus: 64 is over the site's 16"),
        "moves to a provider the site does not offer": ("recovery: {allow_providers: [azure]}\n",
                                                        "policy field recovery.allow_providers: azure not allowed"),
    }
    try:
        for what, (text, said) in attacks.items():
            policy = tmp_path / "attack.yaml"
            policy.write_text(text)
            for verb in (("plan",), ("up", "--provider", "ray", "--name", "mine"), ("run", "gan3d", "--provider", "ray", "--detach")):
                refused = burst(*verb, "--policy", str(policy), home=home, cwd=tmp_path)
                assert refused.returncode == 2 and said in _one_line(refused.stderr), (what, verb, refused.stderr)
            status, answer = server.http("POST", "/v1/verbs/plan", tokens["alice"], {"args": ["--policy", "@upload:0"], "files": [text]})
            assert status == 200 and answer["rc"] == 2 and said in answer["stderr"], (what, answer)
        time.sleep(1)  # anything that would connect has had its chance
        assert listener.heard == []
    finally:
        listener.close()
    # a narrowing is what a member's policy is for: planned under the site's, within it
    mine = tmp_path / "mine.yaml"
    mine.write_text("providers: [local, ray]\nbudget_usd: 100\nobjective: min_time\n")
    planned = json.loads(burst("plan", "--policy", str(mine), "--json", home=home, cwd=tmp_path, check=True).stdout)
    assert planned["budget_usd"] == 100 and {c["provider"] for c in planned["candidates"]} <= {"local", "ray"}
    prices = {c["provider"]: c["hourly_usd"] for c in planned["candidates"]}
    assert prices["local"] == 2 and min(c["hourly_usd"] for c in planned["candidates"] if c["provider"] == "ray") == 1.5  # the admins' prices
    shown = server.http("GET", "/v1/site-policy", tokens["bob"])
    assert shown[0] == 200 and shown[1]["policy"]["onprem"]["name"] == "lab" and "budget_usd" in shown[1]["yours_may_set"]
    assert not list(server.data.glob("users/*/clusters/*.json")) and not list(server.data.glob("users/*/uploads/*"))
    assert "hunter2" not in json.dumps(shown)


def test_a_member_s_paths_are_checked_before_the_server_reads_them(group, tmp_path):
    server, tokens, home = group
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "install.sh").write_text("touch " + str(tmp_path / "ran") + "\n")
    for args, said in ((["--policy", "/dev/zero"], "--policy /dev/zero: through a burst server, --policy takes a file sent with the command"),
                       (["--policy", str(server.data / "site-policy.yaml")], "the server's own files are not yours to read"),
                       (["--policy=/etc/passwd"], "--policy /etc/passwd: through a burst server"),
                       (["--provider", "ray", "--bundle", str(bundle)], "--bundle: through a burst server, what a site's nodes install from is the admins' word")):
        started = time.monotonic()
        status, answer = server.http("POST", "/v1/verbs/up", tokens["alice"], {"args": args, "files": []})
        assert status == 200 and answer["rc"] == 2 and said in answer["stderr"], (args, answer)
        assert time.monotonic() - started < 30  # /dev/zero is never read
    # a member's own code, named as the workload, is never imported on the server's host (nor an installed module)
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(tmp_path / 'imported')!r}, 'w').write('ran on the server')\n")
    for spec in (f"{evil}:WORKLOAD", "os:path"):
        status, answer = server.http("POST", "/v1/verbs/run", tokens["alice"], {"args": [spec, "--provider", "local"], "files": []})
        assert answer["rc"] != 0 and "through a burst server a workload is one its admins installed" in answer["stderr"], answer
        assert "Traceback" not in answer["stderr"]
    assert not (tmp_path / "imported").exists()
    # another member's store (a directory of the server's, or a bucket) is not looked at, nor removed from
    for store in (str(server.data / "users"), "gs://someone-elses-bucket"):
        for args in (["--store", store], ["--store", store, "--remove", "0" * 64]):
            status, answer = server.http("POST", "/v1/verbs/datasets", tokens["alice"], {"args": args, "files": []})
            assert answer["rc"] != 0 and "looks at and removes from your own stores only" in answer["stderr"], (args, answer)
    # a policy the member sent, but larger than any policy, is refused before it is parsed
    status, answer = server.http("POST", "/v1/verbs/plan", tokens["alice"], {"args": ["--policy", "@upload:0"], "files": ["#" * 300_000]})
    assert status == 200 and answer["rc"] == 2 and "is not a policy (at most 256 KiB)" in answer["stderr"], answer
    assert not (tmp_path / "ran").exists() and not list(server.data.glob("users/*/clusters/*.json"))
    assert not list(server.data.glob("users/*/uploads/*"))


def test_twenty_ups_at_the_same_moment_commit_no_more_than_the_team_has(database, tmp_path):
    """$100 left and twenty `up`s of the team's two members at once, each a cluster whose lease
    commits $38.40 (4 A100 at $1.20/h for 8 h, the Kubernetes stand-ins as the site): each verb
    reserves what is left under a lock on the team's row before it starts, so two clusters are made
    and the other eighteen are refused in one line; at most $100 is committed."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.support import kube_site

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
    server.start(env=kube_site.env(fake))
    try:
        def up(i: int) -> dict:
            who = ("alice", "bob")[i % 2]
            return server.http("POST", "/v1/verbs/up", tokens[who],
                               {"args": ["--provider", "kubernetes", "--gpus", "4", "--hours", "8", "--name", f"c{i}"], "files": []})[1]

        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(up, range(20)))
        made = [a for a in answers if a["rc"] == 0]
        refused = [a for a in answers if a["rc"] != 0]
        assert len(made) == 2, [a["stderr"][-300:] for a in answers]
        for a in refused:
            assert a["rc"] == 3 and ("left to commit" in a["stderr"] or "nothing left to spend" in a["stderr"]), a
            lines = a["stderr"].strip().splitlines()  # the plan's own note (over the run's budget, going ahead) may come first
            assert len([l for l in lines if not l.startswith("note: ")]) == 1 and "Traceback" not in a["stderr"], a["stderr"]
        status, costs = server.http("GET", "/v1/costs?by=team", tokens["alice"])
        (line,) = [l for l in costs["lines"] if l["key"] == names["cern"]]
        assert line["committed_usd"] + line["spent_usd"] <= 100 and line["committed_usd"] > 76
        assert len(kube_site.left_on(fake)) == 1 + 6 * 2  # the site's operator and the two clusters' objects, nothing else
        from sqlalchemy import create_engine, text

        with create_engine(database).connect() as connection:  # every reservation released with its verb
            assert connection.execute(text("select count(*) from reservations")).scalar() == 0
        print(f"20 ups at once, $100 left: {len(made)} made, {len(refused)} refused, ${line['committed_usd']:.2f} committed, "
              f"${line['left_usd']:.2f} left")
    finally:
        try:  # a server that fails a down still stops: a test leaves no server of its own running
            for who in ("alice", "bob"):
                server.http("POST", "/v1/verbs/down", tokens[who], {"args": ["--all"], "files": []})
        finally:
            server.stop()


def _raw(url: str, path: str, body: bytes, headers: dict) -> tuple[int, dict, bytes]:
    """One POST, its redirect not followed: the status, the headers (lower-case names) and the body."""
    import http.client

    host, port = url.split("//", 1)[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", path, body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def _says_length(server: Server, path: str, length: int) -> str:
    """What the server answers a request that says its body is ``length`` bytes and sends none of it."""
    host, port = server.url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode())
        answer = b""
        while b"}" not in answer:  # the head, then the JSON body
            more = sock.recv(65536)
            if not more:
                break
            answer += more
        return answer.decode(errors="replace")


def test_what_anyone_may_send_before_signing_in_is_small_slow_and_from_the_server_s_own_pages(tmp_path):
    """No token needed for any of it: bodies over their path's cap are refused before any route reads
    them, a sign-in posted from another site is refused, sign-ins from one address are limited to
    ten a minute; behind a TLS proxy the admin names, cookies are Secure and browsers keep to HTTPS."""
    server = Server(tmp_path)
    server.admin("team", "cern")
    token = server.admin("user", "alice", "--team", "cern")
    server.start(1.0, None, "--behind-tls-proxy")
    try:
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        assert _says_length(server, "/signin", 100_000).startswith("HTTP/1.1 413")
        answer = _says_length(server, "/v1/verbs/plan", 6_000_000)  # before the token is asked for (that would be 401)
        assert answer.startswith("HTTP/1.1 413") and "more than this path takes" in answer
        host = server.url.split("//", 1)[1]
        status, _, _ = _raw(server.url, "/signin", f"token={token}".encode(), {**form, "Origin": "https://evil.example", "Host": host})
        assert status == 403
        status, headers, _ = _raw(server.url, "/signin", f"token={token}".encode(), {**form, "Origin": f"http://{host}"})
        assert status in (200, 303) and "secure" in headers.get("set-cookie", "").lower().replace("samesite", "")
        assert headers.get("strict-transport-security") == "max-age=31536000"
        tried = [_raw(server.url, "/signin", b"token=burst_wrong", form)[0] for _ in range(11)]
        assert tried[:9] == [401] * 9 and tried[-1] == 429  # the good sign-in above was the first of the ten
        # no site policy written: the packaged default, without this machine (the server's own), which only the admins may list
        status, answer = server.http("POST", "/v1/verbs/up", token, {"args": ["--provider", "local"], "files": []})
        assert answer["rc"] == 2 and "provider 'local' is not allowed by the policy" in answer["stderr"], answer
        assert not list(server.data.glob("users/*/clusters/*.json"))
    finally:
        server.stop()


def test_a_server_whose_database_is_not_its_data_directory_s_refuses_to_start(tmp_path):
    """The members' state is there but the database has no users (the environment file naming the
    group's PostgreSQL was not read, so the default SQLite one was opened): one line, no server."""
    import subprocess
    import sys

    data = tmp_path / "server-data"
    (data / "users" / "a1b2c3d4" / "clusters").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "server", "start", "--data", str(data), "--port", str(free_port())],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "holds 1 members' state but database" in _one_line(proc.stderr)
    assert "is BURST_SERVER_DB set?" in proc.stderr


def test_the_client_never_sends_its_token_on_to_where_a_redirect_points(tmp_path, monkeypatch):
    """A server (or whatever answers at its address) that redirects: the client says where to, in one
    line, and the address it points at never sees the member's token."""
    from burst.client import server as client
    from burst.errors import BurstError
    from tests.support.http_stub import Answering, serve

    heard = []

    class Elsewhere(Answering):
        def do_GET(self):
            heard.append(self.headers.get("Authorization"))
            self.reply(200, b"{}")

    elsewhere = serve(Elsewhere)

    class Redirecting(Answering):
        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{elsewhere.server_port}/v1/me")
            self.end_headers()

    redirecting = serve(Redirecting)
    try:
        login = client.Login(f"http://127.0.0.1:{redirecting.server_port}", "burst_secret-token", None)
        with pytest.raises(BurstError, match="answered a redirect \\(302\\) to http://127.0.0.1:.*does not send your token on"):
            client.call(login, "GET", "/v1/me")
        assert heard == []
    finally:
        redirecting.shutdown()
        elsewhere.shutdown()


@pytest.mark.parametrize("path, passed", [
    ("query", True), ("query_range", True), ("label/job/values", True), ("status/buildinfo", True), ("targets/metadata", True),
    ("query/../admin/tsdb/delete_series", False), ("query/..", False), ("label/../../admin/tsdb/snapshot", False),
    ("admin/tsdb/snapshot", False), ("write", False), ("query//x", False), ("label/job", False), ("status/../query", False),
    ("query%2f..%2fadmin", False), ("series/extra", False)])
def test_only_prometheus_read_endpoints_are_passed_on_exactly(path, passed):
    """A member's monitor path is one read endpoint, or 404: a ``..`` that Prometheus would clean
    into its admin or write API never reaches it."""
    from burst.server.app import prometheus_read_path

    assert prometheus_read_path(path) is passed


def test_a_member_s_runs_followed_to_their_end_are_limited_and_a_teammate_s_are_not():
    """Each synchronous run holds one of the server's request threads for hours: a member gets four
    at once; a fifth is refused in one line (detach it), a teammate's is not, a detached run never
    counts, and a slot is free again once a run ends."""
    import contextlib

    from burst.errors import BurstError
    from burst.server import views
    from burst.server.database import User

    alice, bob = User(id=1, name="alice"), User(id=2, name="bob")
    assert views.is_long("run", ["gan3d"]) and not views.is_long("run", ["gan3d", "--detach"]) and not views.is_long("up", [])
    with contextlib.ExitStack() as held:
        for _ in range(views.LONG_AT_ONCE):
            held.enter_context(views._one_more(alice, True))
        with pytest.raises(BurstError, match="you have 4 runs followed to their end by the server already: wait for one, or detach"):
            with views._one_more(alice, True):
                pass
        with views._one_more(alice, False), views._one_more(bob, True):  # a detached one, a teammate's
            pass
    with views._one_more(alice, True):  # all four ended: free again
        pass
