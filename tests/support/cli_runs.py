"""What the end-to-end tests share: the CLI run in a subprocess against a state directory, the
events and checkpoints a job leaves, a run stopped by its budget, and a managed run's records."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil

# a small run: 200 synthetic events, 100 to validate on, batch 8
TRAIN = ["--synthetic", "200", "--val-events", "100", "--batch-per-replica", "8"]
EVENT_LINE = re.compile(r"BURST_EVENT (\{.*\})\s*$")


def burst(*args, home: Path, cwd: Path, env: dict | None = None, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess:
    """The CLI in a subprocess with ``home`` as its state directory; ``check``: a failure fails the test."""
    env = {**(env or os.environ), "BURST_HOME": str(home)}
    proc = subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"burst {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def burst_here(*args, home: Path, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in this process (typer's runner), for tests of what a command answers, not of the
    process it runs in: a subprocess costs a Python start and burst's import (0.5 to 1 CPU-second a
    call). What only the process shows (one line and the exit code for bad input, what it imports,
    signals) is tested through ``burst``. An exception the CLI would have shown as a traceback fails
    the test with it."""
    from typer.testing import CliRunner

    from burst import cli

    here = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli.app, [str(a) for a in args], env={"BURST_HOME": str(home)})
    finally:
        os.chdir(here)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def raw_events(log: str) -> list[dict]:
    """Every event line of a job log, without burst's de-duplication by epoch number (only a
    line Ray forwarded twice, identical to the byte, counts once)."""
    seen, out = set(), []
    for line in log.splitlines():
        m = EVENT_LINE.search(line)
        if m and m.group(1) not in seen:
            seen.add(m.group(1))
            out.append(json.loads(m.group(1)))
    return out


def checkpoint_tensors(directory: Path) -> dict:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(directory / "gan3d"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map() if "OPTIMIZER_SLOT" in name or "/.ATTRIBUTES/VARIABLE_VALUE" in name}


def stopped_by_budget(home, cwd, monkeypatch, name: str, *up_args: str, epochs: int):
    """A local cluster priced at $36/h under a $1.30 budget, and a run on it (10 steps an epoch) that the
    budget guard stops: the guard's clock says the cluster is 56 s old from its second look on
    ($0.56 + $0.75 reserve > $1.30). (handle, the CLI's result); the cluster is torn down by then."""
    from typer.testing import CliRunner

    from burst.lifecycle import budget
    from burst import cli

    policy = cwd / f"tight-{name}.yaml"
    policy.write_text("budget_usd: 1.3\nproviders: [local]\nlocal: {usd_per_hour: 36}\n")
    handle = json.loads(burst("up", "--provider", "local", "--name", name, "--cpus", "2", "--policy", str(policy), *up_args, "--json",
                              home=home, cwd=cwd, check=True).stdout)
    looks = []

    def clock() -> float:
        looks.append(1)
        return handle["created"] + (0 if len(looks) == 1 else 56)

    monkeypatch.setattr(budget, "now", clock)
    monkeypatch.setenv("BURST_HOME", str(home))
    monkeypatch.chdir(cwd)
    return handle, CliRunner().invoke(cli.app, ["train", "gan3d", "--cluster", name, "--epochs", str(epochs), "--steps", "10", *TRAIN])


def handed_over(proc) -> str:
    """The run id a `--managed --detach` command handed to its controller."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    words = " ".join(proc.stderr.split())
    assert "handed to its controller" in words, proc.stderr
    return words.split("run ", 1)[1].split(" ", 1)[0]


def record(home: Path, run_id: str) -> dict:
    return json.loads((home / "runs" / f"{run_id}.json").read_text())


def managed(home: Path, run_id: str) -> dict:
    return json.loads((home / "managed" / f"{run_id}.json").read_text())


def wait_until(check, timeout: float, what: str, poll: float = 0.5):
    deadline = time.time() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(poll)


def finished(home: Path, run_id: str, timeout: float = 400) -> dict:
    """The run's record once its controller has ended it and exited."""
    m = wait_until(lambda: (mm := managed(home, run_id))["phase"] == "finished" and mm, timeout, f"run {run_id} to finish")
    pid = m["controller_pid"]
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 30, "the controller to exit")
    return record(home, run_id)


def done_epochs(home: Path, run_id: str) -> int:
    return (record(home, run_id).get("progress") or {}).get("epoch") or 0


def history_of(run: dict) -> list[int]:
    return [h["epoch"] for h in json.loads((Path(run["run_dir"]) / "history.json").read_text())]
