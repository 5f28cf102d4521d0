"""The interface every workload implements, as Ray Train is handed a training function: burst
places, provisions, runs, follows, checkpoints, scans and reports a workload through these
attributes and methods and never imports the workload's own modules.

Two sides use it. The submitting side (CLI, planner, scans) reads only the light part: names,
presets and knobs, metric names, the placement profile, the search-space example. The job on the
cluster calls the heavy part (data, trainer, validation), which imports TensorFlow inside the
methods, so that importing a workload's object costs no more than a few data classes.

The trainer a workload returns from ``prepare_training`` is what ``workloads.common.loop.EpochLoop``
gives: ``fit(dataset_fn, epochs, steps, on_epoch_end=, on_step=, should_stop=, on_checkpoint=,
checkpoint_every=, should_checkpoint=)``, ``save(dir)``, ``restore(dir)``, ``epoch`` (a variable),
``history``, ``global_batch``, ``per_replica_batch``, ``stopped``. A checkpoint directory holds a
``history.json`` (epochs done, and the position when taken inside an epoch) and a TensorFlow
checkpoint ``<checkpoint_prefix>.index`` + ``.data-*``.
"""

from __future__ import annotations

import hashlib
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Protocol

TEST_FRACTION = 0.1  # held-out share of a directory of files with no train/test split


class HeldOut(Protocol):
    """Held-out Monte Carlo read once; what a scan's trial is judged on after every epoch."""

    def summary(self, trainer: Any) -> dict[str, float]: ...


