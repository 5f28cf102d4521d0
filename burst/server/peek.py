"""A run as the web view shows it, read as its owner: ``python -m burst.server.peek RUN_ID`` with the
owner's state directory prints one JSON object: the run's record, each epoch's metrics as the job
said them, the last step, and the validation's summary once it is done. The log comes from the
run's cluster while it answers, else from the copy kept with the run (``burst logs`` does the same);
a run that succeeded while nothing followed it is collected first, as ``burst report`` does."""

from __future__ import annotations

import json
import math
import sys

from ..errors import BurstError


def look(run_id: str) -> dict:
    from .. import api
    from ..lifecycle import runs
    from ..runtime.job import DoneEvent, EpochEvent, FailedEvent, StartEvent, StepEvent, StoppedEvent, UsageEvent, parse_events

    from ..lifecycle import tracking

    record = runs.load_run(run_id)
    if record.state not in runs.FINISHED:  # its state from its cluster; a run that succeeded unfollowed is collected (its report)
        try:
            record = tracking.collect_finished(record)
        except BurstError:
            pass  # the cluster does not answer: the record as it is, and the log's own words below
    try:
        text, why = api.logs(run_id), None
    except BurstError as exc:
        text, why = "", str(exc)
    epochs, step, summary, said, failure, stopped, workers, usage = {}, None, None, None, None, None, None, None
    for event in parse_events(text):
        if isinstance(event, StartEvent):
            workers = {"replicas": event.replicas, "global_batch": event.global_batch, "steps": event.steps}
        elif isinstance(event, EpochEvent):
            metrics = {k: v for k, v in event.model_dump().items() if k not in ("type", "time", "replayed", "epochs")}
            epochs[event.epoch] = {k: v for k, v in metrics.items() if not (isinstance(v, float) and not math.isfinite(v))}
        elif isinstance(event, StepEvent):
            step = {k: v for k, v in event.model_dump().items() if k != "type"}
        elif isinstance(event, DoneEvent):
            summary, said = event.summary, event.said
        elif isinstance(event, FailedEvent):
            failure = event.message
        elif isinstance(event, StoppedEvent):
            stopped = {"epoch": event.epoch, "step": event.step, "reason": event.reason}
        elif isinstance(event, UsageEvent):
            usage = event.line()
    moves, times = [], []
    if record.managed:
        from ..unattended import managed, timeline

        moves = managed.moves(run_id)
        m = managed.load(run_id)
        times = timeline.lines(m) if m is not None else []
    return {"run_id": record.run_id, "state": record.state, "managed": record.managed, "attempts": record.attempts, "moves": moves,
            "timeline": times, "message": record.message, "cluster": record.cluster,
            "provider": record.provider, "workload": record.workload, "epochs_planned": int(record.config.get("epochs", 0) or 0),
            "epochs": [epochs[k] for k in sorted(epochs)], "step": step, "summary": summary, "validation": said, "failure": failure,
            "stopped": stopped, "workers": workers, "usage": usage if record.state not in runs.FINISHED else None, "log_unreachable": why, "report": _report(record)}


def _report(record) -> str | None:
    from ..lifecycle.rundir import report_page

    page = report_page(record)
    return str(page) if page is not None and page.is_file() else None


def cancel(run_id: str) -> int:
    """Ask a training run to checkpoint and stop (the request a budget stop writes); its follower
    records it stopped, and ``--resume`` goes on from the checkpoint."""
    from ..home import state
    from ..home.state import ClusterHandle
    from ..lifecycle import runs
    from ..runtime.job import CANCEL_REQUEST, RunFiles

    record = runs.load_run(run_id)
    if record.state not in ("RUNNING", "PENDING"):
        print(f"run {run_id} is {record.state}: nothing to cancel")
        return 1
    handle = state.load(ClusterHandle, record.cluster)
    if handle is None:
        print(f"run {run_id}: its cluster {record.cluster} is gone")
        return 1
    RunFiles(handle.storage_uri, run_id).ask_to_stop(CANCEL_REQUEST)
    print(f"run {run_id}: asked to checkpoint and stop")
    return 0


if __name__ == "__main__":
    try:
        if len(sys.argv) == 2:
            print(json.dumps(look(sys.argv[1]), default=str))
        elif len(sys.argv) == 3 and sys.argv[1] == "cancel":
            sys.exit(cancel(sys.argv[2]))
        else:
            sys.exit("usage: python -m burst.server.peek RUN_ID | cancel RUN_ID")
    except BurstError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(1)
