"""The CLI's contract for bad input: one clear line, exit code 2, no traceback; lazy imports."""

import os
import subprocess
import sys

import pytest


def burst(*args, home, cwd=None, timeout=60):
    env = {**os.environ, "BURST_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["up", "--provider", "mars"], "unknown provider 'mars'"),
        (["up", "--provider", "gcp", "--accelerator", "V100", "--gpus", "8", "--region", "us-central1"], "cannot create a cluster on gcp"),
        (["up", "--cpus", "0"], "--cpus must be a positive"),
        (["up", "--provider", "local", "--gpus", "64"], "--gpus 64: this machine has"),
        (["train", "nope"], "unknown workload 'nope'"),
        (["run", "--precision", "fp8"], "--precision: unknown precision 'fp8'; choose one of: auto, float32, mixed_bfloat16"),
        (["train", "gan3d", "--cluster", "ghost"], "no cluster named 'ghost'"),
        (["train", "gan3d", "--epochs", "0"], "--epochs must be a positive"),
        (["train", "gan3d", "--preset", "huge"], "unknown preset 'huge'"),
        (["train", "gan3d", "--data", "/no/such/dir"], "no such file or directory"),
        (["run", "gan3d", "--provider", "mars"], "unknown provider 'mars'"),
        (["up", "--provider", "gcp", "--accelerator", "V100", "--gpus", "8", "--region", "us-central1", "--policy", "policies/eu-only.yaml",
          "--dry-run"], "region us-central1 is not allowed by the policy"),
        (["up", "--provider", "gcp", "--accelerator", "V100", "--gpus", "256", "--region", "us-central1", "--dry-run"], "over the policy's max_gpus 128"),
        (["up", "--provider", "gcp", "--accelerator", "V100", "--gpus", "8", "--region", "us-central1", "--preemptible", "--policy",
          "policies/deadline.yaml", "--dry-run"], "preemptible: never"),
        (["up", "--provider", "gcp", "--accelerator", "B200", "--gpus", "8", "--region", "us-central1", "--dry-run"], "unknown accelerator 'B200'; known: A100-40GB"),
        (["up", "--provider", "gcp", "--accelerator", "V100", "--gpus", "0"], "--gpus must be a positive"),
        (["up", "--provider", "local", "--dry-run"], "--dry-run renders cloud stacks"),
        (["run", "nope"], "unknown workload 'nope'"),
        (["down", "ghost"], "no cluster named 'ghost'"),
        (["logs", "no-run"], "no run named 'no-run'"),
        (["report", "no-run"], "no run named 'no-run'"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, args, fragment):
    proc = burst(*args, home=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1
    assert not list(tmp_path.glob("clusters/*.json"))  # nothing half-created


def test_non_numeric_option_is_rejected_by_typer(tmp_path):
    proc = burst("train", "gan3d", "--epochs", "many", home=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_cli_startup_imports_no_heavy_frameworks():
    code = "import sys, burst.cli; heavy = [m for m in ('tensorflow', 'ray', 'keras', 'h5py', 'matplotlib', 'psutil') if m in sys.modules]; print(heavy)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_status_with_nothing_running(tmp_path):
    proc = burst("status", "--json", home=tmp_path)
    assert proc.returncode == 0
    import json

    assert json.loads(proc.stdout) == {"clusters": [], "runs": [], "moves": {}, "timelines": {}, "attempts": {}, "revived": [], "revived_watchers": [],
                                       "damaged": []}


BAD_NAMES = ["a/b", "../../x", "x" * 300, "Upper", "has space", "..", "a.b", "-x"]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("command", [["up", "--provider", "local", "--name"], ["run", "gan3d", "--provider", "local", "--name"],
                                     ["down"], ["train", "gan3d", "--cluster"], ["logs"], ["report"]])
def test_bad_names_are_one_line_naming_the_rule_and_touch_nothing(tmp_path, monkeypatch, command, name):
    from typer.testing import CliRunner

    from burst import cli

    home = tmp_path / "home"
    monkeypatch.setenv("BURST_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    outside_before = set(tmp_path.rglob("*"))
    result = CliRunner().invoke(cli.app, [*command, name])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, no exception escaped
    if name.startswith("-") and "No such option" in result.output:
        pass  # as an argument it is an unknown option, never a name
    else:
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "use 1 to 40 lowercase letters, digits and '-'" in lines[0], result.output
    created = {p for p in set(tmp_path.rglob("*")) - outside_before if home not in p.parents and p != home}
    assert created == set()  # nothing written outside the state directory
    assert not list(home.glob("clusters/*")) and not list(home.glob("**/auth_token"))


def test_name_rule_refuses_nul_and_takes_ordinary_names():
    from burst.errors import BurstError
    from burst.home.state import check_name

    for good in ("local", "run-local", "gcp-tpu", "a", "x" * 40, "gan3d-20261123-021420-d496"):
        assert check_name(good) == good
    for bad in ("a\x00b", "", "x" * 41, "-a", "a_b"):
        with pytest.raises(BurstError, match="is not allowed"):
            check_name(bad)


def test_losing_a_same_name_race_says_who_is_starting_it_and_never_suggests_down(tmp_path, monkeypatch):
    from burst.home import state
    from burst.home.state import ClusterHandle

    monkeypatch.setenv("BURST_HOME", str(tmp_path))
    with state.locked():  # the winner (this test process, alive) is still starting the cluster
        state.save(ClusterHandle(name="same", provider="local", cluster_id="c0ffee", state="starting", storage_uri="/s",
                                 dashboard_url="http://127.0.0.1:9", starter_pid=os.getpid()))
    proc = burst("up", "--provider", "local", "--name", "same", home=tmp_path)
    assert proc.returncode == 1
    assert f"cluster 'same' is starting, started by PID {os.getpid()}" in proc.stderr and "burst down" not in proc.stderr
    assert state.load(ClusterHandle, "same").state == "starting"  # the winner's record is untouched


def test_every_command_that_places_a_cluster_takes_the_same_placement_flags(tmp_path):
    """The placement flags are declared once: plan, up, run and tune list each common one with the
    same help, and a value given to any of them reaches the same placement (here: a region where
    the accelerator is not sold, refused in the same line before anything starts)."""
    from burst.cli.placement_options import COMMON, OPTIONS

    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    helps = {c: subprocess.run([sys.executable, "-m", "burst.cli", c, "--help"], capture_output=True, text=True, env=env, timeout=60).stdout
             for c in ("plan", "up", "run", "tune")}
    for field in COMMON:
        flag = "--" + field.replace("_", "-")
        first_words = " ".join(OPTIONS[field].__metadata__[0].help.split()[:4])
        for command, text in helps.items():
            assert flag in text and first_words in " ".join(text.split()), f"burst {command} --help lacks {flag} as declared"
    space = tmp_path / "space.yaml"
    space.write_text("learning_rate: {loguniform: [3.0e-4, 3.0e-3]}\n")
    asks = {"up": ["up", "--dry-run"], "run": ["run", "gan3d"], "tune": ["tune", "gan3d", "--space", str(space)]}
    for command, args in asks.items():
        proc = burst(*args, "--provider", "gcp", "--accelerator", "V100", "--gpus", "8", "--region", "mars-central1", home=tmp_path)
        assert proc.returncode == 2 and "V100 on gcp is offered in" in proc.stderr and "not in mars-central1" in proc.stderr, (command, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("clusters/*.json"))
