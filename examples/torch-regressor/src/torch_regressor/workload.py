"""The regressor as a burst workload: burst's public interface only (``burst.workload``).

Data: ``y = sin(3 x0) + x1 x2 - 0.5 x3^2`` with noise, on ``FEATURES`` inputs, made by ``make_data``
from the seed (nothing downloaded), one ``.npz`` file per 1000 points. Model: a small MLP under
``DistributedDataParallel`` on several workers (the process group Ray Train sets up: gloo on CPUs,
NCCL on GPUs). Every epoch also reports ``weight_spread``, the largest difference of any weight
between the workers: DDP keeps it at 0."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from burst.workload import TrainContext, Workload

FEATURES = 8
PER_FILE = 1000
WEIGHTS = "model.pt"
SETTINGS = "settings.json"


def _points(events: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(events, FEATURES)).astype("float32")
    y = np.sin(3 * x[:, 0]) + x[:, 1] * x[:, 2] - 0.5 * x[:, 3] ** 2 + rng.normal(0, 0.05, size=events)
    return x, y.astype("float32")[:, None]


def _read(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    parts = [np.load(f) for f in files]
    return np.concatenate([p["x"] for p in parts]), np.concatenate([p["y"] for p in parts])


def _model(preset: str, knobs: dict):
    import torch

    width = int(knobs.get("width", {"small": 64, "wide": 256}[preset]))
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 1))


def _weight_spread(model, world_size: int) -> float:
    """The largest difference of one weight between the workers (0 on one worker)."""
    import torch
    import torch.distributed as dist

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    if world_size == 1:
        return 0.0
    high, low = flat.clone(), flat.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    return float((high - low).max())


class Regressor(Workload):
    name = "torch-regressor"
    title = "smooth-function regressor (PyTorch, DDP)"
    framework = "torch"
    presets = ("small", "wide")
    default_batch = 64
    epoch_metrics = ("loss", "weight_spread")
    knobs = {"learning_rate": "Adam's step size", "width": "units of each hidden layer"}
    gate_metrics = {"test_mse": "mean squared error on held-out points"}
    requirements = ("torch>=2.4",)

    def make_data(self, root: Path, events: int, seed: int) -> tuple[Path, Path]:
        out = []
        for part, count, offset in (("train", events, 0), ("test", max(PER_FILE, events // 10), 1_000_003)):
            directory = Path(root) / part
            directory.mkdir(parents=True, exist_ok=True)
            x, y = _points(count, seed + offset)
            for i, start in enumerate(range(0, count, PER_FILE)):
                np.savez(directory / f"points-{i:04d}.npz", x=x[start:start + PER_FILE], y=y[start:start + PER_FILE])
            out.append(directory)
        return out[0], out[1]

    def list_files(self, path: Path) -> list[Path]:
        path = Path(path)
        return [path] if path.is_file() else sorted(path.glob("*.npz"))

    def check_file(self, path: Path) -> int:
        with np.load(path) as data:
            if "x" not in data or "y" not in data or data["x"].shape[1:] != (FEATURES,):
                raise ValueError(f"not a points file: needs x of shape (N, {FEATURES}) and y")
            return int(data["y"].shape[0])

    def train(self, ctx: TrainContext) -> None:
        import torch

        torch.manual_seed(ctx.seed)  # the same first weights on every worker (DDP also broadcasts rank 0's)
        x, y = _read(ctx.train_files)
        x, y = torch.from_numpy(x[ctx.rank::ctx.world_size]), torch.from_numpy(y[ctx.rank::ctx.world_size])
        model = _model(ctx.preset, ctx.knobs)
        optimizer = torch.optim.Adam(model.parameters(), lr=float(ctx.knobs.get("learning_rate", 3e-3)))
        if ctx.checkpoint is not None:
            saved = torch.load(ctx.checkpoint / WEIGHTS)
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
        trained = torch.nn.parallel.DistributedDataParallel(model) if ctx.world_size > 1 else model
        generator = torch.Generator().manual_seed(ctx.seed + ctx.rank)

        def save(directory: Path) -> None:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, directory / WEIGHTS)
            (directory / SETTINGS).write_text(json.dumps({"preset": ctx.preset, "knobs": ctx.knobs}))

        for epoch in ctx.epochs():
            order = torch.randperm(len(y), generator=generator)
            total = 0.0
            steps = range(0, len(y) - ctx.batch_per_replica + 1, ctx.batch_per_replica)  # whole batches: every worker the same steps
            for start in steps:
                batch = order[start:start + ctx.batch_per_replica]
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(trained(x[batch]), y[batch])
                loss.backward()  # DDP averages the gradients over the workers here
                optimizer.step()
                total += float(loss)
            ctx.end_epoch({"loss": total / max(1, len(steps)), "weight_spread": _weight_spread(model, ctx.world_size),
                           "samples": len(steps) * ctx.batch_per_replica}, save=save)

    def validate(self, checkpoint: Path, test_files: list[Path], out_dir: Path, *, events: int, seed: int) -> dict[str, float]:
        import torch

        settings = json.loads((checkpoint / SETTINGS).read_text())
        model = _model(settings["preset"], settings["knobs"])
        model.load_state_dict(torch.load(checkpoint / WEIGHTS)["model"])
        x, y = _read(test_files)
        with torch.no_grad():
            predicted = model(torch.from_numpy(x[:events]))
        return {"test_mse": float(torch.nn.functional.mse_loss(predicted, torch.from_numpy(y[:events])))}


WORKLOAD = Regressor()
