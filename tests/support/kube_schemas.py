"""The pinned Kubernetes schemas (``tests/schemas``, written by ``tests/schemas/update.py``): what a
rendered manifest is checked against, as an API server would check it (strict: no unknown field)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import jsonschema

K8S = Path(__file__).resolve().parents[1] / "schemas" / "kubernetes-v1.32.0"
FILES = {"Namespace": "namespace-v1", "Secret": "secret-v1", "PersistentVolumeClaim": "persistentvolumeclaim-v1",
         "ServiceAccount": "serviceaccount-v1", "Role": "role-rbac-v1", "RoleBinding": "rolebinding-rbac-v1",
         "Deployment": "deployment-apps-v1", "Service": "service-v1"}


@lru_cache(maxsize=None)
def validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((K8S / f"{FILES[kind]}.json").read_text()))


def invalid(obj: dict) -> list[str]:
    """What the schema of the object's kind refuses in it (empty: valid)."""
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator(obj["kind"]).iter_errors(obj)]
