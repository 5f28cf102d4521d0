"""Model presets as data: a small denoiser that learns visibly in minutes on two CPU cores, and a
wide one for GPUs. Both see every one of the 6480 cells; they differ in width and depth."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Preset:
    name: str
    hidden: int                 # units of every hidden layer of the denoiser
    blocks: int                 # residual blocks (two dense layers each)
    learning_rate: float        # Adam
    sample_steps: int           # deterministic (DDIM) steps from noise to a shower
    default_batch: int          # events per replica per step
    time_features: int = 16     # sinusoidal features of the diffusion time


SMALL = Preset("small", hidden=256, blocks=2, learning_rate=1e-3, sample_steps=20, default_batch=32)
WIDE = Preset("wide", hidden=1024, blocks=4, learning_rate=3e-4, sample_steps=50, default_batch=128)
PRESETS: dict[str, Preset] = {p.name: p for p in (SMALL, WIDE)}

#: Knobs a scan (``burst tune``) may set, with what each changes.
TUNABLE: dict[str, str] = {
    "learning_rate": "Adam learning rate of the denoiser",
    "hidden": "units of every hidden layer",
    "blocks": "residual blocks of two dense layers",
    "sample_steps": "deterministic sampling steps from noise to a shower (more: slower, closer to the trained distribution)",
}
WHOLE_NUMBERS = frozenset({"hidden", "blocks", "sample_steps"})


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None


def tuned(preset: Preset, overrides: dict | None) -> Preset:
    """``preset`` with some ``TUNABLE`` knobs set; ValueError names a bad knob or value."""
    if not overrides:
        return preset
    unknown = sorted(set(overrides) - set(TUNABLE))
    if unknown:
        raise ValueError(f"unknown knob(s) {', '.join(unknown)}; tunable: {', '.join(TUNABLE)}")
    changes = {}
    for knob, value in overrides.items():
        if knob in WHOLE_NUMBERS:
            if int(value) != value or int(value) < 1:
                raise ValueError(f"{knob} must be a whole number of at least 1, got {value}")
            changes[knob] = int(value)
        else:
            if not float(value) > 0:
                raise ValueError(f"{knob} must be above 0, got {value}")
            changes[knob] = float(value)
    return replace(preset, **changes)


def overrides_of(preset: Preset) -> dict:
    """The knobs in which ``preset`` differs from the named preset it was tuned from."""
    base = get_preset(preset.name)
    return {k: getattr(preset, k) for k in TUNABLE if getattr(preset, k) != getattr(base, k)}
