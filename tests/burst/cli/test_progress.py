"""What `burst train` prints when the job's workers restart: burst's words, not Ray's."""

import io
import json

from rich.console import Console

from burst.cli.progress import RunProgress
from burst.runtime.job import parse_event
from burst.client.jobs import RunTracker

START = {"type": "start", "epochs": 3, "steps": 10}


def _printed(*events: dict) -> str:
    """What the progress display prints for these job events, in order."""
    out = io.StringIO()
    tracker = RunTracker(epochs=3)
    with RunProgress(Console(file=out, width=200), tracker) as progress:
        for i, event in enumerate(events):
            parsed = parse_event(json.dumps({**event, "time": float(i)}))
            tracker.record(parsed)
            progress.on_event(parsed)
    return out.getvalue()


def test_a_lost_worker_is_one_line_saying_where_and_from_which_checkpoint():
    text = _printed(
        {**START, "epoch": 0, "resumed": False},
        {"type": "step", "epoch": 1, "step": 10, "steps": 10},
        {"type": "epoch", "epoch": 1, "epochs": 3, "samples_per_s": 50.0, "d_loss": 1.0, "g_loss": 2.0, "g_ecal_mape": 3.0},
        {"type": "step", "epoch": 2, "step": 7, "steps": 10},
        {**START, "epoch": 1, "resumed": True},
        {"type": "epoch", "epoch": 1, "epochs": 3, "replayed": True, "samples_per_s": 50.0},
    )
    assert "worker lost at epoch 2 step 7; resumed from the checkpoint of epoch 1" in text
    assert text.count("epoch 1/3:") == 1  # the replayed epoch is not reported twice
    assert "Lease ID" not in text and "Worker ID" not in text


def test_a_worker_lost_before_any_checkpoint_says_training_restarted():
    text = _printed(
        {**START, "epoch": 0, "resumed": False},
        {"type": "step", "epoch": 1, "step": 4, "steps": 10},
        {**START, "epoch": 0, "resumed": False},
    )
    assert "worker lost at epoch 1 step 4; no checkpoint yet, training restarted from the beginning" in text
