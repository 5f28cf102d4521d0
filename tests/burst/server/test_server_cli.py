"""`burst server` for one person (SQLite, the default database) and its refusals: each one line."""

from __future__ import annotations

import sqlite3
import subprocess
import sys


def server(*args: str, data, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burst.cli", "server", *args, "--data", str(data)], capture_output=True, text=True,
                          timeout=timeout)


def test_the_default_database_is_sqlite_in_the_server_s_directory_kept_at_alembic_s_newest_schema(tmp_path):
    data = tmp_path / "srv"
    assert server("admin", "team", "cern", "--budget", "500", data=data).returncode == 0
    made = server("admin", "user", "alice", "--team", "cern", data=data)
    assert made.returncode == 0 and made.stdout.startswith("burst_")
    again = server("admin", "team", "cern", data=data)  # a second open upgrades nothing and keeps what is there
    assert again.returncode != 0 and again.stderr.strip() == ("error: team 'cern' exists already; `burst server admin budget cern --usd N` "
                                                             "changes its budget")
    with sqlite3.connect(data / "burst-server.db") as db:
        assert db.execute("select version_num from alembic_version").fetchall() == [("0003",)]
        assert db.execute("select name, monthly_budget_usd from teams").fetchall() == [("cern", 500.0)]
        (digest,) = db.execute("select digest from tokens").fetchone()
    assert digest != made.stdout.strip() and len(digest) == 64
    assert (data.stat().st_mode & 0o777) == 0o700


def test_an_imported_record_names_no_file_of_the_server_and_no_link_is_copied(tmp_path):
    """A member's ~/.burst handed to an admin is the member's word: a cluster record whose token is a
    server file, a run whose storage is another member's directory, a link among a cluster's files;
    none of it comes in, each said in one line, and the admin's import goes on with the rest."""
    import os

    from burst.home import state
    from burst.home.state import ClusterHandle, RunRecord

    data = tmp_path / "srv"
    assert server("admin", "team", "cern", data=data).returncode == 0
    assert server("admin", "user", "alice", "--team", "cern", data=data).returncode == 0
    assert server("admin", "user", "bob", "--team", "cern", data=data).returncode == 0
    secret = data / "server.env"
    secret.write_text("BURST_SERVER_DB=postgresql+psycopg://burst:hunter2@db/burst\n")
    source = tmp_path / "laptop-home"
    before = os.environ.get("BURST_HOME")
    os.environ["BURST_HOME"] = str(source)
    try:
        state.save(RunRecord(run_id="gan3d-20261101-100000-aaaa", workload="gan3d", cluster="site", provider="slurm", state="SUCCEEDED",
                             storage_uri=str(data / "users")))
        state.save(RunRecord(run_id="gan3d-20261101-120000-cccc", workload="gan3d", cluster="site", provider="slurm", state="SUCCEEDED"))
        state.save(ClusterHandle(name="site", provider="slurm", cluster_id="s1", hourly_usd=2.5, token_path=str(secret),
                                 storage_uri=str(source / "clusters" / "site")))
        state.save(ClusterHandle(name="k8s", provider="kubernetes", cluster_id="k1", hourly_usd=1.0, storage_uri="gs://alices-bucket"))
        os.symlink(secret, state.cluster_dir("k8s") / "auth_token")
    finally:
        os.environ.pop("BURST_HOME") if before is None else os.environ.__setitem__("BURST_HOME", before)
    proc = server("admin", "import", "alice", "--from", str(source), data=data)
    assert proc.returncode == 0, proc.stderr
    said = proc.stderr
    assert f"run gan3d-20261101-100000-aaaa: its record names storage_uri {data / 'users'}, outside the member's directory" in said
    assert f"cluster site: its record names token_path {secret}, outside the member's directory and the site's storage" in said
    assert "run gan3d-20261101-120000-cccc (SUCCEEDED) imported" in said and "cluster k8s (kubernetes, $1.00/h) imported" in said
    homes = [h for h in (data / "users").iterdir() if (h / "clusters").exists()]
    assert len(homes) == 1 and not (homes[0] / "clusters" / "site.json").exists()
    assert not (homes[0] / "clusters" / "k8s" / "auth_token").exists()  # the link was left out, not followed
    assert not any("hunter2" in p.read_text(errors="replace") for p in homes[0].rglob("*") if p.is_file())


