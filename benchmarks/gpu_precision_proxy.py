"""The paper preset's training step on an NVIDIA GPU in float32, TF32, bfloat16 and float16: a proxy.

    python benchmarks/gpu_precision_proxy.py [--batch 64] [--steps 20] [--json]

burst's 3DGAN trainer is TensorFlow; a GPU lent to this project for a few minutes carries PyTorch
and no TensorFlow (its CUDA wheels do not fit the transfer). So this script rebuilds the same
networks in PyTorch from the same preset data (``workloads/gan3d/presets.py``: every layer's shape,
the generator's first block on the coarse grid as ``model.UpsampledConv3D`` computes it, the
discriminator's four heads, the same losses and weights, RMSprop) and times the same step (the
generator once without gradients, the discriminator on real and on fake, the generator twice
through the discriminator), and the generator alone, in four precisions:

* ``float32``: strict float32, no tensor cores (TF32 off);
* ``tf32``: what TensorFlow's float32 is on Ampere and later (TF32 convolutions and matmuls);
* ``mixed_bfloat16``: autocast to bfloat16, TF32 elsewhere, the physics heads in float32;
* ``mixed_float16``: the same in float16, with a dynamic loss scale.

What carries over to TensorFlow is the ratio between precisions (the work per step is the same;
cuDNN runs the convolutions in both); absolute samples/s do not. Printed with the GPU's name and
the library versions. Runs on a CPU too (slowly), to check the script before a GPU session.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]


def _presets():
    """``workloads/gan3d/presets.py`` alone (plain data; no TensorFlow, no burst)."""
    spec = importlib.util.spec_from_file_location("gan3d_presets", ROOT / "workloads" / "gan3d" / "presets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


PRESETS = _presets()
LOSS_WEIGHTS = PRESETS.LOSS_WEIGHTS


def _sym_pad(pad) -> tuple[int, ...]:
    """Keras ZeroPadding3D((px, py, pz)) on (x, y, z) as F.pad's (z, z, y, y, x, x)."""
    px, py, pz = pad
    return (pz, pz, py, py, px, px)


