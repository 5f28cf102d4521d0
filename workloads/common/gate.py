"""A run's verdict against its quality gate (metric -> largest accepted value), the same words for
every workload."""

from __future__ import annotations


def gate_verdict(summary: dict, gate: dict[str, float] | None, context: str) -> dict:
    """``passed`` (None without a gate), the failing metrics with their bound, and one line that
    ends with ``context`` (what the metrics mean next to their noise floor)."""
    if not gate:
        return {"passed": None, "failing": {}, "line": f"no quality gate; {context}"}
    failing = {k: {"value": summary[k], "max": float(v)} for k, v in gate.items() if not summary[k] <= v}
    if failing:
        line = "FAILED the quality gate: " + ", ".join(f"{k} {f['value']:.4g} > {f['max']:.4g}" for k, f in failing.items())
    else:
        line = "passed the quality gate (" + ", ".join(f"{k} {summary[k]:.4g} <= {v:.4g}" for k, v in gate.items()) + ")"
    return {"passed": not failing, "failing": failing, "line": f"{line}; {context}"}
