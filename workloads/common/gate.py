"""A run's verdict against its quality gate (metric -> largest accepted value), the same words for
every workload."""

from __future__ import annotations

import numpy as np

#: the summary metric that says which share of the generated cells came out NaN or infinite
BROKEN = "non_finite_fraction"


def finite_part(showers: np.ndarray) -> tuple[np.ndarray, float]:
    """(the showers with NaN and infinite cells set to 0, the share of cells that were): a model whose
    arithmetic overflowed (float16 without loss scaling, a learning rate too high) is judged, not crashed on."""
    showers = np.asarray(showers)
    bad = ~np.isfinite(showers)
    if not bad.any():
        return showers, 0.0
    return np.where(bad, 0, showers).astype(showers.dtype), float(bad.mean())


def gate_verdict(summary: dict, gate: dict[str, float] | None, context: str) -> dict:
    """``passed`` (None without a gate), the failing metrics with their bound, and one line that
    ends with ``context`` (what the metrics mean next to their noise floor). Showers with NaN or
    infinite cells (``BROKEN`` in ``summary``) fail with or without a gate."""
    broken = summary.get(BROKEN, 0.0)
    if broken:
        failing = {BROKEN: {"value": broken, "max": 0.0}}
        failing.update({k: {"value": summary[k], "max": float(v)} for k, v in (gate or {}).items() if not summary[k] <= v})
        return {"passed": False, "failing": failing,
                "line": f"FAILED: {broken:.2%} of the generated cells are NaN or infinite (the model's arithmetic overflowed; "
                        f"a 16-bit precision is the usual cause: train in float32 or mixed_bfloat16); {context}"}
    if not gate:
        return {"passed": None, "failing": {}, "line": f"no quality gate; {context}"}
    failing = {k: {"value": summary[k], "max": float(v)} for k, v in gate.items() if not summary[k] <= v}
    if failing:
        line = "FAILED the quality gate: " + ", ".join(f"{k} {f['value']:.4g} > {f['max']:.4g}" for k, f in failing.items())
    else:
        line = "passed the quality gate (" + ", ".join(f"{k} {summary[k]:.4g} <= {v:.4g}" for k, v in gate.items()) + ")"
    return {"passed": not failing, "failing": failing, "line": f"{line}; {context}"}
