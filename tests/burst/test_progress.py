"""What `burst train` prints when the job's workers restart: burst's words, not Ray's."""

import io

from rich.console import Console

from burst.progress import RunProgress
from burst.state import RunRecord


def _progress() -> tuple[RunProgress, io.StringIO]:
    out = io.StringIO()
    run = RunRecord(run_id="r", workload="gan3d", cluster="c", provider="local", job_id="r", config={"epochs": 3})
    return RunProgress(Console(file=out, width=200), run, submitted=0.0), out


def _events(*kinds):
    return [dict(k, time=float(i)) for i, k in enumerate(kinds)]


def test_a_lost_worker_is_one_line_saying_where_and_from_which_checkpoint():
    progress, out = _progress()
    with progress:
        for e in _events(
            {"type": "start", "epoch": 0, "epochs": 3, "steps": 10, "resumed": False},
            {"type": "step", "epoch": 1, "step": 10, "steps": 10},
            {"type": "epoch", "epoch": 1, "epochs": 3, "samples_per_s": 50.0, "d_loss": 1.0, "g_loss": 2.0, "g_ecal_mape": 3.0},
            {"type": "step", "epoch": 2, "step": 7, "steps": 10},
            {"type": "start", "epoch": 1, "epochs": 3, "steps": 10, "resumed": True},
            {"type": "epoch", "epoch": 1, "epochs": 3, "replayed": True, "samples_per_s": 50.0},
        ):
            progress.on_event(e)
    text = out.getvalue()
    assert "worker lost at epoch 2 step 7; resumed from the checkpoint of epoch 1" in text
    assert text.count("epoch 1/3:") == 1  # the replayed epoch is not reported twice
    assert "Lease ID" not in text and "Worker ID" not in text


def test_a_worker_lost_before_any_checkpoint_says_training_restarted():
    progress, out = _progress()
    with progress:
        for e in _events(
            {"type": "start", "epoch": 0, "epochs": 3, "steps": 10, "resumed": False},
            {"type": "step", "epoch": 1, "step": 4, "steps": 10},
            {"type": "start", "epoch": 0, "epochs": 3, "steps": 10, "resumed": False},
        ):
            progress.on_event(e)
    assert "worker lost at epoch 1 step 4; no checkpoint yet, training restarted from the beginning" in out.getvalue()
