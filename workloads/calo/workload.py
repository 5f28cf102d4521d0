"""The calo workload as burst sees it: the ``Workload`` the registry hands to the planner, the scans
and the job. Light to import; the methods that train or validate import TensorFlow when called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from burst.workloads.base import Workload

from . import metrics
from . import presets as preset_data


class Calo(Workload):
    name = "calo"
    title = "CaloChallenge dataset-2 style: a conditional diffusion model of electron showers (45x16x9 cells)"
    presets = ("small", "wide")
    profile_preset = "small"
    checkpoint_prefix = "calo"
    epoch_metrics = metrics.EPOCH_METRICS
    gate_metrics = metrics.GATE_METRICS
    report_metrics = metrics.VERDICT_METRICS
    tunable = preset_data.TUNABLE
    whole_number_knobs = preset_data.WHOLE_NUMBERS
    package_dir = Path(__file__).resolve().parent
    module = "workloads.calo"

    def default_batch(self, preset: str) -> int:
        return preset_data.get_preset(preset).default_batch

    def check_knob(self, preset: str, knob: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{knob} is a number, got {value!r}")
        if knob in preset_data.WHOLE_NUMBERS and not isinstance(value, int):
            raise ValueError(f"{knob} is a whole number, got {value!r}")
        preset_data.tuned(preset_data.get_preset(preset), {knob: value})

    def bench_command(self, batch: int, steps: int, repeats: int, precision: str = "float32") -> list[str]:
        import json
        import sys

        return [sys.executable, "-m", "workloads.calo.bench", "--throughput",
                json.dumps({"preset": self.profile_preset, "batch": batch, "steps": steps, "repeats": repeats,
                            "precision": precision})]

    def epoch_line(self, m: dict) -> str:
        return f"{m.get('samples_per_s')} samples/s, denoising loss {m.get('loss', float('nan')):.4f}"

    def validation_line(self, s: dict) -> str:
        return (f"E_dep/E_inc MC {s.get('etot_ratio_mc', 0):.4f} vs model {s.get('etot_ratio_model', 0):.4f}, "
                f"separation power mean {s.get('sep_power_mean', float('nan')):.3g}, classifier AUC {s.get('classifier_auc', float('nan')):.3f}")

    # ----------------------------------------------------------------- on the cluster

    def prepare_synthetic(self, root: Path, events: int, seed: int = 0) -> tuple[Path, Path]:
        from . import pipeline

        return pipeline.prepare_synthetic(root, events, seed=seed)

    def list_files(self, path: Path) -> list[Path]:
        from . import data

        return data.list_files(path)

    def check_file(self, path: Path) -> int:
        from . import data

        return data.check_file(Path(path))

    def prepare_training(self, train_files, preset, per_replica_batch=None, strategy=None, seed=0, resume_from=None,
                         steps_per_epoch=None, overrides=None, precision="float32", pod_hosts=None):
        from . import pipeline

        if pod_hosts and pod_hosts > 1:
            raise ValueError("calo has no input a TPU pod slice's hosts can read; train it on one host")

        return pipeline.prepare_training(train_files, preset, per_replica_batch, strategy=strategy, seed=seed,
                                         resume_from=resume_from, steps_per_epoch=steps_per_epoch, overrides=overrides,
                                         precision=precision)

    def held_out(self, files, trainer, events, seed=0):
        from . import pipeline

        return pipeline.HeldOut(files, events, seed)

    def validate(self, checkpoint, test_files, out_dir, *, events, seed=0, gate=None, extra=None) -> dict:
        from . import pipeline

        return pipeline.validate(checkpoint, test_files, out_dir, events=events, seed=seed, gate=gate, extra=extra)


WORKLOAD = Calo()
