"""burst's public workload interface, version 1: how a group trains its own model with burst.

A workload is a subclass of ``Workload`` in the group's own package (or a file), found by burst
through an entry point (group ``burst.workloads``: ``mine = "my_pkg.workload:WORKLOAD"``) or named
on the command line (``burst run my_pkg.workload:WORKLOAD``, ``burst run path/to/file.py:WORKLOAD``).
burst plans it, starts its cluster, runs ``train`` on every Ray Train worker, keeps the checkpoint
each epoch ends with, resumes it on another cluster after a loss, stops it for a budget or a
cancel after a checkpoint, and reports its metrics; the workload only trains.

What a worker is handed is a ``TrainContext``: the run's settings, the checkpoint to go on from
(every worker is handed the same one), and ``epochs()`` / ``end_epoch()``, the loop burst keeps::

    class Classifier(Workload):
        name = "classifier"
        framework = "keras"

        def train(self, ctx):
            model = build()
            if ctx.checkpoint is not None:
                model.load_weights(ctx.checkpoint / "model.weights.h5")
            for epoch in ctx.epochs():          # ends early when burst stops the run
                loss = model.fit(x, y, epochs=1, verbose=0).history["loss"][-1]
                ctx.end_epoch({"loss": loss}, save=lambda d: model.save_weights(d / "model.weights.h5"))

    WORKLOAD = Classifier()

The interface is versioned (``API_VERSION``): a workload says which version it was written for
(``api_version``), and a burst that does not speak it refuses it in one line. Nothing here imports
TensorFlow or PyTorch: a workload imports its framework inside ``train``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Protocol

API_VERSION = 1
FRAMEWORKS = ("tensorflow", "keras", "torch")  # how burst starts the workers: TF_CONFIG (tensorflow, keras) or a torch process group

__all__ = ["API_VERSION", "FRAMEWORKS", "TrainContext", "Workload"]


class TrainContext(Protocol):
    """What one worker of a run is handed (burst makes it; a workload only reads and calls it)."""

    #: this worker's place among the run's workers (Ray Train's world rank and size)
    rank: int
    world_size: int
    #: the run's settings, as `burst run` was given them (None: the workload's own default)
    preset: str
    total_epochs: int
    batch_per_replica: int
    seed: int
    steps_per_epoch: Optional[int]
    precision: Optional[str]
    #: knob -> value, a scan's trial or `--preset` aside (the workload's ``knobs``)
    knobs: dict[str, Any]
    #: the training files on this worker's disk (``list_files`` of the run's data; [] when the workload makes its own)
    train_files: list[Path]
    #: the checkpoint directory to go on from (what ``save`` wrote), the same on every worker; None: start afresh
    checkpoint: Optional[Path]
    #: whole epochs that checkpoint holds (0 without one)
    start_epoch: int

    def epochs(self) -> Iterator[int]:
        """The epochs left to train (from ``start_epoch``), each a number from 0; it ends early, the
        same on every worker, when the run is asked to stop (a budget, a cancel, a lease's end)."""

    def end_epoch(self, metrics: dict[str, float], save: Callable[[Path], None]) -> None:
        """The epoch is done: ``metrics`` (name -> number; the workload's ``epoch_metrics`` among them)
        are reported and ``save(directory)`` writes the checkpoint burst keeps. Every worker calls it
        once per epoch (it is a barrier); each saves into its own directory, rank 0's is kept."""

    def should_stop(self) -> bool:
        """Inside an epoch: whether to stop now, the same answer on every worker (a collective: every
        worker asks at the same step). ``epochs()`` asks between epochs by itself."""

    def strategy(self) -> Any:
        """TensorFlow workloads: the ``tf.distribute`` strategy to build the model under (the workers'
        MultiWorkerMirroredStrategy, or the default one on a single worker)."""


class Workload:
    """A group's own workload. Set ``name`` and implement ``train``; the rest is optional."""

    #: the interface version the workload was written for
    api_version: int = API_VERSION
    #: the name users type (`burst run NAME`): letters, digits, '-' and '_'
    name: str = ""
    #: one line for `burst workloads`
    title: str = ""
    #: tensorflow | keras | torch (``FRAMEWORKS``)
    framework: str = "tensorflow"
    #: model presets, the first the default (`--preset`)
    presets: tuple[str, ...] = ("default",)
    #: the batch per replica when `--batch-per-replica` is not given
    default_batch: int = 32
    #: metrics every epoch reports (lower is better; the first is what a scan minimises)
    epoch_metrics: tuple[str, ...] = ("loss",)
    #: knobs a scan may set, with what each changes (they reach ``TrainContext.knobs``)
    knobs: dict[str, str] = {}
    #: summary metrics of ``validate`` a quality gate may bound (lower is better), with what each says
    gate_metrics: dict[str, str] = {}
    #: the placement profile (``profile.yaml``: events, sizes, speeds per accelerator) beside the code;
    #: None: `burst plan` has no speeds for it and offers this machine only, its time a placeholder
    profile: Optional[Path] = None
    #: the events one epoch of its usual data holds (what a plan without a profile assumes)
    events: int = 10_000
    #: pip requirements the cluster's nodes need beyond burst's own; installed by the job's runtime
    #: environment on pods (Kubernetes, the clouds); this machine and a site's nodes use their own installation
    requirements: tuple[str, ...] = ()

    def train(self, ctx: TrainContext) -> None:
        """Train on one worker: build (or restore from ``ctx.checkpoint``) and loop over ``ctx.epochs()``."""
        raise NotImplementedError(f"workload {self.name or type(self).__name__} has no train(ctx)")

    # ------------------------------------------------------------------ data (optional)

    def make_data(self, root: Path, events: int, seed: int) -> tuple[Path, Path]:
        """Write ``events`` training events and a held-out set under ``root`` (`--synthetic N`, and
        a run given no `--data`); return the two directories. None of it may be downloaded."""
        raise NotImplementedError(f"workload {self.name} makes no data of its own: give --data DIR")

    def list_files(self, path: Path) -> list[Path]:
        """The workload's data files in a directory (sorted), or the one file given."""
        path = Path(path)
        if path.is_file():
            return [path]
        return sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))

    def check_file(self, path: Path) -> int:
        """Check one data file cheaply; its event count (0: unknown). Raise ValueError saying what is wrong."""
        return 0

    # ------------------------------------------------------------------ after training (optional)

    def validate(self, checkpoint: Path, test_files: list[Path], out_dir: Path, *, events: int, seed: int) -> dict[str, float]:
        """The final checkpoint judged on held-out data: summary metric -> value (``gate_metrics``
        among them). ``out_dir`` may receive plots; burst writes the report around them."""
        return {}
