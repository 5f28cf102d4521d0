"""A placement profile for a workload burst has never seen, from `burst profile`'s measurement of
it on this machine (``burst.runtime.measuring``).

This machine's epoch times at each batch are the profile's one measured table; the time model
(``profile.py``) fits its per-event and per-step terms to them. Each GPU family the catalog sells
is derived from this machine by one ratio: the GPU's dense float32 peak over this machine's dense
float32 rate as NumPy's matmul measured it, i.e. the workload is taken to reach the same share of
each machine's dense rate. That is the central figure; the band a plan states with it is a factor
of ``BAND`` either way (a small model leaves a GPU idler than a CPU; a large one may use its
tensor cores). `burst calibrate RUN` replaces a derived speed with one a run measured.
"""

from __future__ import annotations

import datetime
import re
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ..errors import BurstError
from ..runtime.measuring import MATMUL_N
from .profile import PROFILED, Profile

ACCELERATORS = Path(__file__).with_name("data") / "accelerators.yaml"
BAND = 3.0  # a derived speed is stated as this factor either way of its central figure
CPU_WATTS_PER_CORE = 15.0  # estimate: a server CPU's rated power shared over its cores
DEFAULT_EPOCHS = 10  # what a plan estimates when neither the policy nor `--epochs` says


class GpuFacts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fp32_tflops: float = Field(gt=0)
    memory_gb_s: float = Field(gt=0)
    watts: float = Field(gt=0)
    source: str


class AcceleratorFacts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    checked: datetime.date
    gpus: dict[str, GpuFacts]


@lru_cache(maxsize=1)
def accelerator_facts() -> AcceleratorFacts:
    """The GPU figures derived speeds rest on (``data/accelerators.yaml``)."""
    return AcceleratorFacts.model_validate(yaml.safe_load(ACCELERATORS.read_text()))


def machine_name(measured: dict) -> str:
    """The profile's name for this machine's CPUs: ``amd-epyc-2c`` (a site of the same CPUs may name it)."""
    model = re.sub(r"\(r\)|\(tm\)|cpu|processor|@.*$", " ", str(measured["machine"].get("cpu_model") or "cpu").lower())
    words = [w for w in re.split(r"[^a-z0-9]+", model) if w][:3] or ["cpu"]
    return f"{'-'.join(words)}-{measured['machine'].get('threads') or measured['machine'].get('cores') or 1}c"


def derived_ratio(gpu: GpuFacts, matmul_gflops: float) -> float:
    """A GPU's per-replica speed over this machine's: dense float32 peak over the rate measured here."""
    return gpu.fp32_tflops * 1000.0 / matmul_gflops


def profile_of(measured: dict, *, events: int, default_batch: int, today: datetime.date | None = None) -> dict:
    """The profile (``Profile``'s fields) of the measured workload, its epoch holding ``events``."""
    rows = measured["batches"]
    if len({r["batch"] for r in rows}) < 2:
        raise BurstError("a profile needs epochs timed at two batches or more (the time model separates the per-event from the "
                         "per-step cost): give --batches with two sizes or more")
    today = today or datetime.date.today()
    here = machine_name(measured)
    machine = measured["machine"]
    what = (f"{machine.get('cpu_model') or 'CPU'}, {machine.get('threads')} threads, {' '.join(machine.get('simd') or []) or 'SIMD unknown'}, "
            f"oneDNN {'on' if machine.get('onednn_enabled') else 'off or not used'}")
    seconds = [[1, 1, int(r["batch"]), round(events / r["samples_per_s"], 6)] for r in rows]
    scale = events / max(1, measured["events"])
    facts = accelerator_facts()
    matmul = float(measured["matmul_gflops"])
    accelerators = {here: {"kind": "cpu-node", "watts": CPU_WATTS_PER_CORE * (machine.get("threads") or 1),
                           "watts_basis": f"estimate: {CPU_WATTS_PER_CORE:g} W for each of its threads",
                           "basis": f"measured by `burst profile` on this machine {today} ({what})"}}
    for name, gpu in facts.gpus.items():
        accelerators[name] = {
            "from": here, "ratio": round(derived_ratio(gpu, matmul), 3), "watts": gpu.watts, "watts_basis": f"{name} rated board power ({gpu.source})",
            "basis": (f"derived by `burst profile` from this machine's measured epochs: {name}'s float32 peak {gpu.fp32_tflops:g} TFLOP/s "
                      f"({gpu.source}) over this machine's {matmul:.0f} GFLOP/s (NumPy's matmul), the same share of each; "
                      f"± a factor of {BAND:g}")}
    best = min(rows, key=lambda r: (abs(r["batch"] - default_batch), -r["batch"]))
    profile = {
        "workload": measured["workload"], "preset": measured["preset"], "events": int(events),
        "dataset_gb": round(measured["data_bytes"] * scale / 1e9, 6), "checkpoint_gb": round(measured["checkpoint_bytes"] / 1e9, 6),
        "epochs": DEFAULT_EPOCHS, "checkpoint_every_epochs": 1,
        "scaling": {"form": "epoch_s = events / (N b) x (a_acc b + t_step) [no multi-node measurement: the all-reduce across nodes is not counted]",
                    "tables": [{"name": f"burst-profile-{here}", "accelerator": here,
                                "source": (f"measured by `burst profile` {today}: {measured['framework']}, one worker, the best of "
                                           f"{len(rows[0]['epoch_s']) - 1} timed epochs a batch, as seconds per epoch of {events} events"),
                                "rows": seconds}]},
        "accelerators": accelerators,
        "local_default": {"events_per_s": round(best["samples_per_s"], 3),
                          "basis": f"{PROFILED} {today} on this machine, batch {best['batch']} ({what})"},
    }
    Profile.model_validate(profile).fit()  # what the plan will load: valid, and the model fits its table
    return profile


def header(measured: dict) -> str:
    """The comment a profile written by `burst profile` starts with: what was measured, how."""
    flops = measured.get("flops_per_event")
    counted = (f"{flops:,.0f} FLOPs per training event ({measured['flops_by']})" if flops else f"FLOPs {measured['flops_by']}")
    share = ""
    if flops:
        rows = measured["batches"]
        top = max(rows, key=lambda r: r["samples_per_s"])
        share = f"; at batch {top['batch']} it reached {flops * top['samples_per_s'] / 1e9:.2f} GFLOP/s, " \
                f"{flops * top['samples_per_s'] / 1e9 / measured['matmul_gflops']:.1%} of this machine's matmul rate"
    params = f"{measured['parameters']:,} trainable parameters" if measured.get("parameters") else "parameters not counted"
    lines = [f"Placement profile of {measured['workload']} ({measured['framework']}, preset {measured['preset']}), written by `burst profile`.",
             f"Measured on this machine: {measured['machine'].get('cpu_model')}, {measured['machine'].get('threads')} threads; "
             f"dense float32 rate {measured['matmul_gflops']:.1f} GFLOP/s (NumPy's matmul of {MATMUL_N}^2).",
             f"{counted}{share}.", f"{params}; a checkpoint {measured['checkpoint_bytes']:,} bytes; "
             f"{measured['events']} training events {measured['data_bytes']:,} bytes.",
             "Samples/s by batch: " + ", ".join(f"{r['batch']}: {r['samples_per_s']:,.0f}" for r in measured["batches"]) + ".",
             "GPU speeds are derived (see each one's basis); `burst calibrate RUN` replaces one with a run's measurement."]
    return "".join(f"# {line}\n" for line in lines)
