"""`burst profile WORKLOAD`: measure a workload of the public interface on this machine and write
the placement profile `burst plan` estimates it from (this machine measured, each GPU derived:
``burst.placement.derive``).

The measurement runs in a process of its own (``burst.runtime.measuring``): the framework, its
threads and its memory go with it, and a workload that fails or hangs is one line here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

from .. import workload as public_workload
from .. import workloads
from ..errors import BurstError
from ..home.records import write_text_atomic
from ..targets.base import QUIET, Reporter
from ..workloads.public import measured_profile_path

TIMEOUT_S = 3600


class DerivedSpeed(BaseModel):
    """One GPU family's per-event time as the profile derives it, with its band."""

    accelerator: str
    per_event_us: float  # microseconds one replica spends per event (the central figure)
    low_us: float
    high_us: float
    epoch_s: float  # an epoch of the profile's events on one GPU at the workload's batch (the per-step cost included)
    epoch_low_s: float
    epoch_high_s: float
    basis: str


class ProfileResult(BaseModel):
    """What `burst profile` measured and wrote."""

    workload: str
    path: Path
    measured: dict
    derived: list[DerivedSpeed]
    batch: int  # the workload's batch, the derived epochs' (the per-step cost measured here counted in them)
    used_by_plan: bool  # False: the workload names a profile of its own, which the plan reads instead
    note: str = ""


def default_batches(default_batch: int) -> list[int]:
    """Half the workload's batch, the batch, and four times it: enough for the per-step cost to show."""
    return sorted({max(1, default_batch // 2), default_batch, default_batch * 4})


def profile(workload: str, *, batches: Optional[list[int]] = None, events: Optional[int] = None, seed: int = 0,
            out: Optional[Path] = None, data: Optional[Path] = None, report: Reporter = QUIET) -> ProfileResult:
    """Measure ``workload`` here at each batch (on ``data``, else on the data it makes), derive its
    GPU speeds, and write its profile to ``out`` (default: ``measured_profile_path``, which the plan reads
    for a workload naming no profile)."""
    from ..placement import derive
    from ..placement.profile import load

    w = workloads.get(workload)
    if not getattr(w, "is_public", False):
        raise BurstError(f"workload {w.name} is burst's own and has a measured profile ({w.profile_path}); "
                         f"`burst bench {w.name}` measures this machine for it")
    batches = sorted(set(batches or default_batches(w.default_batch(w.profile_preset))))
    if len(batches) < 2 or any(b < 1 for b in batches):
        raise BurstError(f"--batches {','.join(map(str, batches))}: give two batch sizes or more, each a positive whole number")
    if events is not None and events < 1:
        raise BurstError(f"--events must be a positive whole number, got {events}")
    events = int(events or w.user.events)
    if data is not None and not Path(data).exists():
        raise BurstError(f"--data {data}: no such file or directory")
    if data is None and type(w.user).make_data is public_workload.Workload.make_data:
        raise BurstError(f"workload {w.name} makes no data of its own: give --data DIR (its training files)")
    if events < max(batches):
        raise BurstError(f"--events {events}: fewer events than the largest batch ({max(batches)}); an epoch would hold no whole step")
    report.say(f"measuring {w.name} on this machine at batches {', '.join(map(str, batches))}, {events} events "
               "(one worker; each batch three epochs, one to warm up, two timed)...")
    command = [sys.executable, "-m", "burst.runtime.measuring", w.spec or w.name, str(events), str(seed),
               str(Path(data).resolve()) if data is not None else "", *map(str, batches)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    except subprocess.TimeoutExpired:
        raise BurstError(f"profiling {w.name} did not finish within {TIMEOUT_S // 60} minutes: give fewer --events or smaller --batches",
                         exit_code=1) from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        said = [line for line in proc.stderr.strip().splitlines() if line.strip()] or ["no output"]
        raise BurstError(f"profiling {w.name} failed: {said[-1].strip()}", exit_code=1)
    measured = json.loads(lines[-1])
    events = int(measured["events"])  # what the given data held, where the workload counts it
    written = derive.profile_of(measured, events=events, default_batch=w.default_batch(w.profile_preset))
    path = Path(out) if out is not None else measured_profile_path(w.name)
    import yaml

    write_text_atomic(path, derive.header(measured) + yaml.safe_dump(written, sort_keys=False, width=200))
    loaded = load(w.name, path)
    here = derive.machine_name(measured)
    derived, fit, batch = [], loaded.fit(), w.default_batch(w.profile_preset)
    for name in written["accelerators"]:
        if name == here:
            continue
        per_event = loaded.per_event_s(name)
        epoch = [fit.epoch_s(per_event * f, "ethernet", 1, 1, batch, events) for f in (1.0, 1 / derive.BAND, derive.BAND)]
        derived.append(DerivedSpeed(accelerator=name, per_event_us=per_event * 1e6, low_us=per_event * 1e6 / derive.BAND,
                                    high_us=per_event * 1e6 * derive.BAND, epoch_s=epoch[0], epoch_low_s=epoch[1], epoch_high_s=epoch[2],
                                    basis=loaded.accelerators[name].basis))
    own = w.user.profile is not None
    note = ""
    if own:
        note = (f"workload {w.name} names a profile of its own ({w.profile_path}), which `burst plan` reads: copy {path} there "
                f"to plan with this one")
    elif out is not None and path.resolve() != measured_profile_path(w.name).resolve():
        note = f"`burst plan` reads {measured_profile_path(w.name)}; name {path} as the workload's `profile` to plan with it"
    return ProfileResult(workload=w.name, path=path, measured=measured, derived=derived, batch=batch,
                         used_by_plan=not own and path.resolve() == measured_profile_path(w.name).resolve(), note=note)
