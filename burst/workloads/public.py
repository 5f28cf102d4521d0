"""A workload of the public interface (``burst.workload.Workload``) as the rest of burst asks for
one: names, presets and metrics for the submitting side, data and validation for the job. Its
training runs through ``burst.runtime.public_loop`` (the loop, checkpoints and stops burst keeps),
never through the internal trainer protocol of burst's own workloads (``base``)."""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import BurstError
from .. import workload as public
from .base import Workload as Internal



def measured_profile_path(name: str) -> Path:
    """Where `burst profile` writes a workload's measured profile (in this machine's burst home),
    and where a workload naming no profile of its own has it read."""
    from ..home import state

    return state.home() / "profiles" / f"{name}.measured.yaml"


PLACEHOLDER_EVENTS_PER_S = 1000.0  # this machine's speed for a workload that has no profile: said to be no measurement
NAME_RULE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")  # a workload's name: in run ids, file names and URLs


def adapt(obj: Any, source: str) -> Internal:
    """``obj`` as burst asks for a workload: an internal one as it is, a public one (an instance or
    its class) wrapped; anything else refused in one line naming ``source``."""
    if isinstance(obj, Internal):
        return obj
    if isinstance(obj, type) and issubclass(obj, public.Workload):
        try:
            obj = obj()
        except TypeError as exc:
            raise BurstError(f"{source}: {obj.__name__}() needs arguments ({exc}); export an instance instead") from None
    if not isinstance(obj, public.Workload):
        raise BurstError(f"{source} is a {type(obj).__name__}, not a workload: subclass burst.workload.Workload and export an instance")
    return PublicWorkload(obj, source)


