"""`burst plan | policy | catalog | bench` as a user runs them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.common import precision
from burst.errors import BurstError

ROOT = Path(__file__).resolve().parents[3]


def burst(*args, home, timeout=120):
    """The CLI as a process: what only a process shows (one line and the exit code for bad input)."""
    env = {**os.environ, "BURST_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


def answer(*args, home):
    """What a command answers, from the CLI run in this process (a process a call cost 0.5 to 1 CPU-second)."""
    from tests.support.cli_runs import burst_here

    return burst_here(*args, home=home, cwd=ROOT)


def test_plan_json_ranks_candidates_and_explains_the_choice(tmp_path):
    proc = answer("plan", "gan3d", "--policy", "policies/deadline.yaml", "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    choice = plan["choice"]
    assert choice["feasible"] and choice["est_hours"] <= plan["deadline_hours"] and choice["est_cost_usd"] <= 1500
    assert choice["preemptible"] is False  # deadline.yaml: preemptible never
    assert plan["candidates"][0] == choice
    assert any(not c["feasible"] and c["reasons"] for c in plan["candidates"])


def test_plan_table_highlights_the_choice_and_says_why(tmp_path):
    proc = answer("plan", "--policy", "policies/default.yaml", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "choice: ray site-gpu V100 x8" in proc.stdout
    assert "on-prem first" in proc.stdout


def test_nothing_feasible_exits_1_and_shows_the_nearest(tmp_path):
    pol = tmp_path / "tight.yaml"
    pol.write_text("budget_usd: 0.5\ndeadline: 2h\nproviders: [gcp]\n")
    proc = answer("plan", "--policy", str(pol), home=tmp_path)
    assert proc.returncode == 1
    assert "no feasible target" in proc.stdout and "nearest" in proc.stdout
    proc = answer("plan", "--policy", str(pol), "--json", home=tmp_path)
    assert json.loads(proc.stdout)["choice"] is None and json.loads(proc.stdout)["nearest"]["reasons"]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["plan", "--policy", "/no/such.yaml"], "cannot read policy /no/such.yaml"),
        (["plan", "--gpus", "0"], "--gpus must be a positive"),
        (["plan", "--provider", "aws"], "unknown provider 'aws'"),
        (["plan", "nope"], "unknown workload 'nope'"),
        (["plan", "--catalog", "/no/such.csv"], "cannot read catalog"),
        (["catalog", "--accelerator", "B200"], "no catalog rows match"),
        (["policy", "check", "/no/such.yaml"], "cannot read policy"),
        (["bench", "--steps", "0"], "--steps must be a positive"),
        (["bench", "--precisions", "mixed_bfloat16"], "--precisions mixed_bfloat16: a comma-separated list that starts with float32"),
        (["bench", "--precisions", "float32,mixed_float16"], "mixed_float16 runs on GPUs only"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, fragment):
    proc = burst(*args, home=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert fragment in proc.stderr and "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1


def test_policy_check_and_schema(tmp_path):
    assert answer("policy", "check", "policies/eu-only.yaml", home=tmp_path).returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("objective: min_cost\nregions: [europe-*]\nmax_gpu: 8\n")
    proc = answer("policy", "check", str(bad), home=tmp_path)
    assert proc.returncode == 2 and f"{bad}:3: unknown field 'max_gpu'" in proc.stderr
    schema = json.loads(answer("policy", "schema", home=tmp_path).stdout)
    assert "budget_usd" in schema["properties"]


def test_catalog_filters_and_overrides(tmp_path):
    rows = json.loads(answer("catalog", "--accelerator", "v100", "--json", home=tmp_path).stdout)
    assert rows and {r["accelerator"] for r in rows} == {"V100"}
    custom = tmp_path / "c.csv"
    custom.write_text("provider,region,zone,instance_type,accelerator,accelerator_count,vcpus,memory_gib,price_od,price_spot,unit,quality,source,fetched_at,note\n"
                      "gcp,europe-west9,europe-west9-a,n1-standard-8,V100,1,8,30,1.0,0.5,node,catalog,my quote,2026-11-20,\n")
    plan = json.loads(answer("plan", "--catalog", str(custom), "--json", "--policy", "policies/cost-first.yaml", home=tmp_path).stdout)
    assert {c["region"] for c in plan["candidates"] if c["target"] == "cloud"} == {"europe-west9"}


def test_plan_imports_no_heavy_frameworks(tmp_path):
    code = ("import sys; sys.argv = ['burst', 'plan', '--json']\n"
            "import burst.cli\n"
            "try:\n    burst.cli.app()\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('tensorflow', 'ray', 'keras', 'h5py', 'pulumi', 'matplotlib', 'numpy') if m in sys.modules]\n"
            "print('HEAVY', heavy, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "BURST_HOME": str(tmp_path)})
    assert "HEAVY []" in out.stderr, out.stderr[-2000:]


@pytest.mark.slow
def test_bench_measures_this_machine_and_plan_uses_it(tmp_path):
    # float32 only: what the plan reads on a CPU. Which precisions bench measures by default (bfloat16
    # too where the CPU has it): the test below; bfloat16 on this CPU: tests/workloads/common/test_precision.py.
    # (Measuring bfloat16 here too cost the suite 19 CPU-s on an AMX machine.)
    proc = burst("bench", "--batch", "2", "--steps", "1", "--repeats", "1", "--precisions", "float32", "--json", home=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads(proc.stdout)
    assert rec["events_per_s"] > 0 and Path(rec["recorded_in"]).exists()
    here = precision.for_cpu(precision.cpu_flags())[0]  # the policy's auto: float32 on a CPU
    assert here == "float32" and rec["by_precision"] == {"float32": rec["events_per_s"]}
    plan = json.loads(answer("plan", "--policy", "policies/default.yaml", "--json", home=tmp_path).stdout)
    local = next(c for c in plan["candidates"] if c["target"] == "local")
    assert local["est_epoch_s"] == pytest.approx(124987 / rec["by_precision"][here], rel=0.01)
    assert any(f"measured by `burst bench` in {here}" in r for r in local["reasons"])


def test_bench_measures_bfloat16_by_default_only_where_the_cpu_runs_it_in_hardware():
    from burst.cli.planning import _bench_precisions

    assert _bench_precisions(None, ["avx2", "fma"]) == ["float32"]  # emulated bfloat16: many times slower, never chosen
    assert _bench_precisions(None, ["avx512f", "avx512_bf16"]) == ["float32", "mixed_bfloat16"]
    assert _bench_precisions(None, ["amx_bf16"]) == ["float32", "mixed_bfloat16"]
    assert _bench_precisions("float32,mixed_bfloat16", ["avx2"]) == ["float32", "mixed_bfloat16"]  # asked for: measured
    with pytest.raises(BurstError, match="starts with float32"):
        _bench_precisions("mixed_bfloat16", ["avx2"])


def test_up_without_provider_takes_the_plans_choice(tmp_path):
    proc = answer("up", "--policy", "policies/cost-first.yaml", "--dry-run", "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rendered = json.loads(proc.stdout)
    plan = json.loads(answer("plan", "--policy", "policies/cost-first.yaml", "--json", home=tmp_path).stdout)["choice"]
    assert rendered["provider"] == plan["provider"] and rendered["region"] == plan["region"]
    assert rendered["layout"]["accelerator"] == plan["accelerator"] and rendered["preemptible"] == plan["preemptible"]
    assert "plan:" in proc.stderr


def test_up_without_provider_on_prem_choice_needs_its_address(tmp_path):
    proc = answer("up", "--policy", "policies/default.yaml", home=tmp_path)
    assert proc.returncode == 2
    assert "plan: ray site-gpu V100 x8" in proc.stderr
    assert "onprem section has no ray_address" in proc.stderr and "Traceback" not in proc.stderr


def test_plan_takes_the_same_capacity_and_region_flags_as_up(tmp_path):
    spot = json.loads(answer("plan", "--preemptible", "--provider", "gcp", "--accelerator", "H100", "--gpus", "12", "--region", "europe-west4",
                            "--json", home=tmp_path).stdout)
    choice = spot["choice"]
    assert (choice["region"], choice["preemptible"]) == ("europe-west4", True)
    assert choice["layout"]["zones"] == ["europe-west4-b"]  # a zone that offers H100
    on_demand = answer("plan", "--on-demand", "--provider", "gcp", "--accelerator", "H100", "--gpus", "12", "--json", home=tmp_path)
    assert on_demand.returncode == 1  # a3-highgpu-4g is sold as spot only: 12 H100 cannot be bought on demand
    assert "no node shape for the count" in json.loads(on_demand.stdout)["why"]


def test_for_tpus_gpus_counts_chips(tmp_path):
    plan = json.loads(answer("plan", "--provider", "gcp-tpu", "--gpus", "4", "--json", home=tmp_path).stdout)
    assert {(c["accelerator"], c["count"]) for c in plan["candidates"]} == {  # v3-8: 8 TensorCores, 4 chips
        ("tpu-v2-8", 4), ("tpu-v3-8", 4), ("tpu-v4-8", 4), ("tpu-v5p-8", 4)}
    none = answer("plan", "--provider", "gcp-tpu", "--gpus", "3", "--json", home=tmp_path)
    why = json.loads(none.stdout)["why"]  # the filter that refused says what there is
    assert none.returncode == 1 and "--gpus 3: gcp-tpu offers" in why and "tpu-v3-8 x4" in why, why
    pods = json.loads(answer("plan", "--provider", "gcp-tpu", "--gpus", "16", "--json", home=tmp_path).stdout)  # slices of several hosts
    assert {c["accelerator"] for c in pods["candidates"]} == {"tpu-v2-32", "tpu-v3-32", "tpu-v4-32", "tpu-v5litepod-16", "tpu-v5p-32", "tpu-v6e-16"}
    assert all(c["count"] == 16 for c in pods["candidates"])


def test_a_layout_mixing_infiniband_and_ethernet_nodes_is_refused_with_the_way_out(tmp_path):
    args = ("--provider", "azure", "--gpus", "100", "--accelerator", "A100-80GB")
    mixed = answer("plan", *args, "--json", home=tmp_path)
    assert mixed.returncode == 1 and "would mix InfiniBand and Ethernet-only nodes" in json.loads(mixed.stdout)["why"]
    up = answer("up", *args, "--dry-run", home=tmp_path)
    errors = [line for line in up.stderr.splitlines() if line.startswith("error:")]
    assert up.returncode == 2 and len(errors) == 1
    assert "would mix InfiniBand nodes (Standard_ND96amsr_A100_v4) with Ethernet-only nodes (Standard_NC96ads_A100_v4)" in errors[0]
    assert "--gpus-per-node 1, 2, 4" in errors[0]
    one_shape = json.loads(answer("plan", *args, "--gpus-per-node", "4", "--json", home=tmp_path).stdout)["choice"]["layout"]
    assert [(p["instance_type"], p["nodes"]) for p in one_shape["pools"]] == [("Standard_NC96ads_A100_v4", 25)]
    rendered = json.loads(answer("up", *args, "--gpus-per-node", "4", "--dry-run", "--json", home=tmp_path).stdout)
    assert rendered["layout"]["pools"][0]["nodes"] == 25


PLACEMENT_FLAGS = {"--provider", "--accelerator", "--gpus", "--nodes", "--gpus-per-node", "--preemptible", "--on-demand", "--region",
                   "--batch-per-replica", "--epochs", "--policy"}


def test_plan_up_and_run_take_one_set_of_placement_flags():
    import typer

    from burst.cli import app

    commands = typer.main.get_command(app).commands
    for name in ("plan", "up", "run"):
        flags = {opt for p in commands[name].params for opt in (*p.opts, *p.secondary_opts)}
        assert PLACEMENT_FLAGS <= flags, (name, sorted(PLACEMENT_FLAGS - flags))


def test_plan_nodes_keeps_layouts_of_that_many_nodes(tmp_path):
    plan = json.loads(answer("plan", "--provider", "gcp", "--accelerator", "V100", "--nodes", "4", "--json", home=tmp_path).stdout)
    assert {(c["count"], c["layout"]["nodes"]) for c in plan["candidates"]} == {(32, 4)}
    assert plan["excluded"]["another node count"] > 0


def test_plan_json_carries_time_cost_and_emissions_for_every_example_policy(tmp_path):
    for name in ("default", "cost-first", "deadline", "eu-only"):
        plan = json.loads(answer("plan", "--policy", str(ROOT / "policies" / f"{name}.yaml"), "--json", home=tmp_path).stdout)
        choice = plan["choice"]
        assert choice["est_hours"] > 0 and choice["est_cost_usd"] > 0 and choice["est_kgco2e"] > 0, name
        assert choice["batch_per_replica"] == 64  # what `burst run --preset paper` trains with


@pytest.mark.parametrize("provider, accelerator, after", [("gcp", "V100", 0.234), ("azure", "T4", 0.192), ("gcp-tpu", "v3-8", 0.0)])
def test_the_plan_says_what_a_cloud_cluster_costs_after_its_lease(tmp_path, provider, accelerator, after):
    """Its keeper ends the cluster at the lease's end; what cannot scale to zero (a control plane's
    fee, the system pool) goes on until `burst down`, and the plan says how much."""
    policy = tmp_path / "p.yaml"
    policy.write_text(f"providers: [{provider}]\n")
    proc = answer("plan", "--policy", str(policy), "--provider", provider, "--accelerator", accelerator, "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    choice = json.loads(proc.stdout)["choice"]
    assert choice["after_lease_usd_per_hour"] == after
    text = answer("plan", "--policy", str(policy), "--provider", provider, "--accelerator", accelerator, home=tmp_path).stdout
    assert f"after its lease: its keeper ends it; until `burst down`, ${after:,.3f}/h" in " ".join(text.split())
    local = json.loads(answer("plan", "--policy", "policies/default.yaml", "--json", home=tmp_path).stdout)["choice"]
    assert local["after_lease_usd_per_hour"] is None  # not a cloud: nothing left to pay for
