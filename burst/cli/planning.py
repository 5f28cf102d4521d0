"""``burst plan | policy | catalog | bench | profile``: placement made visible.

Nothing here imports TensorFlow, Ray or a cloud SDK (``burst bench`` and ``burst profile`` run the
workload in a subprocess), so these commands start fast.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from .. import workloads
from .placement_options import PlacementRequest, takes_placement
from ..errors import BurstError
from .render import ConsoleReporter, console, out
from .render import emit_json as _emit_json


def _row_style(c, choice) -> str:
    if c is choice:
        return "bold green"
    return "" if c.feasible else "dim"


def print_plan(p, limit: Optional[int]) -> None:
    from ..placement.reasons import BLOCKING, having

    t = Table(title=f"burst plan: {p.epochs} epochs" + (f", batch {p.candidates[0].estimate.batch}/replica" if p.candidates else "") + (f", deadline {p.deadline_h:.1f} h" if p.deadline_h is not None else "")
              + (f", budget ${p.budget_usd:,.0f}" if p.budget_usd is not None else ""))
    for col, just in (("#", "right"), ("provider", "left"), ("region", "left"), ("accel", "left"), ("n", "right"),
                      ("spot", "left"), ("epoch s", "right"), ("hours", "right"), ("cost $", "right"), ("kgCO2e", "right"), ("why not", "left")):
        t.add_column(col, justify=just, overflow="fold")
    shown = p.candidates if limit is None else p.candidates[:limit]
    if p.nearest is not None and p.nearest not in shown:
        shown = shown + [p.nearest]
    for i, c in enumerate(shown, 1):
        e = c.estimate
        blocking = having(c.reasons, BLOCKING)
        kg = "?" if e.kgco2e is None else f"{e.kgco2e:,.1f}"
        t.add_row(str(p.candidates.index(c) + 1), "onprem" if c.target == "onprem" else c.provider, c.region, c.accelerator,
                  str(c.count), "yes" if c.preemptible else "no", f"{e.epoch_s:,.0f}", f"{e.hours:,.2f}", f"{e.cost_usd:,.2f}", kg,
                  "; ".join(blocking) if not c.feasible else ("chosen" if c is p.choice else ""), style=_row_style(c, p.choice))
    out.print(t)
    hidden = len(p.candidates) - len(shown)
    if hidden > 0:
        out.print(f"{hidden} more candidates (use --all or --json)")
    if p.excluded:
        out.print("not considered: " + ", ".join(f"{v} x {k}" for k, v in sorted(p.excluded.items())))
    if p.scan:
        out.print(Text.assemble(("scan:", "bold"), f" {p.scan}; a trial's epoch in the table, hours and cost for the whole scan"))
    if p.choice:
        c = p.choice
        e = c.estimate
        out.print(Text.assemble(("choice:", "bold green"), f" {c.provider} {c.region} {c.accelerator} x{c.count}"
                                f"{' preemptible' if c.preemptible else ''} on {c.layout_text}: {e.hours:.2f} h, ${e.cost_usd:,.2f}"))
        out.print(f"  why: {p.why}")
        out.print(f"  time: queue {e.queue_h:.2f} h + provisioning {e.provision_h:.2f} h + staging {e.staging_h:.2f} h"
                  f" + training {e.training_h:.2f} h + preemption {e.preemption_h:.2f} h")
        out.print(f"  cost: compute ${e.compute_usd:,.2f} (${e.hourly_usd:,.2f}/h) + storage ${e.storage_usd:,.2f} + egress ${e.egress_usd:,.2f}")
        if e.kgco2e is not None:
            out.print(f"  carbon: {e.energy_kwh:,.1f} kWh x {e.grid_g_per_kwh:g} gCO2e/kWh = {e.kgco2e:,.1f} kgCO2e (rated power x PUE over the training hours)")
        out.print(f"  batch per replica: {e.batch} (as `burst run` launches it)")
        after = c.after_lease()
        if after is not None:
            out.print(f"  after its lease: its keeper ends it; until `burst down`, ${after.usd_per_hour:,.3f}/h ({after.what})")
        for r in c.reasons:
            if r != p.scan:  # said once above
                out.print(f"  note: {r}")
    else:
        out.print(Text.assemble(("no feasible target:", "bold red"), f" {p.why}"))


@takes_placement("batch_per_replica", "epochs", "events")
def plan(
    workload: Annotated[str, typer.Argument(help=f"workload to place: {' | '.join(workloads.NAMES)}")] = workloads.DEFAULT,
    policy_file: Annotated[Optional[Path], typer.Option("--policy", help="policy YAML (default: policies/default.yaml)")] = None,
    catalog_file: Annotated[Optional[Path], typer.Option("--catalog", help="price catalog CSV (default: the packaged one)")] = None,
    data: Annotated[Optional[str], typer.Option(help="the dataset directory the run trains on: a store burst already staged it on costs no staging")] = None,
    trials: Annotated[Optional[int], typer.Option(help="plan a hyper-parameter scan of this many trials (`burst tune`)")] = None,
    gpus_per_trial: Annotated[Optional[int], typer.Option(help="scan: GPUs per trial (default 1; leave out to consider this machine's CPUs)")] = None,
    max_concurrent: Annotated[Optional[int], typer.Option(help="scan: trials at a time (default: all; --gpus sets it too)")] = None,
    grace_period: Annotated[int, typer.Option(help="scan: ASHA's epochs before a trial may be stopped")] = 1,
    reduction_factor: Annotated[int, typer.Option(help="scan: ASHA keeps 1 in this many trials at each rung")] = 2,
    show_all: Annotated[bool, typer.Option("--all", help="show every candidate, not the first 15")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    placement: PlacementRequest = None,
) -> None:
    """Rank every target (local, on-prem, each cloud, region, accelerator, count) and explain the choice;
    the placement flags narrow the candidates."""
    from .. import api

    for name, v in (("trials", trials), ("gpus-per-trial", gpus_per_trial), ("max-concurrent", max_concurrent), ("grace-period", grace_period)):
        if v is not None and v < 1:
            raise BurstError(f"--{name} must be a positive whole number, got {v}")
    if reduction_factor < 2:
        raise BurstError(f"--reduction-factor must be at least 2, got {reduction_factor}")
    if trials is None and (gpus_per_trial is not None or max_concurrent is not None):
        raise BurstError("--gpus-per-trial and --max-concurrent size a scan: give --trials too")
    scan = None
    if trials is not None:
        from ..placement.scan import ScanShape

        scan = ScanShape(trials, gpus_per_trial, max_concurrent, grace_period, reduction_factor)
    p = api.plan(workload, policy_file, catalog_file, scan=scan, data=data, placement=placement)
    if as_json:
        _emit_json(p.to_dict())
    else:
        print_plan(p, None if show_all else 15)
    if p.choice is None:
        raise typer.Exit(1)


# --------------------------------------------------------------------------- policy


policy_app = typer.Typer(help="Validate policy files and print their JSON Schema.", no_args_is_help=True)


@policy_app.command("check")
def policy_check(file: Annotated[Path, typer.Argument(help="policy YAML")]) -> None:
    """Validate a policy file: prints a summary, or one line saying what is wrong and where."""
    from ..placement import policy

    p = policy.load(file)
    deadline = p.deadline_hours()
    parts = [f"objective {p.objective}", f"providers {', '.join(p.providers)}", f"regions {', '.join(p.regions)}",
             f"preemptible {p.preemptible}", f"max {p.max_gpus} GPUs"]
    if deadline is not None:
        parts.append(f"deadline in {deadline:.1f} h")
    if p.budget_usd is not None:
        parts.append(f"budget ${p.budget_usd:,.2f}")
    if p.onprem:
        price = f"${p.onprem.usd_per_gpu_hour}/GPU-h" if p.onprem.usd_per_gpu_hour is not None else "a price derived from hardware and power"
        parts.append(f"on-prem {p.onprem.gpus} {p.onprem.accelerator} at {price}")
    out.print(f"{file}: valid ({'; '.join(parts)})")


@policy_app.command("schema")
def policy_schema() -> None:
    """Print the policy JSON Schema (for editors and CI checks)."""
    from ..placement import policy

    _emit_json(policy.schema())


# --------------------------------------------------------------------------- catalog


catalog_app = typer.Typer(help="List the price catalog, or refresh its rows from the providers' price lists.")


@catalog_app.callback(invoke_without_command=True)
def catalog(
    ctx: typer.Context,
    accelerator: Annotated[Optional[str], typer.Option(help="only this accelerator")] = None,
    provider: Annotated[Optional[str], typer.Option(help="only this provider")] = None,
    catalog_file: Annotated[Optional[Path], typer.Option("--catalog", help="price catalog CSV (default: the refreshed one, else the packaged one)")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List the price catalog: node shapes, on-demand and spot prices, and where each comes from."""
    if ctx.invoked_subcommand is not None:
        return
    from ..catalog import offers as cat

    offers = cat.load(catalog_file)
    rows = [o for o in offers if (accelerator is None or o.accelerator.lower() == accelerator.lower()) and (provider is None or o.provider == provider)]
    if not rows:
        raise BurstError(f"no catalog rows match; accelerators: {', '.join(cat.accelerators(offers))}")
    if as_json:
        _emit_json([o.to_dict() for o in rows])
        return
    t = Table(title=f"price catalog ({len(rows)} rows, {catalog_file or cat.default_path()})")
    for col in ("provider", "region", "instance", "accel", "n", "on-demand $/h", "spot $/h", "quality", "date"):
        t.add_column(col, justify="right" if col in ("n", "on-demand $/h", "spot $/h") else "left")
    for o in rows:
        t.add_row(o.provider, o.region, o.instance_type, o.accelerator, str(o.accelerator_count), f"{o.price_od:.4f}",
                  "-" if o.price_spot is None else f"{o.price_spot:.4f}", o.quality, o.fetched_at)
    out.print(t)


