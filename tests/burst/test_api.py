"""burst from Python: a whole local run through ``burst.api`` alone, checking the returned objects.
The run is the second workload's (calo) end-to-end run too: gan3d's are the CLI's everywhere else."""

import json
from pathlib import Path

import pytest

from burst.targets.base import Reporter
from tests.support import census

pytestmark = pytest.mark.slow


class _Heard(Reporter):
    """A Reporter that keeps what a run's events said (the workload's own words), as a notebook might."""

    def __init__(self):
        self.epochs: list[str] = []
        self.done: list[str] = []

    def run_progress(self, run, tracker):
        from contextlib import nullcontext

        from burst.runtime.job import DoneEvent, EpochEvent

        heard = self

        class Watcher:
            def on_event(self, event) -> None:
                if isinstance(event, EpochEvent) and not event.replayed:
                    heard.epochs.append(f"epoch {event.epoch}/{event.epochs}: {event.said}")
                elif isinstance(event, DoneEvent):
                    heard.done.append(event.said)

        return nullcontext(Watcher())


def test_a_full_local_run_of_the_second_workload_through_the_python_api(tmp_path, monkeypatch, capfd):
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

        request = api.TrainRequest.of(cluster="notebook", workload="calo", epochs=2, synthetic=600, val_events=200)
        heard = _Heard()
        run = api.train(request, report=heard)
        assert isinstance(run, RunRecord) and run.state == "SUCCEEDED" and run.provider == "local"
        assert run.workload == "calo" and run.kind == "run" and run.config["preset"] == "small"
        assert run.progress == {"epoch": 2, "epochs": 2, "samples_per_s": run.progress["samples_per_s"]} and run.progress["samples_per_s"] > 0
        assert run.config["epochs"] == 2 and run.config["synthetic"] == 600
        # the workload's own words reach the caller through the Reporter: its loss, its validation
        assert [line.split(":")[0] for line in heard.epochs] == ["epoch 1/2", "epoch 2/2"] and "denoising loss" in heard.epochs[-1]
        assert len(heard.done) == 1 and heard.done[0].startswith("E_dep/E_inc MC"), heard.done
        run_dir = Path(run.run_dir)
        assert run_dir == (tmp_path / "burst-runs" / run.run_id).resolve()
        for name in ("job.log", "history.json", "metrics.json", "cost.json", "provenance.json"):
            assert (run_dir / name).is_file(), name
        assert len(json.loads((run_dir / "history.json").read_text())) == 2
        # calo's validation: every summary metric, on the held-out events asked for, above MC's own spread
        metrics = json.loads((run_dir / "report" / "metrics.json").read_text())
        s = metrics["summary"]
        assert {"sep_power_mean", "sep_etot", "classifier_auc", "hl_classifier_auc", "fpd", "kpd"} <= set(s) and s["events"] == 200
        assert metrics["noise_floor"]["sep_power_mean"] < s["sep_power_mean"]  # two epochs do not reach MC's own spread
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