def test_bad_input_to_the_server_is_one_line(tmp_path):
    cases = [
        (("start", "--host", "0.0.0.0"), "--host 0.0.0.0 listens beyond this machine"),
        (("start", "--host", "0.0.0.0", "--cert", str(tmp_path / "none.pem"), "--key", str(tmp_path / "none.key")), "no such file"),
        (("start", "--cert", str(tmp_path / "c.pem")), "--cert and --key go together"),
        (("start", "--db", "nosuchdb://x"), "give --db postgresql+psycopg://USER@HOST/DB or sqlite:///PATH"),
        (("admin", "user", "bob", "--team", "nobody"), "no team 'nobody'"),
        (("admin", "team", "Bad Name"), "team name 'Bad Name' is not allowed"),
        (("admin", "budget", "x", "--usd", "-5"), "no team 'x'"),
    ]
    for args, said in cases:
        proc = server(*args, data=tmp_path / "srv")
        assert proc.returncode != 0 and said in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_costs_and_the_team_need_a_login_and_an_unreachable_server_is_one_line(tmp_path):
    env_home = {"BURST_HOME": str(tmp_path / "home")}
    import os

    run = lambda *a: subprocess.run([sys.executable, "-m", "burst.cli", *a], capture_output=True, text=True,  # noqa: E731
                                    env={**os.environ, **env_home}, timeout=60)
    proc = run("costs")
    assert proc.returncode != 0 and "not logged in to a burst server: `burst login URL` first" in proc.stderr
    proc = run("login", "http://127.0.0.1:9", "--token-file", "/dev/null")
    assert proc.returncode != 0 and "cannot be reached" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "home" / "server.json").exists()  # a failed login keeps nothing


def test_a_member_s_own_state_is_imported_but_nothing_still_controlled_on_their_machine(tmp_path):
    """Finished runs, a cluster on the group's Slurm site (its token file with it, its paths moved)
    and the staged datasets come in; a run still going and a local cluster stay where they run."""
    import json
    import os

    from burst.home import state
    from burst.home.state import ClusterHandle, RunRecord

    source = tmp_path / "laptop-home"
    before = os.environ.get("BURST_HOME")
    os.environ["BURST_HOME"] = str(source)
    try:
        for run_id, run_state in (("gan3d-20261101-100000-aaaa", "SUCCEEDED"), ("gan3d-20261101-110000-bbbb", "RUNNING")):
            state.save(RunRecord(run_id=run_id, workload="gan3d", cluster="site", provider="slurm", state=run_state))
        token = state.cluster_dir("site") / "auth_token"
        token.write_text("secret")
        state.save(ClusterHandle(name="site", provider="slurm", cluster_id="s1", storage_uri="/shared/burst", hourly_usd=2.5,
                                 token_path=str(token), outputs={"job_id": "4242"}))
        state.save(ClusterHandle(name="local", provider="local", cluster_id="l1", storage_uri=str(source / "x")))
        (source / "staged.json").write_text("{}")
    finally:
        os.environ.pop("BURST_HOME") if before is None else os.environ.__setitem__("BURST_HOME", before)
    data = tmp_path / "srv"
    assert server("admin", "team", "cern", data=data).returncode == 0
    assert server("admin", "user", "alice", "--team", "cern", data=data).returncode == 0
    site = tmp_path / "site.yaml"  # the site's shared disk, where the slurm cluster's storage is, is the admins' word
    site.write_text("onprem: {scheduler: slurm, accelerator: V100, gpus: 8, storage: /shared/burst}\n")
    assert server("admin", "policy", str(site), data=data).returncode == 0
    proc = server("admin", "import", "alice", "--from", str(source), data=data)
    assert proc.returncode == 0, proc.stderr
    said = proc.stderr
    assert "run gan3d-20261101-100000-aaaa (SUCCEEDED) imported" in said
    assert "run gan3d-20261101-110000-bbbb is RUNNING on that machine: not imported" in said
    assert "cluster local (local) runs on that machine: not imported" in said
    assert "cluster site (slurm, $2.50/h) imported" in said
    (home,) = (data / "users").iterdir()
    site = json.loads((home / "clusters" / "site.json").read_text())
    assert site["token_path"] == str(home / "clusters" / "site" / "auth_token") and (home / "clusters" / "site" / "auth_token").read_text() == "secret"
    assert not (home / "clusters" / "local.json").exists() and not (home / "runs" / "gan3d-20261101-110000-bbbb.json").exists()
    assert (home / "staged.json").exists()
    with sqlite3.connect(data / "burst-server.db") as db:
        assert db.execute("select name, provider, hourly_usd, ended from clusters").fetchall() == [("site", "slurm", 2.5, None)]
    again = server("admin", "import", "alice", "--from", str(source), data=data)  # a second import changes nothing
    assert "run gan3d-20261101-100000-aaaa: already on the server, left as it is" in again.stderr
    assert "cluster site: the member has one of that name on the server already" in again.stderr
    refused = server("admin", "import", "alice", "--from", str(tmp_path), data=data)
    assert refused.returncode != 0 and "is not a burst state directory" in refused.stderr