@catalog_app.command("refresh")
def catalog_refresh(
    provider: Annotated[Optional[str], typer.Option(help="whose rows to renew (default: every provider whose price list needs no account: Azure's Retail Prices API; gcp and gcp-tpu read Google's Cloud Billing Catalog with your credentials)")] = None,
    catalog_file: Annotated[Optional[Path], typer.Option("--catalog", help="catalog to start from (default: the refreshed one, else the packaged one)")] = None,
    out_file: Annotated[Optional[Path], typer.Option("--out", help="where to write (default: the refreshed catalog every command reads)")] = None,
    accept: Annotated[bool, typer.Option("--accept", help="write prices that moved by more than 25 % too (without it, such a refresh is shown and nothing is written)")] = False,
) -> None:
    """Renew the catalog's rows from the providers' public price lists; each renewed row carries its source and date."""
    import datetime

    from .. import targets
    from ..catalog import offers as cat
    from ..catalog import refresh
    from ..home.records import write_text_atomic
    from ..home.userfile import read_text

    providers = [targets.check_provider(provider)] if provider else list(refresh.renewed_by_default())
    source = catalog_file or cat.default_path()
    dest = out_file or cat.refreshed_path()
    today = datetime.date.today().isoformat()
    cat.load(source)  # a catalog that does not read is one line here, before anything is asked
    text, said, large = read_text(source, "catalog"), [], []
    for name in providers:
        text, changes, missing = refresh.refresh(text, name, today)
        said += [f"  {c.describe()}" + (f" [moved {c.largest_move:.0%}]" if c.large else "") for c in changes]
        said += [f"  kept: {line}" for line in missing]
        said.append(f"{name}: {len(changes)} row(s) renewed from its price list, {len(missing)} kept")
        large += [c for c in changes if c.large]
    if large and not accept:
        for line in said:
            console.print(line)
        worst = max(large, key=lambda c: c.largest_move)
        raise BurstError(f"{len(large)} price(s) moved by more than {refresh.LARGE_CHANGE:.0%} (the most: {worst.instance_type} in "
                         f"{worst.region}, {worst.largest_move:.0%}); nothing was written: check them against the provider's price "
                         f"page, then run again with --accept to take them, or correct the rows by hand (quality: corrected)")
    if provider is None and (asked := [p for p in refresh.renewable() if p not in providers]):
        said.append(f"not renewed: {', '.join(asked)} (their price list needs your credentials: "
                    f"`burst catalog refresh --provider {asked[0]}`)")
    stamp = "# Rows refreshed by `burst catalog refresh`"
    text = f"{stamp} ({', '.join(providers)}) on {today} from {source}.\n" + "".join(
        line for line in text.splitlines(keepends=True) if not line.startswith(stamp))
    dest.parent.mkdir(parents=True, exist_ok=True)
    draft = dest.with_name(dest.name + ".new")
    write_text_atomic(draft, text)
    try:
        cat.load(draft)  # what is written must read back as a catalog before it replaces anything
    except BurstError:
        draft.unlink(missing_ok=True)
        raise
    os.replace(draft, dest)
    for line in said:
        console.print(line)
    out.print(f"written: {dest}")


