"""A workload of a group's own, outside burst's source tree: found by its entry point or by its
code named on the command line, refused in one line when it cannot be one, trained on several
workers (separate processes) with a checkpoint every epoch, stopped at one, resumed from it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from burst import workloads
from burst.cli import app
from tests.support.cli_runs import burst, record, wait_until
from tests.support.installed import with_entry_points

ROOT = Path(__file__).resolve().parents[3]
KERAS = ROOT / "examples" / "keras-classifier" / "src" / "keras_classifier" / "workload.py"
TOY = '''
from burst.workload import Workload


class Toy(Workload):
    name = "{name}"
    presets = ("tiny",)
    {extra}

    def train(self, ctx):
        for epoch in ctx.epochs():
            ctx.end_epoch({{"loss": 1.0 / (epoch + 1)}}, save=lambda d: (d / "w.txt").write_text(str(epoch)))


WORKLOAD = Toy()
'''


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A burst home of its own, and the registry as a new process finds it (what a test loads is forgotten after)."""
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    before = (dict(workloads._instances), dict(workloads._sources), dict(workloads._by_spec))
    for cache in (workloads._instances, workloads._sources, workloads._by_spec):
        cache.clear()  # as a new process: nothing loaded yet
    yield tmp_path
    for cache, kept in zip((workloads._instances, workloads._sources, workloads._by_spec), before):
        cache.clear()
        cache.update(kept)


def _package(site: Path, package: str, name: str, extra: str = "") -> None:
    (site / package).mkdir(parents=True, exist_ok=True)
    (site / package / "__init__.py").write_text("")
    (site / package / "workload.py").write_text(TOY.format(name=name, extra=extra))


def _cli(*words: str):
    result = CliRunner().invoke(app, list(words))
    return result.exit_code, result.output


def test_an_installed_package_s_workload_is_found_by_its_entry_point_and_listed_with_where_it_comes_from(fresh, monkeypatch):
    from burst.lifecycle.runs import TrainRequest

    site = fresh / "site"
    _package(site, "toy_models", "toy")
    monkeypatch.syspath_prepend(str(with_entry_points(site, "toy-models", {"toy": "toy_models.workload:WORKLOAD"})))
    code, out = _cli("workloads", "--json")
    assert code == 0, out
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(workloads.BUILT_IN) <= set(rows) and rows["toy"]["from"] == "entry point toy_models.workload:WORKLOAD (group burst.workloads)"
    assert rows["gan3d"]["from"].startswith("burst's own")
    request = TrainRequest.of(workload="toy", epochs=2)
    assert request.workload == "toy" and request.preset == "tiny" and request.workload_source is None  # installed: found by name there too


def test_code_named_on_the_command_line_is_known_by_its_name_afterwards(fresh):
    from burst.lifecycle.runs import TrainRequest

    mine = fresh / "mine.py"
    mine.write_text(TOY.format(name="mine", extra=""))
    request = TrainRequest.of(workload=f"{mine.relative_to(Path.cwd()) if mine.is_relative_to(Path.cwd()) else mine}:WORKLOAD")
    assert request.workload == "mine" and request.workload_source == f"{mine}:WORKLOAD"  # absolute: a job elsewhere finds it
    for cache in (workloads._instances, workloads._sources, workloads._by_spec):
        cache.pop("mine", None)
        cache.pop(f"{mine}:WORKLOAD", None)
    code, out = _cli("workloads", "--json")  # a later command in this home: found by its name
    assert code == 0 and {r["name"]: r["from"] for r in json.loads(out)}["mine"] == f"code {mine}:WORKLOAD", out


def test_two_workloads_of_one_name_are_refused_in_one_line_naming_both(fresh, monkeypatch):
    site = fresh / "site"
    _package(site, "shadow", "gan3d")
    _package(site, "twin_a", "twin")
    _package(site, "twin_b", "twin")
    monkeypatch.syspath_prepend(str(with_entry_points(site, "shadow", {"gan3d": "shadow.workload:WORKLOAD"})))
    with_entry_points(site, "twin-a", {"twin": "twin_a.workload:WORKLOAD"})
    with_entry_points(site, "twin-b", {"twin": "twin_b.workload:WORKLOAD"})
    for words, both in ((["workloads"], ("burst's own (workloads.gan3d.workload:WORKLOAD)", "entry point shadow.workload:WORKLOAD")),
                        (["train", "twin", "--cluster", "nowhere"], ("entry point twin_a.workload:WORKLOAD", "entry point twin_b.workload:WORKLOAD"))):
        code, out = _cli(*words)
        lines = [line for line in out.splitlines() if line.strip()]
        assert code != 0 and len(lines) == 1 and "two workloads are called" in out and all(b in out for b in both), out
    calo_again = fresh / "calo_again.py"
    calo_again.write_text(TOY.format(name="calo", extra=""))
    code, out = _cli("train", f"{calo_again}:WORKLOAD", "--cluster", "nowhere")
    assert code != 0 and "two workloads are called 'calo'" in out and "burst's own" in out and "Traceback" not in out, out


