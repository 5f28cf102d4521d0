"""The burst server for a group, for real: a real PostgreSQL (Debian's, started by initdb in a
temporary directory), a real server process (uvicorn), the real command line as each member's
client, real local Ray clusters and a real training run stopped by the team's budget."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from burst.runtime.ray_head import free_port
from tests.support import census, kube_site, postgres, slurm_site
from tests.support.burst_server import Server, add_group
from tests.support.cli_runs import TRAIN, burst
from tests.support.slurm_site import needs
from tests.support.storage_servers import gcs_server, new_bucket  # noqa: F401 (a fixture)

pytestmark = needs(postgres.missing())


@pytest.fixture
def group(database, tmp_path):
    """A server on the real PostgreSQL with team cern (alice, bob) and team atlas (carol), each member
    logged in from a state directory of their own (their own machine)."""
    server = Server(tmp_path, database)
    suffix = str(free_port())  # one database for the module: names of this test's own
    names = {who: f"{who}{suffix}" for who in ("alice", "bob", "carol", "cern", "atlas")}
    # the accounts made here, in one session (`burst server admin` itself: the tests that change them, and test_server_cli.py)
    tokens = add_group(database, 1000, names)
    server.start()
    homes = {}
    for who, token in tokens.items():
        homes[who] = tmp_path / f"{who}-machine"
        (tmp_path / f"{who}.token").write_text(token)
        login = burst("login", server.url, "--token-file", str(tmp_path / f"{who}.token"), home=homes[who], cwd=tmp_path)
        assert login.returncode == 0 and f"as {names[who]} " in login.stderr, login.stderr
    try:
        yield server, tokens, homes, names
    finally:
        server.stop()
        for member in (server.data / "users").glob("*"):  # whatever a failed test left running
            if any((member / "clusters").glob("*.json")):
                subprocess.run([sys.executable, "-m", "burst.cli", "down", "--all"], env={**os.environ, "BURST_HOME": str(member)},
                               capture_output=True, timeout=120)


def test_every_request_names_its_user_and_another_team_s_objects_do_not_exist(group, tmp_path):
    server, tokens, homes, names = group
    assert server.http("GET", "/v1/me", None)[0] == 401
    assert server.http("GET", "/v1/me", "burst_not-a-token")[0] == 401
    assert server.http("GET", "/v1/me", tokens["alice"]) == (200, {"user": names["alice"], "team": names["cern"], "role": "member",
                                                                   "uid": server.http("GET", "/v1/me", tokens["alice"])[1]["uid"]})
    expiring = server.admin("token", names["bob"], "--days", "0.00001")  # about a second
    time.sleep(1.5)
    assert server.http("GET", "/v1/me", expiring)[0] == 401
    server.admin("revoke", names["carol"])
    assert server.http("GET", "/v1/clusters", tokens["carol"])[0] == 401
    refused = burst("status", home=homes["carol"], cwd=tmp_path)
    assert refused.returncode == 1 and "refused the token" in refused.stderr and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    # nothing but the database's hashes: the tokens themselves are nowhere on the server's disk or in its database
    from sqlalchemy import create_engine, text

    with create_engine(server.db).connect() as connection:
        digests = {row[0] for row in connection.execute(text("select digest from tokens"))}
    assert all(token not in digests for token in tokens.values()) and len(digests) >= 4
    assert not any(tokens["alice"] in p.read_text(errors="replace") for p in server.data.rglob("*") if p.is_file() and p.suffix != ".db")
    assert oct((homes["alice"] / "server.token").stat().st_mode & 0o777) == "0o600"
    # a damaged row (a budget written around `burst server admin`): the team spends nothing more, each refusal one line
    with create_engine(server.db).begin() as connection:
        connection.execute(text("update teams set monthly_budget_usd = 'NaN' where name = :name"), {"name": names["cern"]})
    costs = burst("costs", "--json", home=homes["alice"], cwd=tmp_path)
    assert costs.returncode == 0, costs.stderr
    (line,) = [l for l in json.loads(costs.stdout)["lines"] if l["key"] == names["cern"]]
    assert line["budget_usd"] == 0.0 and line["spent_usd"] == 0.0
    refused = burst("plan", home=homes["alice"], cwd=tmp_path)
    assert refused.returncode == 3 and f"team {names['cern']}'s budget in the database is nan, not an amount" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    server.admin("budget", names["cern"], "--usd", "1000")
    assert burst("costs", "--json", home=homes["alice"], cwd=tmp_path, check=True).returncode == 0


def test_a_member_reads_no_file_of_the_server_through_a_verb(group, tmp_path):
    server, tokens, homes, names = group
    secret = tmp_path / "servers-own.yaml"
    secret.write_text("budget_usd: 1\n")
    # the client refuses to send a path it cannot send; a raw call gets the served command line's refusal
    here = burst("plan", "--catalog", str(secret), home=homes["alice"], cwd=tmp_path)
    assert here.returncode == 2 and "--catalog names a file on this machine" in here.stderr
    status, answer = server.http("POST", "/v1/verbs/plan", tokens["alice"], {"args": ["--catalog", str(secret)], "files": []})
    assert status == 200 and answer["rc"] != 0 and "the server's own files are not yours to read" in answer["stderr"]
    for data in (str(tmp_path), f"file://{tmp_path}", f"FILE://{tmp_path}"):
        status, answer = server.http("POST", "/v1/verbs/train", tokens["alice"], {"args": ["gan3d", "--data", data], "files": []})
        assert answer["rc"] != 0 and "not a server directory" in answer["stderr"], (data, answer)
    here = burst("train", "gan3d", f"--data=file://{tmp_path}", home=homes["alice"], cwd=tmp_path)
    assert here.returncode != 0 and "cannot read: stage it on a store first" in here.stderr
    assert server.http("POST", "/v1/verbs/pack", tokens["alice"], {"args": []})[0] == 404
    # the site's policy is the admins'; a member's travels with the command and narrows it: the plan is made under both, on the server
    site = tmp_path / "site.yaml"
    site.write_text("providers: [local, gcp]\nlocal: {usd_per_hour: 0.01}\n")
    server.admin("policy", str(site))
    policy = tmp_path / "mine.yaml"
    policy.write_text("providers: [local]\n")
    planned = burst("plan", "--policy", str(policy), "--json", home=homes["alice"], cwd=tmp_path)
    assert planned.returncode == 0, planned.stdout[-2000:] + planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["choice"]["provider"] == "local"
    assert plan["budget_usd"] == 1000  # the team's month, nothing spent yet: the plan is held to it


@pytest.mark.slow
def test_two_teams_share_a_server_and_one_team_s_budget_stops_both_members_with_the_run_checkpointed_first(group, slurm, gcs_server,
                                                                                                          tmp_path, monkeypatch):
    """alice's cluster runs on the server's machine with its store in a bucket (the GCS emulator),
    bob's on the group's Slurm site with the site's disk: the team's budget stops both, alice's run
    checkpointing into the bucket first, bob's allocation given back to the site."""
    server, tokens, homes, names = group
    server.stop()
    server.start(env={**slurm.env, **gcs_server.env})  # the login node's server: the site's commands, the group's bucket
    for k, v in gcs_server.env.items():  # this test reads the bucket too
        monkeypatch.setenv(k, v)
    bucket = new_bucket("gs", gcs_server.env)
    before = census.snapshot()
    policy = slurm.policy(tmp_path / "priced.yaml")
    policy.write_text(policy.read_text().replace("usd_per_gpu_hour: 0.5", "usd_per_gpu_hour: 360") + "local: {usd_per_hour: 360}\n")
    server.admin("policy", str(policy))  # the site and its prices are the admins' word
    # 10 cents a second a cluster; both call their cluster k8s, each from their own machine
    for who, where in (("alice", ["--provider", "local", "--cpus", "2", "--storage", f"{bucket}/alice"]), ("bob", ["--provider", "slurm"])):
        up = burst("up", *where, "--name", "k8s", "--hours", "1", home=homes[who], cwd=tmp_path)
        assert up.returncode == 0, up.stderr
        assert f"cluster k8s ({where[1]}) started" in up.stderr, up.stderr
    assert len(slurm.jobs()) == 1  # bob's allocation on the site
    seen = {who: json.loads(burst("team", "--json", home=homes[who], cwd=tmp_path, check=True).stdout) for who in homes}
    assert sorted((c["owner"], c["name"], c["provider"]) for c in seen["alice"]) == [(names["alice"], "k8s", "local"),
                                                                                    (names["bob"], "k8s", "slurm")]
    assert seen["bob"] == seen["alice"] or len(seen["bob"]) == 2
    assert seen["carol"] == []  # the other team's clusters do not exist for carol
    assert server.http("DELETE", f"/v1/clusters/{names['alice']}/k8s", tokens["carol"])[0] == 404
    assert server.http("DELETE", f"/v1/clusters/{names['alice']}/k8s", tokens["bob"])[0] == 403
    # alice trains on her cluster; bob's sits idle
    run = burst("train", "gan3d", "--cluster", "k8s", "--detach", "--epochs", "1000", "--steps", "8", *TRAIN, home=homes["alice"], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    wait_for(lambda: any(r["state"] == "RUNNING" and (r.get("progress") or {}).get("epoch") for r in status_of(homes["alice"], tmp_path)["runs"]),
             240, "alice's run to train an epoch")
    # she watches it through the server: her cluster's Prometheus runs there (`burst monitor` as her), read with her
    # token through the server's API; her teammate may read it, another team may not, and nothing but the read API passes
    query = prometheus_read(server, names["alice"], "k8s", "sum(ray_burst_samples_per_second)")
    if shutil.which("prometheus") or os.environ.get(slurm_site.REQUIRED) == "1":  # Debian's prometheus: CI has it, elsewhere this part is left out
        shown = json.loads(burst("monitor", "k8s", "--json", home=homes["alice"], cwd=tmp_path, check=True).stdout)
        assert shown["url"] == f"{server.url}/v1/monitor/{names['alice']}/k8s" and shown["owner"] == names["alice"]
        said = burst("monitor", "k8s", home=homes["alice"], cwd=tmp_path, check=True).stdout  # the one running: one per cluster
        assert f"{shown['url']}/api/v1/ (send your token" in " ".join(said.split())
        wait_for(lambda: float((query(tokens["alice"])[1].get("data", {}).get("result") or [{"value": [0, "0"]}])[0]["value"][1]) > 0, 90,
                 "the run's samples/s through the server's Prometheus read API")
        assert query(tokens["bob"])[0] == 200 and query(tokens["carol"])[0] == 404 and query(None)[0] == 401
        posted = server.http("POST", f"/v1/monitor/{names['alice']}/k8s/api/v1/query", tokens["bob"], form={"query": "up"})  # Grafana's default
        assert posted[0] == 200 and posted[1]["status"] == "success", posted
        assert server.http("GET", f"/v1/monitor/{names['alice']}/k8s/api/v1/admin/tsdb/snapshot", tokens["alice"])[0] == 404
        dashboard = server.http("GET", f"/v1/monitor/{names['alice']}/k8s/dashboards/burst_grafana_dashboard.json", tokens["bob"])
        assert dashboard[0] == 200 and dashboard[1]["panels"]
        refused = burst("monitor", "k8s", "--port", "9999", home=homes["alice"], cwd=tmp_path)
        assert refused.returncode == 2 and "drop --port" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    costs = json.loads(burst("costs", "--json", home=homes["bob"], cwd=tmp_path, check=True).stdout)
    (line,) = [l for l in costs["lines"] if l["key"] == names["cern"]]
    # the reserve (a checkpoint and a tear-down of both clusters, at 10 cents a second) and 5 dollars more to spend
    from burst.lifecycle.budget import CHECKPOINT_RESERVE_S, teardown_seconds

    reserve = sum(0.1 * (CHECKPOINT_RESERVE_S + teardown_seconds(provider)) for provider in ("local", "slurm"))
    budget = round(line["spent_usd"] + reserve + 5, 2)
    server.admin("budget", names["cern"], "--usd", str(budget))
    wait_for(lambda: json.loads(burst("team", "--json", home=homes["alice"], cwd=tmp_path, check=True).stdout) == [], 180,
             "the team's clusters to be stopped")
    after = json.loads(burst("costs", "--json", home=homes["alice"], cwd=tmp_path, check=True).stdout)
    (line,) = [l for l in after["lines"] if l["key"] == names["cern"]]
    assert line["spent_usd"] <= budget and line["committed_usd"] == 0, (line, budget)
    log = server.log.read_text()
    for who, provider in (("alice", "local"), ("bob", "slurm")):
        assert f"stopping {names[who]}'s cluster k8s ({provider}): team {names['cern']}'s budget of ${budget:,.2f}" in log, log[-3000:]
    assert slurm.jobs() == []  # bob's allocation given back to the site
    assert query(tokens["alice"])[0] == 404  # her Prometheus went with her cluster
    (run_file,) = (server.data / "users").glob("*/runs/gan3d-*.json")
    alice_uid = server.http("GET", "/v1/me", tokens["alice"])[1]["uid"]
    assert run_file.parent.parent.name == alice_uid and f"-{alice_uid}" in run_file.stem  # her id in its directories on shared stores
    from burst.runtime import storage

    stopped = json.loads(storage.read_text(f"{bucket}/alice/runs/{run_file.stem}/checkpoint/stopped.json"))  # in the bucket
    assert stopped["reason"] == "request" and stopped["step"] % 5 == 0  # the workers agreed on a step and checkpointed it before the cluster went
    # nothing left to spend: the next up is refused, in one line, before anything starts
    refused = burst("up", "--provider", "local", "--name", "more", "--cpus", "1", home=homes["bob"], cwd=tmp_path)
    assert refused.returncode == 3 and "nothing left to spend" in refused.stderr, refused.stderr
    assert not list((server.data / "users").glob("*/clusters/more.json"))
    census.assert_none_left(before)


def test_two_members_bring_up_k8s_in_the_site_s_one_namespace_through_the_server_and_the_other_team_sees_neither(group, tmp_path):
    """The Kubernetes stand-ins (kubectl and helm as documented) behind the server: alice and bob
    both `burst up --provider kubernetes` (the default name, k8s) into the site's namespace through
    the server; each cluster's objects carry its own id, both are listed for the team with their
    owners, carol's team sees neither, alice's `down` leaves bob's objects, and the team's budget,
    spent, has the server take bob's cluster down."""
    server, tokens, homes, names = group
    fake = tmp_path / "kube"
    fake.mkdir()
    kube_site.site_operator(fake)
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    server.stop()
    server.start(env=kube_site.env(fake))  # the server's machine has kubectl and helm on its PATH
    site = tmp_path / "site.yaml"
    site.write_text(kube_site.SITE % "")
    server.admin("policy", str(site))  # the site is the admins' word
    ids = {}
    for who in ("alice", "bob"):
        up = burst("up", "--provider", "kubernetes", "--gpus", "4", "--json", home=homes[who], cwd=tmp_path)
        assert up.returncode == 0, up.stderr
        handle = json.loads(up.stdout)
        assert handle["name"] == "k8s"
        ids[who] = handle["cluster_id"]
    everything = kube_site.left_on(fake)
    mine = {who: [o for o in everything if ids[who] in o] for who in ids}
    assert len(mine["alice"]) == len(mine["bob"]) == 6 and not set(mine["alice"]) & set(mine["bob"])
    seen = json.loads(burst("team", "--json", home=homes["bob"], cwd=tmp_path, check=True).stdout)
    assert sorted((c["owner"], c["name"], c["provider"]) for c in seen) == [(names["alice"], "k8s", "kubernetes"),
                                                                           (names["bob"], "k8s", "kubernetes")]
    assert json.loads(burst("team", "--json", home=homes["carol"], cwd=tmp_path, check=True).stdout) == []
    down = burst("down", "k8s", home=homes["alice"], cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert kube_site.left_on(fake) == sorted(set(everything) - set(mine["alice"]))  # bob's six objects untouched
    server.admin("budget", names["cern"], "--usd", "0")  # the team's money is gone: the server's guard takes bob's cluster down
    wait_for(lambda: json.loads(burst("team", "--json", home=homes["bob"], cwd=tmp_path, check=True).stdout) == [], 120,
             "bob's cluster to be stopped by the team's budget")
    assert f"stopping {names['bob']}'s cluster k8s (kubernetes): team {names['cern']}'s budget" in server.log.read_text()
    assert kube_site.left_on(fake) == ["ray-system_deployment_kuberay-operator"]


@pytest.mark.slow
def test_of_two_servers_on_one_database_one_guards_the_money_and_the_other_takes_over_when_it_is_killed(group, tmp_path):
    first, tokens, homes, names = group  # the first server, started by the fixture, guards
    second = Server(tmp_path, first.db, name="second").start()
    try:
        wait_for(lambda: "the team budget guard runs in another server on this database" in second.log.read_text(), 30,
                 "the second server to stand by")
        assert "the team budget guard runs in this server" in first.log.read_text()
        policy = tmp_path / "priced.yaml"
        policy.write_text("providers: [local]\nlocal: {usd_per_hour: 360}\n")
        first.admin("policy", str(policy))
        up = burst("up", "--provider", "local", "--name", "k8s", "--cpus", "1", home=homes["bob"], cwd=tmp_path)
        assert up.returncode == 0, up.stderr
        _holds_no_server_secret(first)
        os.killpg(first.proc.pid, signal.SIGKILL)  # the guarding server dies at once: its database connection, and lock, with it
        first.proc.wait()
        wait_for(lambda: "the team budget guard runs in this server" in second.log.read_text(), 30, "the second server to take over")
        server_of_bob = burst("login", second.url, "--token-file", str(tmp_path / "bob.token"), home=homes["bob"], cwd=tmp_path)
        assert server_of_bob.returncode == 0, server_of_bob.stderr
        costs = json.loads(burst("costs", "--json", home=homes["bob"], cwd=tmp_path, check=True).stdout)
        (line,) = [l for l in costs["lines"] if l["key"] == names["cern"]]
        second.admin("budget", names["cern"], "--usd", str(round(line["spent_usd"] + 1, 2)))  # less than the reserve: stop now
        wait_for(lambda: json.loads(burst("team", "--json", home=homes["bob"], cwd=tmp_path, check=True).stdout) == [], 120,
                 "bob's cluster to be stopped by the second server")
        assert f"stopping {names['bob']}'s cluster k8s (local)" in second.log.read_text()
    finally:
        second.stop()


def test_a_controller_leaves_a_run_another_server_s_controller_holds_in_the_database(database, tmp_path):
    """Servers on two machines share the members' state: a controller started for a run that a
    controller of the other server holds (its advisory lock, on that process's own connection)
    leaves the run untouched; once that connection is gone, a server's look finds the run free."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from burst.unattended import managed, run_lock

    home = tmp_path / "member"
    env = {**os.environ, "BURST_HOME": str(home), run_lock.ENV: database}
    run_id = f"gan3d-20261129-000000-{free_port():05d}"
    record = home / "managed" / f"{run_id}.json"
    record.parent.mkdir(parents=True)
    record.write_text(managed.ManagedRun(run_id=run_id, request={"workload": "gan3d", "cluster": "held"}, cluster="held",
                                         cwd=str(tmp_path)).model_dump_json())
    before = record.read_text()
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from burst.unattended.run_lock import RunLock\n"
                               f"hold = RunLock({database!r}, {run_id!r})\nprint(hold.take(), flush=True)\nsys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "True"  # the other server's controller holds the run
        controller = subprocess.run([sys.executable, "-m", "burst.controller", "run", run_id], env=env, cwd=tmp_path,
                                    capture_output=True, text=True, timeout=120)
        assert controller.returncode == 0 and "is controlled from another server" in controller.stdout, controller.stdout + controller.stderr
        assert record.read_text() == before and not (home / "managed" / f"{run_id}.log").exists()  # nothing done, nothing said as a move
        engine = create_engine(database, poolclass=NullPool)
        with engine.connect() as connection:
            assert not run_lock.free(connection, run_id)
        holder.kill()  # its machine goes: the connection, and the hold, with it
        holder.wait()
        deadline = time.time() + 30
        while not run_lock.free(free_look := engine.connect(), run_id) and time.time() < deadline:
            free_look.close()
            time.sleep(0.5)
        free_look.close()
        assert time.time() < deadline, "the run's lock was not freed when its holder died"
    finally:
        holder.kill()


def test_the_guarding_server_s_lock_holds_no_transaction_open_between_looks(database):
    """The guard's advisory lock lives on a connection the server keeps for its whole life; a look
    (`select 1`) must not leave it idle in a transaction, which would keep VACUUM from cleaning up."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from burst.server.guard import GUARD_LOCK, Leadership

    leadership = Leadership(create_engine(database, poolclass=NullPool))
    admin = create_engine(database, poolclass=NullPool)
    guard_lock = f"select pid from pg_locks where locktype = 'advisory' and objid = {GUARD_LOCK & 0xFFFFFFFF}"
    with admin.connect() as c:  # another test's server may guard this database: wait for it to be gone (pg_locks is live)
        wait_for(lambda: c.exec_driver_sql(guard_lock).scalar() is None, 30, "the database to have no guard")
    try:
        assert leadership.held() and leadership.held()  # taken, then looked at
        with admin.connect() as c:
            pid = c.exec_driver_sql(guard_lock).scalar()
            assert c.exec_driver_sql(f"select state from pg_stat_activity where pid = {pid}").scalar() == "idle"
    finally:
        leadership.release()


def test_a_controller_whose_hold_broke_and_went_to_another_stops(database, tmp_path):
    """The database dropped a controller's connection (restarted, or a network cut) and another
    server's controller took the run meanwhile: the first sees it at its next look and stops; one
    that finds the run free again takes it back and holds on."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from burst.unattended import run_lock

    script = ("import os, sys, time\nfrom burst.unattended.run_lock import RunLock\n"
              f"hold = RunLock({database!r}, sys.argv[1])\nassert hold.take()\n"
              "print(os.getpid(), flush=True)\n"
              "hold.keep(lambda: (print('lost', flush=True), os._exit(0)))\ntime.sleep(60)\nprint('held', flush=True)\n")
    admin = create_engine(database, poolclass=NullPool)

    def backend_of(run_id: str) -> int:  # the database process of the connection holding the run's lock
        with admin.connect() as c:
            return c.exec_driver_sql("select pid from pg_locks where locktype = 'advisory' and granted and "
                                     f"((classid::bigint << 32) | objid::bigint) = ({run_lock.key_of(run_id)}::bigint)").scalar()

    taken_over, kept = f"run-a-{free_port()}", f"run-b-{free_port()}"
    procs = {run_id: subprocess.Popen([sys.executable, "-c", script, run_id], stdout=subprocess.PIPE, text=True)
             for run_id in (taken_over, kept)}
    try:
        for proc in procs.values():
            assert proc.stdout.readline().strip().isdigit()
        with admin.connect() as c:
            for run_id in procs:
                assert c.exec_driver_sql(f"select pg_terminate_backend({backend_of(run_id)})").scalar()
            c.commit()
        other = admin.connect()  # another server's controller takes the first run at once
        assert other.exec_driver_sql(f"select pg_try_advisory_lock({run_lock.key_of(taken_over)})").scalar()
        other.commit()
        assert procs[taken_over].stdout.readline().strip() == "lost" and procs[taken_over].wait(30) == 0
        wait_for(lambda: backend_of(kept) is not None, run_lock.CHECK_S * 3, "the second to take its free run back")
        assert procs[kept].poll() is None
        time.sleep(run_lock.CHECK_S + 1)  # a look at its hold since: between looks it holds no transaction open
        with admin.connect() as c:  # (one left open for the run's days would keep VACUUM from cleaning up)
            assert c.exec_driver_sql(f"select state from pg_stat_activity where pid = {backend_of(kept)}").scalar() == "idle"
        with admin.connect() as c:
            assert not run_lock.free(c, kept)
        other.close()
    finally:
        for proc in procs.values():
            proc.kill()


@pytest.mark.slow
def test_a_server_started_again_revives_the_watcher_its_machine_lost_and_the_idle_cluster_still_goes(group, tmp_path):
    server, tokens, homes, names = group
    site = tmp_path / "site.yaml"
    site.write_text("providers: [local]\n")  # the server's own machine is a member's target only where its admins say so
    server.admin("policy", str(site))
    up = burst("up", "--provider", "local", "--name", "idle", "--cpus", "1", "--idle-minutes", "0.4", "--json", home=homes["alice"], cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    watcher = json.loads(up.stdout)["watcher_pid"]
    # the server's machine loses both: the server and, as a reboot would, the member's watcher
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    os.kill(watcher, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(watcher) or psutil.Process(watcher).status() == psutil.STATUS_ZOMBIE, 10, "the watcher to die")
    server.start()
    wait_for(lambda: f"{names['alice']}: the watcher of cluster idle started again" in server.log.read_text(), 60, "the watcher's revival")
    wait_for(lambda: json.loads(burst("team", "--json", home=homes["alice"], cwd=tmp_path, check=True).stdout) == [], 120,
             "the revived watcher to take the idle cluster down")


@pytest.fixture(scope="module")
def slurm():
    """The group's Slurm site (a real controller and node daemon, as tests/burst/targets/test_slurm.py starts them)."""
    why = slurm_site.missing()
    slurm_site.needs(why)
    if why:
        pytest.skip(why)
    started = slurm_site.start()
    yield started
    slurm_site.stop(started)


def _server_dies_with_the_controller_of(server: Server, member: Path, run_id: str) -> int:
    """The server's machine loses the service at once: the server, the verbs it was answering and the
    run's controller, all SIGKILLed (the unit's own KillMode=process would spare the controller on a
    plain stop; a crash or an OOM kill of the machine's services does not): returns the controller's pid."""
    pid = json.loads((member / "managed" / f"{run_id}.json").read_text())["controller_pid"]
    # and what it runs for its members: the verbs it is answering (a member's `burst run` following its run)
    verbs = [p for p in psutil.Process(server.proc.pid).children(recursive=True) if "burst.cli" in " ".join(p.cmdline())]
    os.killpg(server.proc.pid, signal.SIGKILL)
    for proc in verbs:
        proc.kill()
    os.kill(pid, signal.SIGKILL)
    server.proc.wait()
    wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10, "the controller to die")
    return pid


@pytest.mark.slow
def test_a_managed_run_on_the_slurm_site_outlives_its_servers_killed_while_it_trains_and_again_in_the_middle_of_its_move(group, slurm, tmp_path):
    """The group runs two servers on one database and one shared disk (two login nodes). alice's
    managed run goes to the group's Slurm site through the first, her CLI waiting for its end and
    her machine asleep (SIGSTOP) from the run's start to its end. The first server dies with the
    run's controller while the job trains: the second, which never stopped, finds the run's lock in
    the database free and takes the run over; its controller follows the same attempt (the job
    trains on, no epoch again; its worker is held still while the servers change hands, so that
    epochs are left for the move). The site then cancels the allocation; the controller sees the loss
    and starts moving the run to the servers' machine, and the second server dies with the
    controller while the new cluster starts. The first, started again, revives the controller,
    which takes over the cluster that came up without its starter and resumes the run there from
    the newest checkpoint: every epoch once, one controller at a time, two attempts, both clusters
    gone, the site's queue empty, nothing left running. alice's CLI, woken, says in one line that
    the server went away before it answered and that the run ran on."""
    server, tokens, homes, names = group
    server.stop()
    server.start(env=slurm.env)  # the login nodes' servers: Slurm's commands reach the site
    second = Server(tmp_path, server.db, name="second").start(env=slurm.env)
    try:
        _a_managed_run_outlives_two_servers(server, second, slurm, homes, names, tmp_path)
    finally:
        second.stop()
        _kill_what_ran_from(tmp_path)  # a failure midway leaves alice's CLI (asleep), the run's controller and its cluster


def _kill_what_ran_from(tmp_path: Path) -> None:
    """SIGKILL every process whose state directory (``BURST_HOME``) is under ``tmp_path``: none once the test passed."""
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("BURST_HOME", "").startswith(str(tmp_path)):
                proc.kill()
        except psutil.Error:
            continue


EPOCHS = 6  # the site cancels once the controller has recorded two: several are left to train on the new target


def _train_worker_of(member: Path, cluster: str) -> psutil.Process:
    """The Ray Train worker of the member's cluster ``cluster`` (not of another test's cluster on this machine)."""
    from burst.runtime.ray_head import cluster_processes

    handle = json.loads((member / "clusters" / f"{cluster}.json").read_text())

    def title(proc: psutil.Process) -> str:
        try:
            return " ".join(proc.cmdline())
        except psutil.Error:  # one of Ray's short-lived helpers, gone already
            return ""

    workers = [p for p in cluster_processes(handle["cluster_id"], handle.get("temp_dir")) if "RayTrainWorker" in title(p)]
    assert len(workers) == 1, [p.cmdline() for p in workers]
    return workers[0]


def _a_managed_run_outlives_two_servers(server: Server, second: Server, slurm, homes: dict, names: dict, tmp_path: Path) -> None:
    before = census.snapshot()
    server.admin("policy", str(slurm.policy(tmp_path / "site.yaml")))  # the site is the admins' word
    # alice's CLI waits for the run's end through the first server, and her machine sleeps (SIGSTOP) through all of it
    cli = subprocess.Popen([sys.executable, "-m", "burst.cli", "run", "gan3d", "--provider", "slurm", "--name", "mv",
                            "--hours", "1", "--managed", "--epochs", str(EPOCHS), "--steps", "8", "--checkpoint-every", "3", *TRAIN],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "BURST_HOME": str(homes["alice"])},
                           cwd=tmp_path)
    def handed() -> list[Path]:  # the managed run's record (beside it: its policy, its lock, its log)
        return [p for p in (server.data / "users").glob("*/managed/*.json") if not p.name.endswith(".policy.json")]
    wait_for(handed, 120, "the run handed to its controller")
    os.kill(cli.pid, signal.SIGSTOP)
    (record,) = handed()
    run_id, member = record.stem, record.parents[1]  # alice's state, on the servers' shared disk
    run_file, managed_log = member / "runs" / f"{run_id}.json", member / "managed" / f"{run_id}.log"
    said = f"{names['alice']}: the controller of managed run {run_id} started again"

    def epochs_done() -> int:
        return (json.loads(run_file.read_text()).get("progress") or {}).get("epoch") or 0

    def revived_by(survivor: Server, killed: int) -> None:
        times = survivor.log.read_text().count(said)  # a log goes on across its server's lives
        if survivor.proc.poll() is not None:
            survivor.start(env=slurm.env)
        wait_for(lambda: survivor.log.read_text().count(said) > times, 120, "the server left to revive the run's controller")
        assert json.loads((member / "managed" / f"{run_id}.json").read_text())["controller_pid"] != killed

    wait_for(lambda: epochs_done() >= 1, 300, "an epoch on the site")
    assert said not in second.log.read_text()  # while the run's controller lived, the second server left it alone
    # The job's training worker is held still (SIGSTOP) while the servers change hands: a revival takes 10 s or more (the
    # keeper leaves a record written in the last 15 s alone), three epochs or more of this run, and the site's cancel
    # below must leave epochs to train on the new target (a job cancelled in its final validation resumes with none).
    worker = _train_worker_of(member, "mv")
    worker.suspend()
    try:
        revived_by(second, _server_dies_with_the_controller_of(server, member, run_id))
    finally:
        worker.resume()
    assert "took the run over" in second.log.read_text()  # by its look at the runs, not at a start
    wait_for(lambda: epochs_done() >= 2, 300, "an epoch recorded by the controller the second server started")
    assert epochs_done() <= EPOCHS - 3  # the record trails the job by a look or two: epochs are left after the cancel
    (job,) = [j.split("|")[0] for j in slurm.jobs()]
    cancelled_at = time.time()
    slurm.slurm("scancel", job)  # the site takes the allocation back; the controller sees it and moves the run
    # the move's longest part is the new cluster's start (`ray start`, its dashboard): the second server dies in it
    wait_for(lambda: "attempt 2: starting cluster mv-2 on local" in managed_log.read_text(), 120, "the controller to start moving the run")
    revived_by(server, _server_dies_with_the_controller_of(second, member, run_id))

    wait_for(lambda: json.loads((member / "managed" / f"{run_id}.json").read_text())["phase"] == "finished", 400, "the run to finish")
    run = json.loads(run_file.read_text())
    assert run["state"] == "SUCCEEDED", (run["state"], run.get("message"), managed_log.read_text()[-4000:])  # why, in full: the timeline
    assert [h["epoch"] for h in json.loads((Path(run["run_dir"]) / "history.json").read_text())] == list(range(1, EPOCHS + 1))  # every epoch once
    log = managed_log.read_text()
    assert log.count("controller restarted") == 2 and "following attempt 1" in log and "following attempt 2" in log, log
    m = json.loads((member / "managed" / f"{run_id}.json").read_text())
    # the cluster the dead controller was starting came up without it and was taken over: no third attempt
    assert [(a["provider"], a["cluster"]) for a in m["attempts"]] == [("slurm", "mv"), ("local", "mv-2")], m["attempts"]
    assert m["attempts"][1]["cluster_id"] and m["attempts"][1]["cost_usd"] > 0  # what the dead controller never wrote down
    assert m["attempts"][0]["how"].startswith("lost: Slurm job") and "CANCELLED" in m["attempts"][0]["how"]
    job_log = (Path(run["run_dir"]) / "job.log").read_text()
    starts = [json.loads(line.split("BURST_EVENT ", 1)[1]) for line in job_log.splitlines() if '"type": "start"' in line]
    assert starts and all(s["resumed"] and s["epoch"] >= 1 for s in starts), starts  # the local attempt went on from a checkpoint
    assert m["attempts"][1]["first_step"] is not None, log  # and trained there, not only validated
    cost = json.loads((Path(run["run_dir"]) / "cost.json").read_text())
    assert [a["provider"] for a in cost["attempts"]] == ["slurm", "local"] and cost["attempts"][0]["cost_usd"] > 0
    logs = burst("logs", run_id, home=homes["alice"], cwd=tmp_path)  # through the server: the job's log with the run's moves
    assert logs.returncode == 0 and "managed: " in logs.stdout and "lost after" in logs.stdout, logs.stderr[-2000:]
    print(log)  # the timeline, for the record (pytest -s)
    print(f"scancel to the first step on this machine: {m['attempts'][-1]['first_step'] - cancelled_at:.1f} s")
    status = json.loads(burst("status", "--json", home=homes["alice"], cwd=tmp_path, check=True).stdout)
    assert status["clusters"] == [] and slurm.jobs() == []  # both clusters gone, the site's queue empty
    assert any("run resumed on local cluster" in line for line in status["moves"][run_id]), status["moves"]
    (moved,) = status["timelines"][run_id]  # the move as times, through the server: judged from Slurm's word, then the local cluster's steps
    assert moved.startswith("attempt 1 on slurm cluster mv, last answered ") and "CANCELLED" in moved and "not yet" not in moved, moved
    # alice's machine wakes: her CLI's request died with the first server; one line says so and that the run ran on
    os.kill(cli.pid, signal.SIGCONT)
    _, err = cli.communicate(timeout=60)
    assert cli.returncode == 1 and len(err.strip().splitlines()) == 1 and "went away before it answered" in err, err
    census.assert_none_left(before, exempt_roots={server.proc.pid, second.proc.pid})


