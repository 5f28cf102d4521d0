"""How long the web view's pages take to answer with a group's worth of state behind them.

    python benchmarks/web_pages.py [--runs 100] [--clusters 20] [--users 10] [--repeat 20]

A real ``burst server`` (its own SQLite, one uvicorn process) gets ``--users`` members in three
teams, ``--runs`` finished run records and ``--clusters`` clusters (half still running) spread
over the members' state directories, written as burst writes them (``burst.home.state``: the run
records and the clusters' journal). A member signs in, as a browser does, and every page is asked
``--repeat`` times: printed, the median and the slowest answer in milliseconds and the page's
size. A run's live part (``/ui/runs/RUN/live``) starts ``burst.server.peek`` as the run's owner
for each look the cache does not answer; it is timed with the cache spent. Also printed: the CPU,
so that a figure is read against the machine it came from.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cpu() -> str:
    name = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def _populate(data: Path, users: int, runs: int, clusters: int) -> tuple[tuple[str, str], list[str]]:
    """The accounts in the server's database, and records in the members' directories; the tokens
    of alice (a member) and of lead (an admin, who sees every team), and every run id."""
    from burst.home import state
    from burst.home.state import ClusterHandle, RunRecord
    from burst.server import accounts, serve, verbs

    data.mkdir(mode=0o700)
    with serve.open_database(serve.default_db(data))[1]() as db:
        for team in ("cern", "atlas", "cms"):
            accounts.add_team(db, team, 5000)
        people = []
        for i in range(users):
            name = "alice" if i == 0 else f"user{i}"
            people.append(accounts.add_user(db, name, ("cern", "atlas", "cms")[i % 3]))
        accounts.add_user(db, "lead", "cern", role="admin")
        token = accounts.new_token(db, "alice"), accounts.new_token(db, "lead")
    now = time.time()
    run_ids = []
    for i in range(max(runs, clusters)):
        person = people[i % len(people)]
        os.environ["BURST_HOME"] = str(verbs.home_of(data, person.uid))
        if i < clusters:
            state.save(ClusterHandle(name=f"c{i}", provider="local", cluster_id=f"c{i}-{person.uid}", storage_uri=str(data / "store"),
                                     created=now - 3600 * (i % 7 + 1), hourly_usd=2.5, layout={"nodes": 1, "cpus": 2}, state="running"))
            if i % 2:
                state.delete(ClusterHandle, f"c{i}")
        if i < runs:
            run_id = f"gan3d-20261129-{i:06d}-{person.uid}beef"
            state.save(RunRecord(run_id=run_id, workload="gan3d", cluster=f"c{i % max(1, clusters)}", provider="local", job_id=f"raysubmit_{i}",
                                 state="SUCCEEDED", created=now - 3600 * (i % 9 + 1), finished=now - 60, config={"epochs": 6},
                                 progress={"epoch": 6, "epochs": 6, "samples_per_s": 41.0}, hourly_usd=2.5))
            run_ids.append(run_id)
    os.environ.pop("BURST_HOME", None)
    return token, run_ids


def _timed(opener, url: str, repeat: int) -> tuple[float, float, int]:
    took, size = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        with opener.open(url, timeout=120) as answer:
            size = len(answer.read())
        took.append((time.perf_counter() - start) * 1000)
    return statistics.median(took), max(took), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    from burst.runtime.ray_head import free_port

    with tempfile.TemporaryDirectory(prefix="burst-web-") as tmp:
        data = Path(tmp) / "server"
        (token, admin_token), run_ids = _populate(data, args.users, args.runs, args.clusters)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "burst.cli", "server", "start", "--data", str(data), "--port", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        try:
            jar = urllib.request.HTTPCookieProcessor()
            opener = urllib.request.build_opener(jar)
            deadline = time.time() + 60
            while True:
                try:
                    opener.open(base + "/signin", timeout=5).read()
                    break
                except OSError:
                    if time.time() > deadline:
                        raise SystemExit("the server did not answer in 60 s")
                    time.sleep(0.3)
            opener.open(base + "/signin", data=urllib.parse.urlencode({"token": token}).encode(), timeout=30).read()
            runs_page = opener.open(base + "/ui/runs", timeout=60).read().decode()
            shown = len(re.findall(r'<tr data-run="', runs_page))
            print(f"machine: {_cpu()}; {args.users} users in 3 teams, {args.runs} runs, {args.clusters} clusters "
                  f"({args.clusters - args.clusters // 2} running); alice (team cern) sees {shown} runs")
            print(f"{'page':36} {'median ms':>10} {'slowest ms':>11} {'bytes':>8}")
            mine = next(r for r in run_ids if r.endswith(run_ids[0][-12:]))
            for label, path, repeat in (("/ui/clusters", "/ui/clusters", args.repeat), ("/ui/runs", "/ui/runs", args.repeat),
                                        ("/ui/runs/RUN", f"/ui/runs/{mine}", args.repeat), ("/ui/money", "/ui/money", args.repeat),
                                        ("/ui/plan (the form)", "/ui/plan", args.repeat)):
                median, slowest, size = _timed(opener, base + path, repeat)
                print(f"{label:36} {median:10.1f} {slowest:11.1f} {size:8d}")
            admin = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
            admin.open(base + "/signin", data=urllib.parse.urlencode({"token": admin_token}).encode(), timeout=30).read()
            for label, path in (("/ui/clusters (an admin: everyone's)", "/ui/clusters"), ("/ui/runs (an admin: every run)", "/ui/runs"),
                                ("/ui/money (an admin: every team)", "/ui/money")):
                median, slowest, size = _timed(admin, base + path, args.repeat)
                print(f"{label:36} {median:10.1f} {slowest:11.1f} {size:8d}")
            looks = []
            for _ in range(max(3, args.repeat // 5)):
                time.sleep(5.2)  # past the live cache: every look starts burst.server.peek as the run's owner
                looks.append(_timed(opener, base + f"/ui/runs/{mine}/live", 1))
            print(f"{'/ui/runs/RUN/live (uncached)':36} {statistics.median(l[0] for l in looks):10.1f} {max(l[1] for l in looks):11.1f} "
                  f"{looks[-1][2]:8d}")
        finally:
            os.killpg(server.pid, 15)
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
