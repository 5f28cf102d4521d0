import json
import multiprocessing as mp

import pytest

from burst.home import state
from burst.errors import BurstError
from burst.home.state import ClusterHandle, RunRecord


@pytest.fixture(autouse=True)
def burst_home(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_roundtrip_and_listing():
    h = ClusterHandle(name="a", provider="local", cluster_id="x", storage_uri="/tmp/s")
    state.save(h)
    assert state.load(ClusterHandle, "a") == h
    assert [c.name for c in state.load_all(ClusterHandle)] == ["a"]
    state.delete(ClusterHandle, "a")
    assert state.load(ClusterHandle, "a") is None


def test_corrupt_state_file_is_a_clear_error(burst_home):
    (burst_home / "clusters").mkdir(parents=True)
    (burst_home / "clusters" / "bad.json").write_text("{not json")
    with pytest.raises(BurstError, match=r"cluster record .*bad.json is damaged \(not valid JSON"):
        state.load(ClusterHandle, "bad")


def _hammer(home: str, worker: int, n: int) -> None:
    import os

    os.environ["BURST_HOME"] = home
    for i in range(n):
        with state.locked():
            run = state.load(RunRecord, "shared") or RunRecord(run_id="shared", workload="gan3d", cluster="c", provider="local")
            run.progress = {**run.progress, f"w{worker}": i + 1}
            state.save(run)


def test_concurrent_writers_never_corrupt_or_lose_updates(burst_home):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(str(burst_home), w, 40)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    run = state.load(RunRecord, "shared")
    assert run.progress == {"w0": 40, "w1": 40, "w2": 40}
    assert not list((burst_home / "runs").glob(".*"))  # no temp files left behind
    json.loads((burst_home / "runs" / "shared.json").read_text())


def _claim(home: str, worker: int, results) -> None:
    import os

    os.environ["BURST_HOME"] = home
    mine = ClusterHandle(name="same", provider="local", cluster_id=f"c{worker}", storage_uri="/tmp/s")
    results.put((worker, state.claim(mine) is None))


def test_exactly_one_of_several_ups_claims_a_name(burst_home):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(burst_home), w, results)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    won = [w for w, ok in (results.get(timeout=5) for _ in procs) if ok]
    assert len(won) == 1
    assert state.load(ClusterHandle, "same").cluster_id == f"c{won[0]}"
    state.release(ClusterHandle(name="same", provider="local", cluster_id="someone-else", storage_uri="/tmp/s"))
    assert state.load(ClusterHandle, "same") is not None  # only the claim's owner gives it back
    state.release(ClusterHandle(name="same", provider="local", cluster_id=f"c{won[0]}", storage_uri="/tmp/s"))
    assert state.load(ClusterHandle, "same") is None
