"""Quality gates: the physics a trained model must reach for its run to count as a success.

A gate file is YAML mapping summary metrics to the largest value accepted, e.g.::

    optimisation_metric: 30
    sf_rel_error: 0.05
    classifier_auc: 0.9

The job validates the model as always and states the verdict in the report; the submitting side
marks a run that misses the gate ``FAILED_QUALITY`` and exits non-zero, so a script or a scan
cannot take a broken model for a trained one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import ConfigDict, Field, ValidationError, create_model

from ..errors import BurstError
from ..home.userfile import compose_yaml, read_text

EXIT_CODE = 4  # a run that trained, validated and missed its gate (1: failed, 2: bad input, 3: budget stop)


def _model(workload: str):
    """The gate's schema: every metric the workload's validation can bound, none required."""
    from .. import workloads

    metrics = workloads.get(workload).gate_metrics
    fields = {m: (Optional[float], Field(None, ge=0, allow_inf_nan=False, description=what)) for m, what in metrics.items()}
    return create_model("Gate", __config__=ConfigDict(extra="forbid", strict=True), **fields)


def parse(text: str, source: str, workload: str) -> dict[str, float]:
    """A gate document of ``workload``'s metrics → {metric: largest accepted value}; one-line
    errors with file and line."""
    node, raw = compose_yaml(text, source)
    model = _model(workload)
    if not isinstance(raw, dict) or not raw:
        raise BurstError(f"{source}:1: a quality gate maps metrics to their largest accepted value, e.g. `optimisation_metric: 30` "
                         f"(metrics: {', '.join(model.model_fields)})")
    lines = {key.value: key.start_mark.line + 1 for key, _ in node.value}
    try:
        gate = model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else ""
        where = f"{source}:{lines.get(key, 1)}"
        if err["type"] == "extra_forbidden":
            raise BurstError(f"{where}: unknown metric {key!r}; a gate of {workload} can bound: {', '.join(model.model_fields)}") from None
        raise BurstError(f"{where}: {key}: {err['msg']}") from None
    return {k: float(v) for k, v in gate.model_dump().items() if v is not None}


def load(path: Path, workload: str) -> dict[str, float]:
    return parse(read_text(Path(path), "quality gate"), str(path), workload)
