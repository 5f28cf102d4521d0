"""Live progress in the terminal: a training run's events, and a Pulumi operation's resources."""

from __future__ import annotations

from typing import Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from ..runtime.job import DoneEvent, EpochEvent, JobEvent, StartEvent, StatusEvent, StepEvent, StoppedEvent, UsageEvent
from ..client.jobs import RunTracker


class _BarWithLine(Progress):
    """A progress bar with one live line under it (rich's documented way: ``get_renderables``)."""

    line = ""

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        if self.line:
            yield Text(self.line)


class RunProgress:
    """A rich progress bar over epochs × steps, the cluster's usage as one live line under it, and
    one printed line per epoch. The tracker has already recorded each event it is shown."""

    def __init__(self, console: Console, tracker: RunTracker):
        self.console = console
        self.tracker = tracker
        self._bar = _BarWithLine(TextColumn("{task.description}", style="bold", markup=False), BarColumn(), TextColumn("{task.fields[info]}", markup=False),
                             TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False)
        self._task = None

    def __enter__(self):
        self._bar.__enter__()
        self._task = self._bar.add_task("starting", total=None, info="")
        return self

    def __exit__(self, *exc):
        if not self.console.is_terminal:
            self._bar.line = ""  # printed as it came; the bar's last frame need not cut it short again
        return self._bar.__exit__(*exc)

    def on_event(self, event: JobEvent) -> None:
        t = self.tracker
        if isinstance(event, StatusEvent):
            self._bar.update(self._task, description=event.message)
        elif isinstance(event, StartEvent):
            if t.starts > 1:
                self.console.print(t.resume_line(event))
            self._bar.update(self._task, description="training", total=t.epochs * t.steps, completed=event.epoch * t.steps)
        elif isinstance(event, StepEvent):
            self._bar.update(self._task, completed=(event.epoch - 1) * t.steps + event.step,
                             info=f"epoch {event.epoch}/{t.epochs} step {event.step}/{t.steps}")
        elif isinstance(event, EpochEvent) and event.replayed:
            pass  # an epoch restored from a checkpoint after a restart: already reported, or only now known
        elif isinstance(event, EpochEvent):
            said = event.said or f"{event.samples_per_s} samples/s"  # the workload's words, from the job
            self._bar.update(self._task, completed=event.epoch * t.steps)
            self.console.print(f"epoch {event.epoch}/{event.epochs}: {said}")
        elif isinstance(event, UsageEvent):
            self._bar.line = f"usage: {event.line()}"
            if not self.console.is_terminal:  # a log, not a screen: nothing is redrawn, so the line is printed
                self.console.print(self._bar.line, highlight=False)
            self._bar.refresh()
        elif isinstance(event, StoppedEvent):
            why = event.reason if event.on_notice else "on request"
            self.console.print(f"stopped ({why}) at epoch {event.epoch} step {event.step}/{event.steps}; final checkpoint written")
        elif isinstance(event, DoneEvent) and event.stopped:
            self._bar.update(self._task, description="stopped")
        elif isinstance(event, DoneEvent):
            said = event.said or ", ".join(f"{k} {v:.4g}" for k, v in list(event.summary.items())[:4]
                                                                     if isinstance(v, (int, float)))
            self._bar.update(self._task, description="done")
            self.console.print(f"validation: {said}")


class PulumiProgress:
    """Pulumi's engine events as a rich progress bar: one step per resource, the current one named.

    ``total`` (when known) is the number of resources the program registers.
    """

    def __init__(self, verb: str, out: Console, total: Optional[int] = None):
        self.out = out
        self.done = 0
        self.failed: list[str] = []
        self._bar = Progress(TextColumn(verb, style="bold", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("{task.description}", markup=False), console=self.out, transient=False)
        self._task = self._bar.add_task("", total=total)

    def __enter__(self):
        self._bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self._bar.__exit__(*exc)

    @staticmethod
    def _name(meta) -> str:
        return f"{meta.type.rsplit(':', 1)[-1]} {meta.urn.rsplit('::', 1)[-1]}"

    def on_event(self, event) -> None:
        pre = getattr(event, "resource_pre_event", None)
        outputs = getattr(event, "res_outputs_event", None)
        failed = getattr(event, "res_op_failed_event", None)
        if pre is not None and not pre.planning and not pre.metadata.type.startswith("pulumi:"):
            self._bar.update(self._task, description=f"{getattr(pre.metadata.op, 'value', str(pre.metadata.op))} {self._name(pre.metadata)}")
        elif outputs is not None and not outputs.metadata.type.startswith("pulumi:"):
            self.done += 1
            self._bar.update(self._task, advance=1, description=f"done: {self._name(outputs.metadata)}")
        elif failed is not None:
            self.failed.append(self._name(failed.metadata))
            self.out.print(Text.assemble(("failed", "red"), f" {self._name(failed.metadata)}"))

    def on_output(self, line: str) -> None:
        if "error" in line.lower():
            self.out.print(line, style="dim", markup=False, highlight=False)