# --------------------------------------------------------------------------- bench


def workloads_list(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the workloads burst can train (its own, installed packages' entry points, code named here before), with where each comes from."""
    rows = []
    for name in workloads.names():
        try:
            w = workloads.get(name)
        except BurstError as exc:
            if name in workloads.BUILT_IN or name in workloads.entry_points():
                raise  # two of one name, or an installed one that does not load: said in one line
            rows.append({"name": name, "title": "", "presets": [], "tunable": [], "epoch_metrics": [], "gate_metrics": [],
                         "example_space": "", "from": f"cannot load: {exc}"})
            continue
        rows.append({"name": w.name, "title": w.title, "presets": list(w.presets), "tunable": list(w.tunable),
                     "epoch_metrics": list(w.epoch_metrics), "gate_metrics": list(w.gate_metrics), "example_space": str(w.example_space),
                     "from": workloads.where(name)})
    if as_json:
        _emit_json(rows)
        return
    t = Table(title="workloads")
    for col in ("name", "what it trains", "presets", "scan knobs", "scan metrics (first: default)", "from"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["title"], ", ".join(r["presets"]), ", ".join(r["tunable"]), ", ".join(r["epoch_metrics"]), r["from"])
    out.print(t)


def bench(
    workload: Annotated[str, typer.Argument(help=f"workload to measure: {' | '.join(workloads.NAMES)}")] = workloads.DEFAULT,
    batch: Annotated[int, typer.Option(help="events per step")] = 4,
    steps: Annotated[int, typer.Option(help="steps per timed block")] = 3,
    repeats: Annotated[int, typer.Option(help="timed blocks (the best is kept)")] = 2,
    precisions: Annotated[Optional[str], typer.Option(
        help="comma-separated precisions to measure, float32 first (what the plan falls back on); default: float32, and "
             "bfloat16 too where this CPU runs it in hardware (AVX512-BF16 or AMX)")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Measure this machine on the workload's profiled preset, in float32 (and bfloat16 where the CPU has it), and record it for `burst plan`."""
    from workloads.common import precision as precision_names

    from ..placement import profile

    w = workloads.get(workload)
    for name, v in (("batch", batch), ("steps", steps), ("repeats", repeats)):
        if v < 1:
            raise BurstError(f"--{name} must be a positive whole number, got {v}")
    asked = _bench_precisions(precisions, precision_names.cpu_flags())
    if precision_names.FLOAT16 in asked:
        raise BurstError("--precisions: mixed_float16 runs on GPUs only; `burst bench` measures this machine's CPUs")
    if w.bench_command(batch, steps, repeats) is None:
        raise BurstError(f"workload {workload} has no benchmark; `burst calibrate RUN` measures it from finished runs instead")
    results = {}
    for precision in asked:
        console.print(f"measuring the {w.profile_preset} preset of {workload} in {precision} on {os.cpu_count()} CPUs "
                      f"({repeats} blocks of {steps} steps of {batch} events)...")
        results[precision] = _bench_once(w.bench_command(batch, steps, repeats, precision))
    first = results[precision_names.FLOAT32]
    record = {"workload": workload, "preset": w.profile_preset, "events_per_s": first["samples_per_s"],
              "events_per_s_median": first["samples_per_s_median"], "gflops": first["gflops"],
              "cpus": os.cpu_count(), "batch": batch, "by_precision": {p: r["samples_per_s"] for p, r in results.items()},
              "cpu_flags": first.get("machine", {}).get("simd", [])}
    path = profile.record_local(workload, record)
    if as_json:
        _emit_json({**record, "recorded_in": str(path)})
        return
    out.print(f"{record['events_per_s']:.2f} events/s ({record['gflops']:.1f} GFLOP/s) in float32 on {record['cpus']} CPUs; recorded in {path}")
    for precision, r in list(results.items())[1:]:
        out.print(f"{r['samples_per_s']:.2f} events/s in {precision}: {r['samples_per_s'] / first['samples_per_s']:.2f}x float32 "
                  f"(CPU flags: {' '.join(record['cpu_flags']) or 'unknown'})")


def _bench_precisions(asked: str | None, cpu_flags: list[str]) -> list[str]:
    """The precisions `burst bench` measures: those asked for, else float32, and bfloat16 too where
    the CPU runs it in hardware (AVX512-BF16 or AMX: worth seeing there; emulated elsewhere, many
    times slower than float32, so measuring it by default would only cost minutes)."""
    from workloads.common import precision as precision_names

    if asked is None:
        native = [precision_names.BFLOAT16] if precision_names.cpu_bf16_hardware(cpu_flags) else []
        return [precision_names.FLOAT32, *native]
    names = [p.strip() for p in asked.split(",") if p.strip()]
    if not names or names[0] != precision_names.FLOAT32 or any(p not in precision_names.PRECISIONS for p in names):
        raise BurstError(f"--precisions {asked}: a comma-separated list that starts with float32, of {', '.join(precision_names.PRECISIONS)}")
    return names


def _bench_once(command: list[str]) -> dict:
    """One benchmark subprocess's JSON result; BurstError (one line) when it fails or hangs."""
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=3600)
    except subprocess.TimeoutExpired:
        raise BurstError("the benchmark did not finish within an hour", exit_code=1) from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BurstError(f"the benchmark failed: {last}", exit_code=1)
    return json.loads(lines[-1])


def profile(
    workload: Annotated[str, typer.Argument(help="a workload of the public interface: its name, package.module:OBJECT or path/file.py:OBJECT")],
    batches: Annotated[Optional[str], typer.Option(help="comma-separated batch sizes to time (default: half the workload's batch, it, and four times it)")] = None,
    events: Annotated[Optional[int], typer.Option(help="training events made for the measurement, and an epoch of the profile (default: the workload's `events`)")] = None,
    seed: Annotated[int, typer.Option(help="seed of the data it makes")] = 0,
    data: Annotated[Optional[Path], typer.Option(help="its training data (default: the data it makes, `make_data`)")] = None,
    out_file: Annotated[Optional[Path], typer.Option("--out", help="where to write the profile (default: the one `burst plan` reads, in burst's home)")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Measure a workload on this machine (samples/s by batch, FLOPs and parameters as its framework counts them, data and checkpoint sizes) and write the profile `burst plan` estimates it from."""
    from .. import api

    asked = None
    if batches is not None:
        try:
            asked = [int(b) for b in batches.split(",") if b.strip()]
        except ValueError:
            raise BurstError(f"--batches {batches}: a comma-separated list of whole numbers, e.g. 16,64,256") from None
    result = api.profile(workload, batches=asked, events=events, seed=seed, out=out_file, data=data, report=ConsoleReporter())
    if as_json:
        _emit_json(result.model_dump(mode="json"))
        return
    m = result.measured
    for row in m["batches"]:
        out.print(f"batch {row['batch']:>5}: {row['samples_per_s']:>12,.0f} samples/s")
    flops = f"{m['flops_per_event']:,.0f} FLOPs per training event" if m.get("flops_per_event") else f"FLOPs {m['flops_by']}"
    params = f"{m['parameters']:,} trainable parameters" if m.get("parameters") else "parameters not counted"
    out.print(f"{flops}; {params}; a checkpoint {m['checkpoint_bytes']:,} bytes; {m['events']} events {m['data_bytes']:,} bytes")
    out.print(f"this machine's dense float32 rate: {m['matmul_gflops']:.1f} GFLOP/s (NumPy's matmul)")
    out.print(f"derived for one GPU: per event per replica; an epoch of {m['events']} events at batch {result.batch}:")
    for speed in result.derived:
        out.print(f"{speed.accelerator:>10}: {speed.per_event_us:8.3g} µs ({speed.low_us:.3g} to {speed.high_us:.3g}); "
                  f"epoch {speed.epoch_s:.3g} s ({speed.epoch_low_s:.3g} to {speed.epoch_high_s:.3g})")
    out.print(f"profile written to {result.path}" + ("; `burst plan` estimates the workload from it" if result.used_by_plan else ""))
    if result.note:
        console.print(result.note)
