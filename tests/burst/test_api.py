"""burst from Python: a whole local run through ``burst.api`` alone, checking the returned objects."""

from pathlib import Path

import pytest

from tests.support import census

pytestmark = pytest.mark.slow


def test_a_full_local_run_through_the_python_api(tmp_path, monkeypatch, capfd):
    from burst import api
    from burst.home.state import ClusterHandle, RunRecord

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    before = census.snapshot()
    started = None
    try:
        started = api.up("local", "notebook", cpus=2)
        assert isinstance(started, api.UpResult) and isinstance(started.handle, ClusterHandle)
        assert started.created_now and started.handle.provider == "local" and started.handle.layout["cpus"] == 2
        assert api.up("local", "notebook", cpus=2).created_now is False  # found running, not started twice
        (row,) = api.status().clusters
        assert (row.name, row.provider, row.state) == ("notebook", "local", "running")

        request = api.TrainRequest.of(cluster="notebook", epochs=2, steps_per_epoch=3, synthetic=200, val_events=100, batch_per_replica=8)
        run = api.train(request)
        assert isinstance(run, RunRecord) and run.state == "SUCCEEDED" and run.provider == "local"
        assert run.progress == {"epoch": 2, "epochs": 2, "samples_per_s": run.progress["samples_per_s"]} and run.progress["samples_per_s"] > 0
        assert run.config["epochs"] == 2 and run.config["batch_per_replica"] == 8 and run.config["synthetic"] == 200
        run_dir = Path(run.run_dir)
        assert run_dir == (tmp_path / "burst-runs" / run.run_id).resolve()
        for name in ("job.log", "history.json", "metrics.json", "cost.json", "provenance.json"):
            assert (run_dir / name).is_file(), name
        assert api.report(run.run_id) == run_dir / "report" / "report.html"
        assert '"type": "done"' in api.logs(run.run_id)
        assert [r.run_id for r in api.status().runs] == [run.run_id]
    finally:
        if started is not None:
            taken_down = api.down("notebook")
    assert [h.name for h in taken_down] == ["notebook"]
    assert api.status().clusters == []
    census.assert_none_left(before)
    printed = capfd.readouterr()
    assert "notebook" not in printed.out + printed.err  # the API reports through a Reporter, never by printing


def test_api_errors_are_burst_errors_with_the_cli_exit_codes(tmp_path, monkeypatch):
    from burst import api

    monkeypatch.setenv("BURST_HOME", str(tmp_path))
    with pytest.raises(api.BurstError, match="unknown provider 'mars'") as err:
        api.up("mars")
    assert err.value.exit_code == 2
    with pytest.raises(api.BurstError, match="--epochs must be a positive whole number, got 0"):
        api.TrainRequest.of(epochs=0)
    with pytest.raises(api.BurstError, match="no cluster named 'ghost'"):
        api.train(api.TrainRequest.of(cluster="ghost"))
    assert not list(tmp_path.glob("clusters/*.json"))