def _phase_taps(factor: int, kernel: int) -> torch.Tensor:
    taps = (factor + kernel - 2) // factor + 1
    m = torch.zeros(factor, taps, kernel)
    for r in range(factor):
        for k in range(kernel):
            m[r, (r + k) // factor, k] = 1.0
    return m


class UpsampledConv3d(nn.Module):
    """Nearest up-sampling by ``factor`` then a valid convolution, on the coarse grid (as burst's Keras layer)."""

    def __init__(self, cin: int, filters: int, kernel, factor):
        super().__init__()
        self.kernel_size, self.factor, self.filters = tuple(kernel), tuple(factor), filters
        self.weight = nn.Parameter(torch.empty(filters, cin, *kernel))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.bias = nn.Parameter(torch.zeros(filters))
        for i, (f, k) in enumerate(zip(self.factor, self.kernel_size)):
            self.register_buffer(f"taps{i}", _phase_taps(f, k))

    def forward(self, x):
        mx, my, mz = (getattr(self, f"taps{i}").to(x.dtype) for i in range(3))
        w = self.weight.to(x.dtype)
        # phase kernels (rx, ry, rz, out, in, tx, ty, tz)
        phase = torch.einsum("atk,bul,cvm,oiklm->abcoituv", mx, my, mz, w)
        fx, fy, fz = self.factor
        tx, ty, tz = mx.shape[1], my.shape[1], mz.shape[1]
        cin = w.shape[1]
        coarse_kernel = phase.reshape(fx * fy * fz * self.filters, cin, tx, ty, tz)
        padded = F.pad(x, (0, tz - 1, 0, ty - 1, 0, tx - 1))
        coarse = F.conv3d(padded, coarse_kernel)
        b, _, nx, ny, nz = x.shape
        fine = coarse.reshape(b, fx, fy, fz, self.filters, nx, ny, nz)
        fine = fine.permute(0, 4, 5, 1, 6, 2, 7, 3).reshape(b, self.filters, nx * fx, ny * fy, nz * fz)
        ox, oy, oz = (n * f - k + 1 for n, f, k in zip((nx, ny, nz), self.factor, self.kernel_size))
        return fine[:, :, :ox, :oy, :oz] + self.bias.to(x.dtype)[None, :, None, None, None]


class Generator(nn.Module):
    def __init__(self, preset):
        super().__init__()
        self.preset = preset
        self.dense = nn.Linear(preset.latent_size, math.prod(preset.dense_shape))
        layers: list[nn.Module] = []
        cin = preset.dense_shape[3]
        self.coarse_first = not any(preset.gen_blocks[0].pad)
        for i, block in enumerate(preset.gen_blocks):
            if any(block.pad):
                layers.append(nn.ZeroPad3d(_sym_pad(block.pad)))
            if i == 0 and self.coarse_first:
                layers.append(UpsampledConv3d(cin, block.filters, block.kernel, preset.upsample))
            else:
                layers.append(nn.Conv3d(cin, block.filters, block.kernel))
            layers.append(nn.ReLU())
            if block.batchnorm:
                layers.append(nn.BatchNorm3d(block.filters, eps=1e-6, momentum=1 - preset.bn_momentum))
            cin = block.filters
        self.body = nn.Sequential(*layers)
        self.out = nn.Conv3d(cin, 1, preset.final_kernel)

    def forward(self, z):
        x, y, zz, ch = self.preset.dense_shape
        h = self.dense(z).reshape(-1, x, y, zz, ch).permute(0, 4, 1, 2, 3)
        if not self.coarse_first:
            h = F.interpolate(h, scale_factor=self.preset.upsample, mode="nearest")
        h = self.body(h)
        with torch.autocast(h.device.type, enabled=False):  # the image, as burst's float32 island
            return F.relu(self.out(h.float()))


def ecal_sum(image, power):
    return torch.relu(image).pow(1.0 / power).sum(dim=(1, 2, 3, 4))


def ecal_angle(image, power):
    """The measured-angle head (``model.ecal_angle``), on (B, 1, x, y, z)."""
    e = torch.relu(image[:, 0]).pow(1.0 / power)
    nx, ny, nz = e.shape[1:]
    xi, yi, zi = (torch.arange(n, device=e.device, dtype=e.dtype) + 0.5 for n in (nx, ny, nz))
    total = e.sum(dim=(1, 2, 3))
    safe = torch.where(total == 0, torch.ones_like(total), total)
    x_ref = (e.sum(dim=(2, 3)) @ xi) / safe
    y_ref = (e.sum(dim=(1, 3)) @ yi) / safe
    layer = e.sum(dim=(1, 2))
    z_ref = (layer @ zi) / safe
    filled = layer > 0
    safe_layer = torch.where(filled, layer, torch.ones_like(layer))
    x_mid = torch.where(filled, torch.einsum("bxyz,x->bz", e, xi) / safe_layer, torch.zeros_like(layer))
    y_mid = torch.where(filled, torch.einsum("bxyz,y->bz", e, yi) / safe_layer, torch.zeros_like(layer))
    dz = zi[None, :] - z_ref[:, None]
    zproj = torch.sqrt(torch.clamp((x_mid - x_ref[:, None]) ** 2 + dz ** 2, min=1e-7))
    slope = (y_mid - y_ref[:, None]) / zproj
    slope = torch.where(dz < 0, -slope, slope)
    angle = torch.where(filled, math.pi / 2 - torch.atan(slope), torch.zeros_like(slope))
    weight = zi[None, :] * filled.to(e.dtype)
    ws = weight.sum(dim=1)
    theta = (angle * weight).sum(dim=1) / torch.where(ws == 0, torch.ones_like(ws), ws)
    return torch.where(total == 0, torch.full_like(theta, 100.0), theta)


class Discriminator(nn.Module):
    def __init__(self, preset):
        super().__init__()
        self.preset = preset
        layers: list[nn.Module] = []
        cin = 1
        for block in preset.disc_blocks:
            if any(block.pad):
                layers.append(nn.ZeroPad3d(_sym_pad(block.pad)))
            layers.append(nn.Conv3d(cin, block.filters, block.kernel, padding=block.padding))
            layers.append(nn.LeakyReLU(PRESETS_LEAKY))
            if block.batchnorm:
                layers.append(nn.BatchNorm3d(block.filters, eps=1e-6, momentum=1 - preset.bn_momentum))
            layers.append(nn.Dropout(0.2))
            cin = block.filters
        layers.append(nn.AvgPool3d(preset.pool))
        self.body = nn.Sequential(*layers)
        with torch.no_grad():
            flat = self.body(torch.zeros(1, 1, *preset.grid)).numel()
        self.generation = nn.Linear(flat, 1)
        self.auxiliary = nn.Linear(flat, 1)

    def forward(self, image):
        h = self.body(image).flatten(1)
        with torch.autocast(image.device.type, enabled=False):  # the heads the losses read: float32
            h = h.float()
            image = image.float()
            return (torch.sigmoid(self.generation(h))[:, 0], self.auxiliary(h)[:, 0], ecal_angle(image, self.preset.power),
                    ecal_sum(image, self.preset.power))


PRESETS_LEAKY = 0.3


def losses(outputs, labels, y, ang, ecal):
    gen, aux, ang_pred, ecal_pred = outputs
    p = gen.clamp(1e-7, 1 - 1e-7)
    bce = -(labels * torch.log(p) + (1 - labels) * torch.log(1 - p))
    terms = [bce, 100 * (y - aux).abs() / y.abs().clamp(min=1e-7), (ang - ang_pred).abs(),
             100 * (ecal - ecal_pred).abs() / ecal.abs().clamp(min=1e-7)]
    return sum(w * t.mean() for w, t in zip(LOSS_WEIGHTS, terms))


def run(precision: str, batch: int, steps: int, device: str, gen_batch: int) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = precision != "float32"
    torch.backends.cudnn.allow_tf32 = precision != "float32"
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    preset = PRESETS.PAPER
    g, d = Generator(preset).to(device), Discriminator(preset).to(device)
    g_opt, d_opt = (torch.optim.RMSprop(m.parameters(), lr=preset.learning_rate) for m in (g, d))
    dtype = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device, enabled=precision == "mixed_float16")
    cast = (lambda: torch.autocast(device, dtype=dtype)) if dtype else (lambda: torch.autocast(device, enabled=False))
    real = torch.rand(batch, 1, *preset.grid, device=device) * 0.5
    y = torch.rand(batch, device=device) + 1.0
    ang = torch.rand(batch, device=device) + 1.0
    ecal = ecal_sum(real, preset.power)

    def latent():
        return torch.cat([y[:, None], ang[:, None], torch.randn(batch, preset.noise_size, device=device)], dim=1)

    def update(model, opt, loss):
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def step():
        with torch.no_grad(), cast():
            fake = g(latent())
        for images, label in ((real, 1.0), (fake, 0.0)):
            with cast():
                loss = losses(d(images), torch.full_like(y, label), y, ang, ecal)
            update(d, d_opt, loss)
        for _ in range(2):
            with cast():
                loss = losses(d(g(latent())), torch.ones_like(y), y, ang, ecal)
            update(g, g_opt, loss)
        return loss

    def timed(fn, n):
        for _ in range(3):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            out = fn()
        float(out.detach().float().sum())
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    g.train(), d.train()
    train_s = timed(step, steps)
    z = torch.cat([torch.full((gen_batch, 1), 1.5, device=device), torch.full((gen_batch, 1), math.pi / 2, device=device),
                   torch.randn(gen_batch, preset.noise_size, device=device)], dim=1)
    g.eval()

    def generate():
        with torch.no_grad(), cast():
            return torch.relu(g(z)).pow(1.0 / preset.power)

    gen_s = timed(generate, max(3, steps // 2))
    return {"precision": precision, "train_samples_per_s": round(steps * batch / train_s, 2),
            "showers_per_s": round(max(3, steps // 2) * gen_batch / gen_s, 1), "final_loss": float(step().float())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64, help="events per step (the paper preset's default batch)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per precision (after 3 untimed)")
    p.add_argument("--gen-batch", type=int, default=256)
    p.add_argument("--precisions", nargs="+", default=["float32", "tf32", "mixed_bfloat16", "mixed_float16"])
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    rows = [run(prec, a.batch, a.steps, device, a.gen_batch) for prec in a.precisions]
    report = {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
              "batch": a.batch, "steps": a.steps, "rows": rows}
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{name}; torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}; "
          f"paper preset, batch {a.batch}, {a.steps} timed steps")
    base = {r["precision"]: r for r in rows}
    ref = base.get("tf32") or rows[0]
    print(f"{'precision':16s} {'train samples/s':>16s} {'vs ' + ref['precision']:>10s} {'showers/s':>11s} {'vs ' + ref['precision']:>10s}  loss")
    for r in rows:
        print(f"{r['precision']:16s} {r['train_samples_per_s']:16.1f} {r['train_samples_per_s'] / ref['train_samples_per_s']:9.2f}x "
              f"{r['showers_per_s']:11.1f} {r['showers_per_s'] / ref['showers_per_s']:9.2f}x  {r['final_loss']:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