def _holds_no_server_secret(server: Server) -> None:
    """Every process the server runs for its members (the cluster's keeper and Ray's, here) has the
    run-lock role's URL, which may take advisory locks and read nothing, and never the server's own
    database URL."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    members = [p for p in psutil.process_iter(["environ"]) if str(server.data / "users") in ((p.info["environ"] or {}).get("BURST_HOME") or "")]
    assert members, "no member process to look at"
    server_url = make_url(server.db)
    for p in members:
        env = p.info["environ"]
        assert all(server.db not in v and server_url.render_as_string(hide_password=False) not in v for v in env.values()), p
        assert make_url(env["BURST_RUN_LOCK_DB"]).username == "burst_run_locks"
    locks = create_engine(members[0].info["environ"]["BURST_RUN_LOCK_DB"])
    with locks.connect() as connection:
        assert connection.execute(text("select pg_try_advisory_lock(42)")).scalar() is True
    for table in ("users", "tokens", "teams", "clusters", "reservations"):
        with locks.connect() as connection, pytest.raises(Exception, match="permission denied"):
            connection.execute(text(f"select * from {table}"))
    locks.dispose()


def prometheus_read(server: Server, owner: str, cluster: str, promql: str):
    """An instant query of ``owner``'s cluster's Prometheus through the server, as a token's holder: (status, answer)."""
    from urllib.parse import urlencode

    return lambda token: server.http("GET", f"/v1/monitor/{owner}/{cluster}/api/v1/query?{urlencode({'query': promql})}", token)


def status_of(home: Path, cwd: Path) -> dict:
    return json.loads(burst("status", "--json", home=home, cwd=cwd, check=True).stdout)


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")