def test_the_files_a_member_sends_go_with_the_verb_unless_a_run_it_leaves_behind_reads_them(tmp_path):
    """A policy sent with `plan` is gone once the plan is made; one sent with a detached or managed
    run stays for its controller; what stays goes at a server's start once a month old."""
    import os
    import time

    from burst.server import verbs

    data = tmp_path / "srv"
    home = verbs.home_of(data, "abcd1234")
    policy = "providers: [local]\nlocal: {usd_per_hour: 1}\n"
    args, uploads = verbs.with_uploads(home, ["gan3d", "--policy", "@upload:0", "--json"], [policy])
    assert (uploads / "file-0.yaml").read_text() == policy and args[2] == str(uploads / "file-0.yaml")
    rc, out, err = verbs.run(home, uploads, "plan", args, "abcd1234")
    assert rc == 0, err
    assert '"choice"' in out and not uploads.exists()  # the plan read it, then it went
    assert verbs.keeps_files("train", ["gan3d", "--detach"]) and verbs.keeps_files("run", ["gan3d", "--managed", "--policy", "x"])
    assert not verbs.keeps_files("train", ["gan3d"]) and not verbs.keeps_files("up", ["--detach"])
    _, kept = verbs.with_uploads(home, ["x"], ["a"])
    _, old = verbs.with_uploads(home, ["x"], ["b"])
    month_ago = time.time() - 31 * 86400
    os.utime(old, (month_ago, month_ago))
    assert verbs.sweep_uploads(data) == 1 and kept.exists() and not old.exists()


def test_the_server_from_python_answers_as_the_member_and_refuses_in_one_line(tmp_path):
    """`burst.api.connect` against a real server (its own SQLite): who the token names, the team's
    clusters and money, a verb run as the member with its JSON read back, a bad token refused."""
    import pytest

    from burst import api
    from burst.errors import BurstError
    from tests.support.burst_server import Server

    server = Server(tmp_path)
    server.admin("team", "cern", "--budget", "200")
    token = server.admin("user", "alice", "--team", "cern")
    server.start()
    try:
        me = api.connect(server.url, token)
        assert me.me()["user"] == "alice" and me.me()["team"] == "cern"
        assert me.clusters() == []
        (line,) = me.costs()["lines"]
        assert (line["key"], line["spent_usd"], line["left_usd"]) == ("cern", 0.0, 200.0)
        plan = me.verb("plan", "gan3d", "--gpus", "8", "--json").json()
        assert plan["budget_usd"] == 200  # held to the team's month: the server's own narrowing, seen from Python
        with pytest.raises(BurstError, match="no run 'gan3d-nope'"):
            me.run("gan3d-nope")
        with pytest.raises(BurstError, match="refused the token"):
            api.connect(server.url, "burst_not-a-token").me()
        with pytest.raises(BurstError, match="is not a server address"):
            api.connect("login-node:8467", token)
        # a cluster's Prometheus through the server: only its read API, only with a token, only one that runs
        assert server.http("GET", "/v1/monitor/alice/k8s/api/v1/query?query=up", None)[0] == 401
        status, said = server.http("GET", "/v1/monitor/alice/k8s/api/v1/query?query=up", token)
        assert status == 404 and "no Prometheus runs for cluster 'k8s'" in said["detail"]
        assert server.http("POST", "/v1/monitor/alice/k8s/api/v1/admin/tsdb/delete_series", token, {})[0] == 404
        assert server.http("POST", "/v1/verbs/monitor", token, {"args": ["k8s", "--port=9090"], "files": []})[0] == 400
    finally:
        server.stop()


