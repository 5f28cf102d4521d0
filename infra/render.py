"""Run a stack program under Pulumi's mock runtime and record every resource it would create.

No CLI, no credentials, no network: the provider SDKs only serialise inputs (``burst up
--dry-run`` and the tests use this). Mocks accept any value, so the rendering is checked by
burst's own tests, not by the cloud.
"""

from __future__ import annotations

import base64
from typing import Callable

import pulumi
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor

SUMMARY_KEYS = ("machineType", "accelerator", "count", "nodeCount", "spot", "preemptible", "location", "zone", "region",
                "vmSize", "scaleSetPriority", "acceleratorType", "runtimeVersion", "version", "chart")


class RecordingMocks(pulumi.runtime.Mocks):
    """Returns inputs as outputs (plus the few outputs programs read) and records each resource."""

    def __init__(self):
        self.resources: list[dict] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        outputs = dict(args.inputs)
        if args.typ == "gcp:container/cluster:Cluster":
            outputs.update(endpoint="203.0.113.10", masterAuth={"clusterCaCertificate": "Q0EK"})
        elif args.typ == "gcp:serviceaccount/account:Account":
            outputs.update(email=f"{args.inputs.get('accountId', 'sa')}@project.iam.gserviceaccount.com")
        elif args.typ == "azure-native:containerservice:ManagedCluster":
            outputs.update(oidcIssuerProfile={"enabled": True, "issuerURL": "https://oidc.example.invalid/tenant/issuer/"})
        elif args.typ == "azure-native:managedidentity:UserAssignedIdentity":
            outputs.update(clientId="00000000-0000-0000-0000-00000000c11e", principalId="00000000-0000-0000-0000-0000000000a1")
        elif args.typ == "gcp:tpu/v2Vm:V2Vm":
            outputs.update(networkEndpoints=[{"ipAddress": f"10.0.0.{i + 2}", "port": 8470} for i in range(_tpu_hosts(args.inputs))])
        if "name" not in outputs:  # azure-native resources output their name under `name`
            for key in ("resourceName", "resourceGroupName", "accountName", "containerName", "agentPoolName"):
                if key in args.inputs:
                    outputs["name"] = args.inputs[key]
                    break
        if args.typ != "pulumi:providers:kubernetes" and args.custom is not False:  # components create nothing themselves
            self.resources.append({"type": args.typ, "name": args.name, "inputs": _plain(args.inputs)})
        return [f"{args.name}-id", outputs]

    def call(self, args: pulumi.runtime.MockCallArgs):
        if args.token == "azure-native:containerservice:listManagedClusterUserCredentials":
            return {"kubeconfigs": [{"name": "clusterUser", "value": base64.b64encode(b"apiVersion: v1\nkind: Config\n").decode()}]}
        if args.token == "azure-native:authorization:getClientConfig":
            return {"subscriptionId": "00000000-0000-0000-0000-000000000000", "tenantId": "00000000-0000-0000-0000-0000000000te",
                    "clientId": "00000000-0000-0000-0000-0000000000c1", "objectId": "00000000-0000-0000-0000-0000000000b1"}
        return {}


def _tpu_hosts(inputs: dict) -> int:
    size = int(str(inputs.get("acceleratorType", "v3-8")).rsplit("-", 1)[-1])
    return max(1, size // 8)


def _plain(value):
    """Mock inputs carry floats for integers and secrets in Pulumi's envelope; give JSON-friendly values back
    (what a secret holds is the caller's to mask, as ``burst up --dry-run`` does)."""
    if isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig:
        return _plain(value.get("value"))
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class RecordingMonitor(MockMonitor):
    """The mock engine, also noting what each resource waits for: Pulumi sends the URNs of its
    explicit ``depends_on`` and of every resource whose outputs its inputs use."""

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        for r in self.mocks.resources:
            if r["name"] == request.name and r["type"] == request.type:
                r["dependsOn"] = sorted({urn.rsplit("::", 1)[-1] for urn in request.dependencies})
        return response


def render(program: Callable[[], dict], stack: str = "dry-run") -> list[dict]:
    """Resources the program registers, in registration order, each with the names it depends on."""
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project="burst", stack=stack, preview=False, monitor=RecordingMonitor(mocks))

    @pulumi.runtime.test
    def run():
        created = program()
        outputs = [r.urn for r in _resources(created)] + [o for o in _outputs(created)]
        return pulumi.Output.all(*outputs)

    run()
    return mocks.resources


def _outputs(tree) -> list:
    if isinstance(tree, pulumi.Output):
        return [tree]
    if isinstance(tree, dict):
        return [o for v in tree.values() for o in _outputs(v)]
    return []


def _resources(tree) -> list:
    if isinstance(tree, pulumi.Resource):
        return [tree]
    if isinstance(tree, dict):
        return [r for v in tree.values() for r in _resources(v)]
    if isinstance(tree, (list, tuple)):
        return [r for v in tree for r in _resources(v)]
    return []


def summary(resource: dict) -> dict:
    """The inputs users look at first (machine type, accelerator, count, spot, region...)."""
    out = {}

    def walk(d, depth=0):
        if depth > 4 or not isinstance(d, dict):
            return
        for k, v in d.items():
            if k in SUMMARY_KEYS and not isinstance(v, (dict, list)) and k not in out:
                out[k] = v
            elif k in ("guestAccelerators",) and isinstance(v, list) and v:
                out.setdefault("accelerator", v[0].get("type"))
                out.setdefault("count", v[0].get("count"))
            elif isinstance(v, dict):
                walk(v, depth + 1)

    walk(resource["inputs"])
    if resource["type"].endswith("RayCluster"):
        groups = resource["inputs"].get("spec", {}).get("workerGroupSpecs", [])
        out["workers"] = ", ".join(f"{g['groupName']}: {g['replicas']} pods x {g['template']['spec']['containers'][0]['resources']['limits'].get('nvidia.com/gpu', 0)} GPU" for g in groups)
    return out
