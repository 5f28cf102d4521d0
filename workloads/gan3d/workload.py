"""3DGAN as burst sees it: the ``Workload`` the registry hands to the planner, the scans and the job.

Light to import (presets and metric names are plain data); the methods that train or validate
import TensorFlow when called, on the cluster.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from burst.workloads.base import Workload

from . import metrics
from . import presets as preset_data


class GAN3D(Workload):
    name = "gan3d"
    title = "CERN's 3DGAN: a 3D convolutional GAN of electromagnetic calorimeter showers (51x51x25 cells)"
    presets = ("small", "paper")
    profile_preset = "paper"
    checkpoint_prefix = "gan3d"
    epoch_metrics = metrics.EPOCH_METRICS
    gate_metrics = metrics.GATE_METRICS
    report_metrics = metrics.VERDICT_METRICS
    tunable = preset_data.TUNABLE
    whole_number_knobs = frozenset({"noise_size", "gen_filters", "disc_filters"})
    package_dir = Path(__file__).resolve().parent
    module = "workloads.gan3d"

    def default_batch(self, preset: str) -> int:
        return preset_data.get_preset(preset).default_batch

    def check_knob(self, preset: str, knob: str, value: Any) -> None:
        if knob in ("gen_filters", "disc_filters"):
            if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                raise ValueError(f"{knob} is a list of whole numbers, one per block, got {value!r}")
        elif knob == "noise_size":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"noise_size is a whole number, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{knob} is a number, got {value!r}")
        preset_data.tuned(preset_data.get_preset(preset), {knob: value})

    def bench_command(self, batch: int, steps: int, repeats: int, precision: str = "float32") -> list[str]:
        import json

        return [sys.executable, "-m", "workloads.gan3d.bench", "--throughput",
                json.dumps({"preset": self.profile_preset, "batch": batch, "steps": steps, "repeats": repeats,
                            "precision": precision})]

    def epoch_line(self, m: dict) -> str:
        nan = float("nan")
        return (f"{m.get('samples_per_s')} samples/s, D {m.get('d_loss', nan):.3f}, G {m.get('g_loss', nan):.3f}, "
                f"ECAL-sum MAPE {m.get('g_ecal_mape', nan):.1f}%")

    def validation_line(self, s: dict) -> str:
        return (f"sampling fraction MC {s.get('sf_mc', 0):.4f} vs GAN {s.get('sf_gan', 0):.4f}, "
                f"optimisation metric {s.get('optimisation_metric', float('nan')):.3g}")

    # ----------------------------------------------------------------- on the cluster

    def prepare_synthetic(self, root: Path, events: int, seed: int = 0) -> tuple[Path, Path]:
        from . import pipeline

        return pipeline.prepare_synthetic(root, events, seed=seed)

    def list_files(self, path: Path) -> list[Path]:
        from . import data

        return data.list_files(path)

    def check_file(self, path: Path) -> int:
        from . import data

        return data.check_conditions(Path(path))

    def prepare_training(self, train_files, preset, per_replica_batch=None, strategy=None, seed=0, resume_from=None,
                         steps_per_epoch=None, overrides=None, precision="float32", pod_hosts=None):
        from . import pipeline

        return pipeline.prepare_training(train_files, preset, per_replica_batch, strategy=strategy, seed=seed,
                                         resume_from=resume_from, steps_per_epoch=steps_per_epoch, overrides=overrides,
                                         precision=precision, pod_hosts=pod_hosts)

    def write_pod_shards(self, train_files, out_dir, preset, hosts):
        from . import data
        from .presets import get_preset

        return data.write_pod_shards(train_files, out_dir, get_preset(preset), hosts)

    def held_out(self, files, trainer, events, seed=0):
        from . import pipeline

        return pipeline.HeldOut(files, trainer.preset, events, seed)

    def validate(self, checkpoint, test_files, out_dir, *, events, seed=0, gate=None, extra=None) -> dict:
        from . import pipeline

        return pipeline.validate(checkpoint, test_files, out_dir, events=events, seed=seed, gate=gate, extra=extra)


WORKLOAD = GAN3D()