@pytest.mark.parametrize("code_text, words, says", [
    (None, ["nosuch.py:WORKLOAD"], "no such file"),
    (TOY.format(name="toy", extra=""), ["{file}:NOPE"], "has no NOPE"),
    ("WORKLOAD = 42\n", ["{file}:WORKLOAD"], "is a int, not a workload: subclass burst.workload.Workload"),
    (TOY.format(name="toy", extra="api_version = 2"), ["{file}:WORKLOAD"], "was written for burst's workload interface 2"),
    (TOY.format(name="has space", extra=""), ["{file}:WORKLOAD"], "is not a workload name"),
    (TOY.format(name="toy", extra='framework = "jax"'), ["{file}:WORKLOAD"], "framework 'jax'; choose one of: tensorflow, keras, torch"),
    ("raise RuntimeError('no GPU here')\n", ["{file}:WORKLOAD"], "importing it failed: RuntimeError: no GPU here"),
    (None, ["no_such_package.workload:WORKLOAD"], "cannot import no_such_package.workload"),
])
def test_code_that_cannot_be_a_workload_is_one_line_and_nothing_starts(fresh, code_text, words, says):
    file = fresh / "bad.py"
    if code_text is not None:
        file.write_text(code_text)
    code, out = _cli("run", *[w.format(file=file) for w in words], "--provider", "local")
    lines = [line for line in out.splitlines() if line.strip()]
    assert code != 0 and says in out and len(lines) == 1 and "Traceback" not in out, out
    assert not list((fresh / "home").glob("clusters/*.json")), "a refused workload started a cluster"


@pytest.mark.slow
def test_a_keras_model_of_its_own_package_trains_on_two_workers_stops_at_a_checkpoint_and_resumes_from_it(tmp_path):
    """The example's Keras classifier (``model.fit`` under MultiWorkerMirroredStrategy), named by its
    file: two Ray Train workers (separate processes) train it; the owner's cancel, read by rank 0
    and broadcast, stops both at the same epoch with a checkpoint; `--resume` goes on from that
    checkpoint on the same cluster, and every epoch is trained once."""
    from burst.runtime import storage
    from burst.runtime.job import CANCEL_REQUEST, RunFiles

    home, spec = tmp_path / "home", f"{KERAS}:WORKLOAD"
    burst("up", "--provider", "local", "--name", "kc", "--cpus", "2", home=home, cwd=tmp_path, check=True)
    try:
        words = ["--cluster", "kc", "--workers", "2", "--epochs", "12", "--synthetic", "2000", "--val-events", "300"]
        started = burst("train", spec, *words, "--detach", home=home, cwd=tmp_path, check=True)
        run_id = next(w for w in started.stderr.split() + started.stdout.split() if w.startswith("keras-classifier-"))
        cluster = json.loads((home / "clusters" / "kc.json").read_text())

        def run_now() -> dict:  # as `burst status` sees it (its look reads the job's events)
            looked = json.loads(burst("status", "--json", home=home, cwd=tmp_path, check=True).stdout)
            return next(r for r in looked["runs"] if r["run_id"] == run_id)

        wait_until(lambda: ((run_now().get("progress") or {}).get("epoch") or 0) >= 2, 240, "two epochs of the first attempt")
        storage.write_text(RunFiles(cluster["storage_uri"], run_id).stop_request, CANCEL_REQUEST + "\n")  # what the web view's Cancel writes
        wait_until(lambda: run_now()["state"] == "STOPPED", 240, "the run to stop")
        resumed = burst("train", spec, *words, "--resume", run_id, home=home, cwd=tmp_path, timeout=600, check=True)
        said = resumed.stderr + resumed.stdout
        assert "resuming run" in said, said
        trained_again = [int(line.split("epoch ", 1)[1].split("/", 1)[0]) for line in said.splitlines() if line.startswith("epoch ")]
        assert trained_again and trained_again[0] >= 3 and trained_again[-1] == 12, said  # on from the stop's checkpoint, not epoch 1
        final = record(home, run_id)
        assert final["state"] == "SUCCEEDED", final
        history = [h["epoch"] for h in json.loads((Path(final["run_dir"]) / "history.json").read_text())]
        assert history == list(range(1, 13))  # each epoch once
        metrics = json.loads((Path(final["run_dir"]) / "report" / "metrics.json").read_text())
        assert metrics["workload"] == "keras-classifier" and metrics["summary"]["test_error_rate"] < 0.1
        assert (Path(final["run_dir"]) / "report" / "report.html").is_file()
    finally:
        burst("down", "kc", home=home, cwd=tmp_path)


