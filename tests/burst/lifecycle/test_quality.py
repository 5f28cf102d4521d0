"""Quality gate files: what a user writes, and the one-line errors for what is wrong in them."""

import subprocess
import sys

import pytest

from burst.lifecycle import quality
from burst.errors import BurstError


def test_a_gate_bounds_the_metrics_it_names():
    gate = quality.parse("# what this group accepts\noptimisation_metric: 30\nsf_rel_error: 0.05\nclassifier_auc: 1\n", "g.yaml", "gan3d")
    assert gate == {"optimisation_metric": 30.0, "sf_rel_error": 0.05, "classifier_auc": 1.0}


@pytest.mark.parametrize("text, fragment", [
    ("optimisation_metric: 30\nsf_error: 0.1\n", "g.yaml:2: unknown metric 'sf_error'; a gate of gan3d can bound: sf_rel_error,"),
    ("fpd: -1\n", "g.yaml:1: fpd: Input should be greater than or equal to 0"),
    ("fpd: .inf\n", "g.yaml:1: fpd: Input should be a finite number"),
    ("fpd: small\n", "g.yaml:1: fpd: Input should be a valid number"),
    ("fpd: true\n", "g.yaml:1: fpd: Input should be a valid number"),
    ("", "g.yaml:1: a quality gate maps metrics to their largest accepted value"),
    ("- fpd\n", "g.yaml:1: a quality gate maps metrics to their largest accepted value"),
    ("fpd: [1\n", "g.yaml:2: not valid YAML"),
])
def test_a_bad_gate_is_one_line_naming_file_line_and_metric(text, fragment):
    with pytest.raises(BurstError) as exc:
        quality.parse(text, "g.yaml", "gan3d")
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_every_gateable_metric_is_described():
    from workloads.gan3d.validate import GATE_METRICS

    assert all(text.strip() for text in GATE_METRICS.values())
    assert quality._model("gan3d").model_json_schema()["additionalProperties"] is False


@pytest.mark.parametrize("command", [["train", "gan3d"], ["run", "gan3d", "--provider", "local"]])
def test_cli_rejects_a_bad_gate_before_touching_a_cluster(tmp_path, command):
    gate = tmp_path / "gate.yaml"
    gate.write_text("optimisation_metrc: 30\n")
    proc = subprocess.run([sys.executable, "-m", "burst.cli", *command, "--gate", str(gate)], capture_output=True, text=True,
                          env={**__import__("os").environ, "BURST_HOME": str(tmp_path / "home")}, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    from workloads.gan3d.validate import GATE_METRICS

    assert proc.stderr.strip().splitlines() == [f"error: {gate}:1: unknown metric 'optimisation_metrc'; a gate of gan3d can bound: "
                                                + ", ".join(GATE_METRICS)]
    assert not (tmp_path / "home" / "clusters").exists() or not list((tmp_path / "home" / "clusters").iterdir())


def test_the_shipped_example_gate_is_valid():
    from pathlib import Path

    gate = quality.load(Path(__file__).resolve().parents[3] / "workloads" / "gan3d" / "gate.yaml", "gan3d")
    assert gate["optimisation_metric"] > 0 and set(gate) <= {"optimisation_metric", "sf_rel_error", "hits_rel_error", "energy_scale_offset"}