def test_a_member_names_no_directory_of_the_server_as_a_store_in_a_flag_or_a_policy(tmp_path):
    """Through a real server: `--storage DIR` and a policy's `stores.named.local: DIR` would put a
    member's checkpoints in any directory of the server's (another member's included); each is one
    line, and nothing is made."""
    from tests.support.burst_server import Server
    from tests.support.cli_runs import burst

    server = Server(tmp_path)
    server.admin("team", "cern")
    (tmp_path / "alice.token").write_text(server.admin("user", "alice", "--team", "cern"))
    server.start()
    home = tmp_path / "alice-machine"
    try:
        burst("login", server.url, "--token-file", str(tmp_path / "alice.token"), home=home, cwd=tmp_path, check=True)
        policy = tmp_path / "p.yaml"
        policy.write_text(f"stores:\n  named:\n    local: {server.data}\n")
        for args, said in ((("plan", "--policy", str(policy)), "policy field stores: through a burst server"),
                           (("up", "--provider", "local", "--storage", str(server.data)), f"--storage {server.data}: through a burst server"),
                           (("up", "--provider", "local", "--storage", f"file://{server.data}"), "not a directory of the server's")):
            refused = burst(*args, home=home, cwd=tmp_path)
            assert refused.returncode != 0 and said in refused.stderr, refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
        assert not list(server.data.glob("users/*/clusters/*.json"))  # nothing was brought up
    finally:
        server.stop()


HANGING_SSH = ["sleep", "299.5"]  # the hanging login host's stand-in, by a command line no other test's uses


def test_a_server_that_dies_while_it_runs_a_verb_is_one_line_saying_what_runs_on_and_answers_once_started_again(tmp_path, monkeypatch):
    """A forwarded verb that takes a while (`burst status` asking a Slurm site whose login host
    takes the ssh and never answers: up to its 10 s wait) and the server SIGKILLed meanwhile: the
    client says in one line that the server went away before it answered and that what it started
    runs on, not that it cannot be reached (start it, log out); started again, the server answers."""
    import json
    import os
    import signal
    import time

    from burst.home.state import ClusterHandle
    from burst.values.site import OnPrem
    from tests.support import census
    from tests.support.burst_server import Server
    from tests.support.cli_runs import burst
    from tests.support.records import save

    hanging = tmp_path / "bin"
    hanging.mkdir()
    (hanging / "ssh").write_text(f"#!/bin/sh\nexec {' '.join(HANGING_SSH)}\n")
    (hanging / "ssh").chmod(0o755)
    path = {"PATH": f"{hanging}{os.pathsep}{os.environ['PATH']}"}
    server = Server(tmp_path)
    server.admin("team", "cern")
    (tmp_path / "alice.token").write_text(server.admin("user", "alice", "--team", "cern"))
    server.start(env=path)
    home = tmp_path / "alice-machine"
    before = census.snapshot()
    try:
        burst("login", server.url, "--token-file", str(tmp_path / "alice.token"), home=home, cwd=tmp_path, check=True)
        assert json.loads(burst("status", "--json", home=home, cwd=tmp_path, check=True).stdout)["clusters"] == []
        (member,) = (server.data / "users").iterdir()  # alice's state on the server
        monkeypatch.setenv("BURST_HOME", str(member))
        site = OnPrem(name="lab", accelerator="V100", gpus=8, scheduler="slurm", login="login.example.org")
        save(ClusterHandle(name="lab", provider="slurm", cluster_id="slurm0001", state="running", storage_uri=str(tmp_path / "s"),
                           outputs={"site": site.model_dump(mode="json"), "job_id": "7"}))
        asked = subprocess.Popen([sys.executable, "-m", "burst.cli", "status"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "BURST_HOME": str(home)}, cwd=tmp_path)
        deadline = time.time() + 30
        while not census.started_since(before, HANGING_SSH):  # the server asks the site
            assert time.time() < deadline and asked.poll() is None, "the server never asked the site"
            time.sleep(0.2)
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        out, err = asked.communicate(timeout=60)
        assert asked.returncode == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert f"the burst server at {server.url} went away before it answered" in err and "runs on there" in err, err
        assert "cannot be reached" not in err
        server.start(env=path)
        again = burst("status", "--json", home=home, cwd=tmp_path, check=True, timeout=120)
        assert [c["name"] for c in json.loads(again.stdout)["clusters"]] == ["lab"]  # unreachable, and said so after its wait
    finally:
        server.stop()
        for proc in census.started_since(before, HANGING_SSH):  # the ssh stand-ins the verbs left asking
            proc.kill()