class Workload(ABC):
    """One trainable workload: its data, presets, knobs, trainer, physics validation and profile."""

    #: the name users type (`burst run NAME`); the registry's key
    name: str
    #: one line for help texts and `burst workloads`
    title: str
    #: model presets, the first the default (`--preset`)
    presets: tuple[str, ...]
    #: the preset the placement profile's measurements are for (what `burst bench` measures)
    profile_preset: str
    #: TensorFlow checkpoint prefix inside a checkpoint directory
    checkpoint_prefix: str
    #: summary metrics cheap enough for every epoch of a scan's trial (all lower is better)
    epoch_metrics: tuple[str, ...]
    #: summary metrics a quality gate may bound, with what each says (all lower is better)
    gate_metrics: dict[str, str]
    #: summary metrics a scan's result line shows for its best trial
    report_metrics: tuple[str, ...]
    #: knobs a scan may set (beyond ``batch_per_replica``), with what each changes
    tunable: dict[str, str]
    #: knobs that take whole numbers (a scan samples them with int, choice or grid)
    whole_number_knobs: frozenset[str] = frozenset()
    #: where the package lives (its ``profile.yaml`` and example search space are there)
    package_dir: Path
    #: the Python module that runs the workload on its own (`python -m MODULE generate ...`)
    module: str

    # ----------------------------------------------------------------- submitting side (light)

    @property
    def default_preset(self) -> str:
        return self.presets[0]

    @property
    def default_metric(self) -> str:
        return self.epoch_metrics[0]

    @property
    def profile_path(self) -> Path:
        return self.package_dir / "profile.yaml"

    @property
    def example_space(self) -> Path:
        return self.package_dir / "tune-small.yaml"

    def check_preset(self, preset: str) -> str:
        """ValueError naming the presets when ``preset`` is not one of them."""
        if preset not in self.presets:
            raise ValueError(f"unknown preset {preset!r} of workload {self.name}; choose one of: {', '.join(self.presets)}")
        return preset

    @abstractmethod
    def default_batch(self, preset: str) -> int:
        """The batch per replica a run of ``preset`` uses when none is given."""

    @abstractmethod
    def check_knob(self, preset: str, knob: str, value: Any) -> None:
        """ValueError when ``preset`` cannot train with ``knob`` (one of ``tunable``) = ``value``."""

    def synthetic_command(self, out: Path, events: int) -> list[str]:
        """The command that writes ``events`` synthetic Monte Carlo events into ``out`` (for `burst pack`)."""
        return [sys.executable, "-m", self.module, "generate", "--out", str(out), "--events", str(events)]

    def bench_command(self, batch: int, steps: int, repeats: int, precision: str = "float32") -> list[str] | None:
        """The command that measures ``profile_preset``'s training throughput on this machine in
        ``precision`` and prints one JSON line with ``samples_per_s``, ``samples_per_s_median`` and
        ``gflops``; None when the workload has no benchmark."""
        return None

    def epoch_line(self, metrics: dict) -> str:
        """What a follower prints after an epoch (the job says it; the CLI prints it as it is)."""
        return f"{metrics.get('samples_per_s')} samples/s"

    @abstractmethod
    def validation_line(self, summary: dict) -> str:
        """One line for the end of a run: the headline physics of its validation summary."""

    # ----------------------------------------------------------------- on the cluster (heavy)

    @abstractmethod
    def prepare_synthetic(self, root: Path, events: int, seed: int = 0) -> tuple[Path, Path]:
        """Write (or reuse) ``events`` synthetic training events and a held-out set under ``root``;
        return the two directories."""

    @abstractmethod
    def list_files(self, path: Path) -> list[Path]:
        """The workload's data files in a directory (sorted), or the one file given; DataError if none."""

    @abstractmethod
    def check_file(self, path: Path) -> int:
        """Check one file's layout and its per-event conditions (cheap: no full read); return its
        event count, or raise an exception named ``DataError`` saying what is wrong."""

    def split_files(self, path: Path) -> tuple[list[Path], list[Path]]:
        """Training and held-out files: a ``train/`` + ``test/`` layout, else the last ~10 % of files."""
        path = Path(path)
        if (path / "train").is_dir() and (path / "test").is_dir():
            return self.list_files(path / "train"), self.list_files(path / "test")
        files = self.list_files(path)
        if len(files) == 1:
            return files, files  # no held-out file: validation reuses the training file
        n_test = max(1, round(len(files) * TEST_FRACTION))
        return files[:-n_test], files[-n_test:]

    @staticmethod
    def data_hashes(files: list[Path]) -> dict[str, str]:
        """Cheap content fingerprints (size + first/last MiB, sha256) for provenance."""
        out = {}
        for f in files:
            h = hashlib.sha256()
            size = f.stat().st_size
            h.update(str(size).encode())
            with open(f, "rb") as fh:
                h.update(fh.read(1 << 20))
                if size > 2 << 20:
                    fh.seek(-(1 << 20), 2)
                    h.update(fh.read())
            out[f.name] = h.hexdigest()[:16]
        return out

    @abstractmethod
    def prepare_training(self, train_files: list[Path], preset: str, per_replica_batch: int | None = None, strategy=None,
                         seed: int = 0, resume_from: Path | None = None, steps_per_epoch: int | None = None,
                         overrides: dict | None = None, precision: str = "float32", pod_hosts: int | None = None) -> tuple[Any, Any, int]:
        """(trainer, dataset_fn, steps per epoch): a trainer restored from ``resume_from`` when given,
        computing in ``precision`` (``workloads.common.precision``; a checkpoint of any precision
        resumes in any other). The trainer has a ``precision`` attribute. ``pod_hosts``: on a TPU pod
        slice, ``train_files`` are the shards of ``write_pod_shards`` on every host's own disk."""

    def write_pod_shards(self, train_files: list[Path], out_dir: Path, preset: str, hosts: int) -> list[Path] | None:
        """A TPU pod slice's input: the training events as TFRecord shards every host reads from its
        own disk, host ``h`` the shards ``h, h + hosts, ...``, with ``meta.json``; None where the
        workload has no such input (its runs are then not offered on a pod slice)."""
        return None

    @abstractmethod
    def held_out(self, files: list[Path], trainer: Any, events: int, seed: int = 0) -> HeldOut:
        """Held-out events for the per-epoch ``epoch_metrics`` of a scan's trial."""

    @abstractmethod
    def validate(self, checkpoint: Path, test_files: list[Path], out_dir: Path, *, events: int, seed: int = 0,
                 gate: dict[str, float] | None = None, extra: dict | None = None) -> dict:
        """Validate a checkpoint against held-out Monte Carlo: ``metrics.json`` and ``report.html``
        in ``out_dir``; return the metrics, with ``summary`` (name -> value) and ``verdict``
        (``passed``: None without a gate, ``line``)."""
