"""Write the pinned schemas the Kubernetes manifests are validated against (run by hand when a pin moves).

* Kubernetes ``v1.32.0`` (``K8S``): the JSON schemas ``kubernetes-validate`` ships, generated from the
  Kubernetes OpenAPI document (``openapi2jsonschema``, strict: no unknown fields); for each kind burst
  creates, its schema with only the definitions it refers to, in one self-contained file.
* KubeRay ``v1.5.1`` (``KUBERAY``, the operator chart burst installs): the ``openAPIV3Schema`` of the
  ``v1`` version of ``ray-operator/config/crd/bases/ray.io_rayclusters.yaml`` at tag ``v1.5.1``.

    python tests/schemas/update.py KUBERNETES_VALIDATE_WHEEL [KUBERAY_CHECKOUT]
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

K8S = "v1.32.0"
KUBERAY = "v1.5.1"
KINDS = ("namespace-v1", "secret-v1", "persistentvolumeclaim-v1", "serviceaccount-v1", "role-rbac-v1", "rolebinding-rbac-v1",
         "deployment-apps-v1", "service-v1")  # the last two: `burst server deploy kubernetes`
HERE = Path(__file__).parent


def _refs(node, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and "#/$defs/" in ref:
            found.add(ref.rsplit("/", 1)[1])
        for v in node.values():
            _refs(v, found)
    elif isinstance(node, list):
        for v in node:
            _refs(v, found)


def _local(node):
    """``/api/_definitions.json#/$defs/X`` -> ``#/$defs/X`` (one self-contained file)."""
    if isinstance(node, dict):
        return {k: ("#" + v.split("#", 1)[1] if k == "$ref" and isinstance(v, str) else _local(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_local(v) for v in node]
    return node


def kubernetes(wheel: Path) -> None:
    root = f"kubernetes_validate/kubernetes-json-schema/{K8S}-local-strict/"
    with zipfile.ZipFile(wheel) as z:
        definitions = json.loads(z.read(root + "_definitions.json"))["$defs"]
        for kind in KINDS:
            schema = json.loads(z.read(root + f"{kind}.json"))
            needed: set[str] = set()
            _refs(schema, needed)
            while True:
                more = set(needed)
                for name in list(needed):
                    _refs(definitions[name], more)
                if more == needed:
                    break
                needed = more
            schema = _local({"$schema": "https://json-schema.org/draft/2020-12/schema", **schema,
                             "$defs": {n: definitions[n] for n in sorted(needed)}})
            out = HERE / f"kubernetes-{K8S}" / f"{kind}.json"
            out.parent.mkdir(exist_ok=True)
            out.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")


def kuberay(checkout: Path) -> None:
    text = subprocess.run(["git", "-C", str(checkout), "show", f"{KUBERAY}:ray-operator/config/crd/bases/ray.io_rayclusters.yaml"],
                          capture_output=True, text=True, check=True).stdout
    crd = yaml.safe_load(text)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    out = HERE / f"kuberay-{KUBERAY}" / "raycluster-v1.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(version["schema"]["openAPIV3Schema"], sort_keys=True) + "\n")


if __name__ == "__main__":
    kubernetes(Path(sys.argv[1]))
    if len(sys.argv) > 2:  # the KubeRay checkout: only when its pin moves
        kuberay(Path(sys.argv[2]))
