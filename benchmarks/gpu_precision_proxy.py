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

Each precision runs in both memory layouts, ``channels_first`` (PyTorch's default, NCDHW) and
``channels_last`` (NDHWC, the layout of burst's Keras model, which TensorFlow keeps on a GPU unless
its layout optimizer transposes), and ``--compiled`` adds ``torch.compile`` rows for the layouts
and precisions it names. The FLOPs of one step and one generated shower are counted once
(``FlopCounterMode``: convolutions and matrix products, forward and backward), and with the chip's
own measured matrix rate (8192-cube products in TF32 and bfloat16) each row says what fraction of
that rate it reaches. One call measures all of it; the default rows take about 4 minutes on an
H200.

What carries over to TensorFlow is the ratio between precisions and layouts (the work per step is
the same; cuDNN runs the convolutions in both); absolute samples/s do not. Printed with the GPU's
name and the library versions. Runs on a CPU too (slowly), to check the script before a GPU session.
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


LAYOUTS = {"channels_first": torch.contiguous_format, "channels_last": torch.channels_last_3d}


def run(precision: str, batch: int, steps: int, device: str, gen_batch: int, layout: str = "channels_first",
        compiled: bool = False) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = precision != "float32"
    torch.backends.cudnn.allow_tf32 = precision != "float32"
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    preset = PRESETS.PAPER
    memory = LAYOUTS[layout]
    g, d = Generator(preset).to(device, memory_format=memory), Discriminator(preset).to(device, memory_format=memory)
    g_opt, d_opt = (torch.optim.RMSprop(m.parameters(), lr=preset.learning_rate) for m in (g, d))
    if compiled:  # the networks compiled (fusion of the elementwise and normalisation work); the optimiser as it is
        g, d = torch.compile(g), torch.compile(d)
    dtype = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device, enabled=precision == "mixed_float16")
    cast = (lambda: torch.autocast(device, dtype=dtype)) if dtype else (lambda: torch.autocast(device, enabled=False))
    real = (torch.rand(batch, 1, *preset.grid, device=device) * 0.5).contiguous(memory_format=memory)
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
    return {"precision": precision, "layout": layout, "compiled": compiled, "train_samples_per_s": round(steps * batch / train_s, 2),
            "showers_per_s": round(max(3, steps // 2) * gen_batch / gen_s, 1), "final_loss": float(step().detach().float())}


def work_per_sample(device: str, batch: int = 4) -> dict:
    """GFLOP per training sample (the whole step: five passes and their gradients) and per generated
    shower, counted by ``FlopCounterMode`` in float32 (the count does not depend on the precision)."""
    from torch.utils.flop_counter import FlopCounterMode

    preset = PRESETS.PAPER
    g, d = Generator(preset).to(device), Discriminator(preset).to(device)
    real = torch.rand(batch, 1, *preset.grid, device=device) * 0.5
    y, ang = torch.rand(batch, device=device) + 1.0, torch.rand(batch, device=device) + 1.0
    ecal = ecal_sum(real, preset.power)

    def z():
        return torch.cat([y[:, None], ang[:, None], torch.randn(batch, preset.noise_size, device=device)], dim=1)

    with FlopCounterMode(display=False) as training:
        with torch.no_grad():
            fake = g(z())
        for images, label in ((real, 1.0), (fake, 0.0)):
            losses(d(images), torch.full_like(y, label), y, ang, ecal).backward()
        for _ in range(2):
            losses(d(g(z())), torch.ones_like(y), y, ang, ecal).backward()
    with FlopCounterMode(display=False) as generation, torch.no_grad():
        g(z())
    return {"train_gflop_per_sample": round(training.get_total_flops() / batch / 1e9, 2),
            "gen_gflop_per_shower": round(generation.get_total_flops() / batch / 1e9, 3)}


def matrix_rates(device: str, n: int = 8192) -> dict:
    """The chip's own matrix rate in TF32 and bfloat16 (TFLOP/s of n-cube products): what a row's rate is a fraction of."""
    if device != "cuda":
        return {}
    out = {}
    for name, dtype, tf32 in (("tf32", torch.float32, True), ("bfloat16", torch.bfloat16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        start, reps = time.perf_counter(), 10
        for _ in range(reps):
            a @ b
        torch.cuda.synchronize()
        out[name] = round(2 * n ** 3 * reps / (time.perf_counter() - start) / 1e12, 1)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64, help="events per step (the paper preset's default batch)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per row (after 3 untimed)")
    p.add_argument("--gen-batch", type=int, default=256)
    p.add_argument("--precisions", nargs="+", default=["float32", "tf32", "mixed_bfloat16", "mixed_float16"])
    p.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    p.add_argument("--compiled", nargs="*", default=["mixed_bfloat16:channels_last"], metavar="PRECISION:LAYOUT",
                   help="rows to run again under torch.compile (none: --compiled with no value)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    work = work_per_sample(device)
    peaks = matrix_rates(device)
    rows = [run(prec, a.batch, a.steps, device, a.gen_batch, layout) for prec in a.precisions for layout in a.layouts]
    for pair in a.compiled:
        prec, _, layout = pair.partition(":")
        rows.append(run(prec, a.batch, a.steps, device, a.gen_batch, layout or "channels_last", compiled=True))
    for r in rows:
        r["train_tflop_per_s"] = round(r["train_samples_per_s"] * work["train_gflop_per_sample"] / 1e3, 2)
        peak = peaks.get("bfloat16" if r["precision"] in ("mixed_bfloat16", "mixed_float16") else "tf32")
        r["of_matrix_rate"] = round(r["train_tflop_per_s"] / peak, 4) if peak else None
    report = {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
              "batch": a.batch, "steps": a.steps, "work": work, "matrix_tflop_per_s": peaks, "rows": rows}
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{name}; torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}; "
          f"paper preset, batch {a.batch}, {a.steps} timed steps; {work['train_gflop_per_sample']} GFLOP a training sample, "
          f"{work['gen_gflop_per_shower']} a shower; matrix rate (TFLOP/s) {peaks or 'not measured on a CPU'}")
    ref = next((r for r in rows if r["precision"] == "tf32" and r["layout"] == "channels_last" and not r["compiled"]), rows[0])
    label = f"{ref['precision']} {ref['layout']}"
    print(f"{'precision':16s} {'layout':15s} {'compiled':8s} {'train samples/s':>16s} {'vs ' + label:>24s} {'TFLOP/s':>8s} "
          f"{'of rate':>8s} {'showers/s':>10s}  loss")
    for r in rows:
        share = f"{r['of_matrix_rate'] * 100:7.1f}%" if r["of_matrix_rate"] is not None else f"{'-':>8s}"
        print(f"{r['precision']:16s} {r['layout']:15s} {'yes' if r['compiled'] else 'no':8s} {r['train_samples_per_s']:16.1f} "
              f"{r['train_samples_per_s'] / ref['train_samples_per_s']:23.2f}x {r['train_tflop_per_s']:8.2f} {share} "
              f"{r['showers_per_s']:10.1f}  {r['final_loss']:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