@pytest.mark.slow
def test_a_pytorch_model_trains_under_ddp_on_two_workers_with_the_same_weights_on_each(tmp_path):
    """The example's PyTorch regressor, named by its file: Ray Train's process group (gloo on these
    CPUs) joins two worker processes, DDP averages their gradients, and every epoch the workers'
    weights are the same to the last bit (``weight_spread``, all-reduced max minus min)."""
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'burst[torch]'): the PyTorch workload tests skip")
    home = tmp_path / "home"
    spec = f"{ROOT / 'examples' / 'torch-regressor' / 'src' / 'torch_regressor' / 'workload.py'}:WORKLOAD"
    done = burst("run", spec, "--provider", "local", "--name", "tr", "--workers", "2", "--epochs", "4", "--synthetic", "3000",
                 "--val-events", "500", home=home, cwd=tmp_path, timeout=600, check=True)
    run_dir = next((tmp_path / "burst-runs").glob("torch-regressor-*"))
    history = json.loads((run_dir / "history.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2, 3, 4] and all(h["weight_spread"] == 0.0 for h in history), history
    assert history[-1]["loss"] < history[0]["loss"]
    assert json.loads((run_dir / "report" / "metrics.json").read_text())["summary"]["test_mse"] < 0.5
    assert "weight_spread 0" in done.stdout + done.stderr


@pytest.mark.slow
def test_a_workload_burst_has_never_seen_is_profiled_here_and_planned_on_gpus_from_it(tmp_path):
    """`burst profile` of the PyTorch example (it ships no profile): its samples/s at each batch on
    this machine, its FLOPs as PyTorch counts them, its parameters and sizes, written where the
    plan reads them; the plan then estimates this machine as measured and every GPU as derived,
    saying so, where before it offered this machine only, at a placeholder speed."""
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'burst[torch]'): the PyTorch workload tests skip")
    home = tmp_path / "home"
    spec = f"{ROOT / 'examples' / 'torch-regressor' / 'src' / 'torch_regressor' / 'workload.py'}:WORKLOAD"
    before = json.loads(burst("plan", spec, "--provider", "gcp", "--json", home=home, cwd=tmp_path).stdout)
    assert before["choice"] is None and "no speed" in json.dumps(before), before  # nothing to estimate a GPU from
    said = burst("profile", spec, "--batches", "16,128", "--events", "1024", home=home, cwd=tmp_path, timeout=600, check=True)
    assert "batch    16:" in said.stdout and "batch   128:" in said.stdout and "derived for one GPU:" in said.stdout, said.stdout
    written = home / "profiles" / "torch-regressor.measured.yaml"
    assert f"profile written to {written}" in " ".join(said.stdout.split())
    measured = json.loads(burst("profile", spec, "--batches", "16,128", "--events", "1024", "--json", "--out", str(tmp_path / "again.yaml"),
                                home=home, cwd=tmp_path, timeout=600, check=True).stdout)["measured"]
    # the small preset's MLP (8 -> 64 -> 64 -> 1): 2 x 4,672 multiply-adds forward, 17,664 FLOPs backward (no gradient
    # for the input), as PyTorch's FlopCounterMode counts them; its trainable parameters, by the modules that ran
    assert measured["flops_per_event"] == 27008 and measured["parameters"] == 8 * 64 + 64 + 64 * 64 + 64 + 64 + 1
    assert [r["batch"] for r in measured["batches"]] == [16, 128] and all(r["samples_reported"] for r in measured["batches"])
    assert measured["checkpoint_bytes"] > 4801 * 4 and measured["data_bytes"] > 1024 * 9 * 4 and measured["matmul_gflops"] > 0
    plan = json.loads(burst("plan", spec, "--provider", "gcp", "--accelerator", "V100", "--json", home=home, cwd=tmp_path, check=True).stdout)
    assert plan["choice"]["accelerator"] == "V100" and plan["choice"]["feasible"] and plan["choice"]["est_cost_usd"] > 0
    assert any("V100 speed is derived, not measured (derived by `burst profile`" in r and "± a factor of 3" in r for r in plan["choice"]["reasons"])
    local = json.loads(burst("plan", spec, "--provider", "local", "--json", home=home, cwd=tmp_path, check=True).stdout)["choice"]
    assert any("measured by `burst profile`" in r for r in local["reasons"]), local["reasons"]