class PublicWorkload(Internal):
    """One public workload, checked once: its name, version, framework, presets and metrics."""

    checkpoint_prefix = ""
    is_public = True
    spec: str | None = None  # the code it was named by (module:OBJECT, /abs/file.py:OBJECT); None: an installed entry point

    def __init__(self, user: public.Workload, source: str):
        self.user = user
        self.source = source
        self.name = user.name
        if not isinstance(self.name, str) or not NAME_RULE.fullmatch(self.name):
            raise BurstError(f"{source}: its name {self.name!r} is not a workload name (a letter, then letters, digits, '-' or '_')")
        if user.api_version != public.API_VERSION:
            raise BurstError(f"{source} was written for burst's workload interface {user.api_version}; this burst speaks "
                             f"{public.API_VERSION}: upgrade burst, or the workload")
        if user.framework not in public.FRAMEWORKS:
            raise BurstError(f"{source}: framework {user.framework!r}; choose one of: {', '.join(public.FRAMEWORKS)}")
        if not user.presets or not user.epoch_metrics:
            raise BurstError(f"{source}: a workload needs at least one preset and one epoch metric")
        self.title = user.title or f"{self.name} ({user.framework})"
        self.presets = tuple(user.presets)
        self.profile_preset = self.presets[0]
        self.epoch_metrics = tuple(user.epoch_metrics)
        self.gate_metrics = dict(user.gate_metrics)
        self.report_metrics = tuple(user.gate_metrics) or self.epoch_metrics
        self.tunable = dict(user.knobs)
        self.framework = user.framework
        module = sys.modules.get(type(user).__module__)
        self.package_dir = Path(module.__file__).resolve().parent if module is not None and getattr(module, "__file__", None) else Path.cwd()
        self.module = type(user).__module__

    def prepare_process(self, workers: int = 1) -> None:
        """Before the framework is imported in a process that trains or judges this workload: a Keras
        workload computes with tf-keras (Keras 2) where it is installed, since Keras 3's ``fit`` fails
        under MultiWorkerMirroredStrategy (keras-team/keras#20585, ray-project/ray#47464); on several
        workers without it the run is refused in one line."""
        import importlib.util
        import os

        if self.framework != "keras":
            return
        if importlib.util.find_spec("tf_keras") is not None:
            os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is then tf-keras
        elif workers > 1:
            raise RuntimeError(f"workload {self.name} trains with Keras' fit on {workers} workers, which needs tf-keras on the cluster "
                               "(pip install tf-keras): Keras 3's fit fails under MultiWorkerMirroredStrategy")

    @property
    def profile_path(self) -> Path:
        """The workload's ``profile.yaml``; without one, the profile `burst profile` measured on this
        machine (``profiles/NAME.measured.yaml`` in burst's home); without that, a profile of this
        machine alone (no speed anywhere else, so the plan offers nothing else), its throughput a
        placeholder it says it is."""
        if self.user.profile is not None:
            path = Path(self.user.profile)
            return path if path.is_absolute() else self.package_dir / path
        import yaml

        from ..home import state
        from ..home.records import write_text_atomic

        measured = measured_profile_path(self.name)
        if measured.is_file():
            return measured
        generated = state.home() / "profiles" / f"{self.name}.yaml"
        text = yaml.safe_dump({
            "workload": self.name, "preset": self.presets[0], "events": int(self.user.events), "dataset_gb": 0.0, "checkpoint_gb": 0.0,
            "epochs": 10, "checkpoint_every_epochs": 1,
            "scaling": {"form": "no measurement: the workload has no profile.yaml", "tables": []}, "accelerators": {},
            "local_default": {"events_per_s": PLACEHOLDER_EVENTS_PER_S,
                              "basis": f"a placeholder, not a measurement: {self.name} has no profile.yaml (docs/guide/your-workload.md)"}},
            sort_keys=False)
        if not generated.is_file() or generated.read_text() != text:
            write_text_atomic(generated, text)
        return generated

    @property
    def example_space(self) -> Path:
        return self.package_dir / "tune-small.yaml"

    def default_batch(self, preset: str) -> int:
        return int(self.user.default_batch)

    def check_knob(self, preset: str, knob: str, value: Any) -> None:
        if knob not in self.tunable:
            raise ValueError(f"workload {self.name} has no knob {knob!r}")

    def synthetic_command(self, out: Path, events: int) -> list[str]:
        code = ("import sys; from burst import workloads; "
                "workloads.get(sys.argv[1]).prepare_synthetic(__import__('pathlib').Path(sys.argv[2]), int(sys.argv[3]))")
        return [sys.executable, "-c", code, self.spec or self.name, str(out), str(events)]

    def epoch_line(self, metrics: dict) -> str:
        shown = ", ".join(f"{k} {metrics[k]:.4g}" for k in self.epoch_metrics if isinstance(metrics.get(k), (int, float)))
        rate = metrics.get("samples_per_s")
        return shown + (f", {rate} samples/s" if rate else "")

    def validation_line(self, summary: dict) -> str:
        shown = [f"{k} {v:.4g}" for k, v in summary.items() if isinstance(v, (int, float))]
        return ", ".join(shown) if shown else "the workload judges nothing after training"

    # ------------------------------------------------------------------ on the cluster

    def prepare_synthetic(self, root: Path, events: int, seed: int = 0) -> tuple[Path, Path]:
        try:
            train, test = self.user.make_data(Path(root), int(events), int(seed))
        except NotImplementedError as exc:
            raise ValueError(str(exc)) from None
        return Path(train), Path(test)

    def list_files(self, path: Path) -> list[Path]:
        files = self.user.list_files(Path(path))
        if not files:
            from workloads.common.hdf5 import DataError

            raise DataError(f"{path}: no data files of workload {self.name}")
        return [Path(f) for f in files]

    def check_file(self, path: Path) -> int:
        try:
            return int(self.user.check_file(Path(path)))
        except ValueError as exc:
            from workloads.common.hdf5 import DataError

            raise DataError(f"{path}: {exc}") from None

    def prepare_training(self, *args, **kwargs):
        raise TypeError(f"workload {self.name} trains through burst.runtime.public_loop, not the internal trainer protocol")

    def held_out(self, files, trainer, events, seed=0):
        raise TypeError(f"workload {self.name}'s epoch metrics come from its own train(ctx)")

    def validate(self, checkpoint: Path, test_files: list[Path], out_dir: Path, *, events: int, seed: int = 0,
                 gate: dict[str, float] | None = None, extra: dict | None = None) -> dict:
        """The workload's own judgement of the final checkpoint, as burst's reports hold one:
        ``metrics.json`` and ``report.html`` in ``out_dir``, the gate's verdict."""
        from workloads.common.gate import gate_verdict

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.prepare_process()
        summary = {k: float(v) for k, v in (self.user.validate(Path(checkpoint), [Path(f) for f in test_files], out_dir,
                                                               events=events, seed=seed) or {}).items()}
        judged = {**{k: float("inf") for k in gate or {}}, **summary}  # a gated metric the workload did not report fails the gate
        verdict = gate_verdict(judged, gate, f"judged by {self.name}'s own validation")
        metrics = {"workload": self.name, "summary": summary, "verdict": verdict, **(extra or {})}
        (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=1))
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.6g}</td></tr>" for k, v in summary.items())
        plots = "".join(f'<p><img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}"></p>' for p in sorted(out_dir.glob("*.png")))
        (out_dir / "report.html").write_text(
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.name)}</title></head><body>"
            f"<h1>{html.escape(self.title)}</h1><p>{html.escape(verdict.get('line') or '')}</p>"
            f"<table><tr><th>metric</th><th>value</th></tr>{rows}</table>{plots}</body></html>\n")
        return metrics
