"""Live progress of a run in the terminal, driven by the job's BURST_EVENT lines."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .state import RunRecord


class RunProgress:
    """A rich progress bar over epochs × steps plus one printed line per epoch."""

    def __init__(self, console: Console, run: RunRecord, submitted: float):
        self.console = console
        self.run = run
        self.submitted = submitted
        self.first_step_time: float | None = None
        self.resumes: list[dict] = []
        self.failure: str | None = None
        self.stopped: dict | None = None
        self.last_epoch: dict = {}
        self.last_step: dict = {}
        self.starts = 0  # worker (re)starts seen: every one after the first is a lost worker
        self.machine: dict = {}  # the training worker's CPU, SIMD and oneDNN state, as TensorFlow saw them
        self.epochs = int(run.config.get("epochs", 1))
        self.steps = 1
        self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                             TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False)
        self._task = None

    def __enter__(self):
        self._bar.__enter__()
        self._task = self._bar.add_task("starting", total=None, info="")
        return self

    def __exit__(self, *exc):
        return self._bar.__exit__(*exc)

    def record(self, event: dict) -> None:
        """Bookkeeping only: timings, resumes, last epoch, failure (no display)."""
        kind = event.get("type")
        if kind == "start":
            self.starts += 1
            self.steps = max(1, int(event["steps"]))
            self.epochs = int(event["epochs"])
            self.machine = event.get("machine") or self.machine
            if event.get("resumed"):
                self.resumes.append({"epoch": event["epoch"], "time": event["time"]})
        elif kind == "step":
            if self.first_step_time is None:
                self.first_step_time = event.get("time", time.time())
            self.last_step = event
        elif kind == "epoch":
            self.last_epoch = event
        elif kind == "failed":
            self.failure = event.get("message")
        elif kind == "stopped":
            self.stopped = event

    def on_event(self, event: dict) -> None:
        """Record the event and show it on the live progress bar."""
        self.record(event)
        kind = event.get("type")
        if kind == "status":
            self._bar.update(self._task, description=event["message"])
        elif kind == "start":
            if self.starts > 1:
                self.console.print(self.resume_line(event))
            self._bar.update(self._task, description="training", total=self.epochs * self.steps, completed=event["epoch"] * self.steps)
        elif kind == "step":
            self._bar.update(self._task, completed=(event["epoch"] - 1) * self.steps + event["step"],
                             info=f"epoch {event['epoch']}/{self.epochs} step {event['step']}/{self.steps}")
        elif kind == "epoch" and event.get("replayed"):
            pass  # an epoch restored from a checkpoint after a restart: already reported, or only now known
        elif kind == "epoch":
            self._bar.update(self._task, completed=event["epoch"] * self.steps)
            self.console.print(
                f"epoch {event['epoch']}/{event['epochs']}: {event.get('samples_per_s')} samples/s, "
                f"D {event.get('d_loss', float('nan')):.3f}, G {event.get('g_loss', float('nan')):.3f}, "
                f"ECAL-sum MAPE {event.get('g_ecal_mape', float('nan')):.1f}%"
            )
        elif kind == "stopped":
            self.console.print(f"stopped on request at epoch {event['epoch']} step {event['step']}/{event['steps']}; final checkpoint written")
        elif kind == "done" and event.get("stopped"):
            self._bar.update(self._task, description="stopped")
        elif kind == "done":
            s = event.get("summary", {})
            self._bar.update(self._task, description="done")
            self.console.print(f"validation: sampling fraction MC {s.get('sf_mc', 0):.4f} vs GAN {s.get('sf_gan', 0):.4f}, "
                               f"optimisation metric {s.get('optimisation_metric', float('nan')):.3g}")

    def resume_line(self, start: dict) -> str:
        """What a restart means, in burst's words: where the lost worker was, where training goes on."""
        where = f"at epoch {self.last_step['epoch']} step {self.last_step['step']}" if self.last_step else "before its first step"
        if start.get("resumed"):
            return f"worker lost {where}; resumed from the checkpoint of epoch {start['epoch']}"
        return f"worker lost {where}; no checkpoint yet, training restarted from the beginning"

    def snapshot(self) -> dict:
        return {"epoch": self.last_epoch.get("epoch"), "epochs": self.epochs, "samples_per_s": self.last_epoch.get("samples_per_s")}
