"""A stand-in for the Pulumi CLI behind the Automation API's own seam (a ``PulumiCommand``
subclass): it records every CLI call and answers as the CLI does, with failures, a blocked
``up`` and left-over resources scripted. No Pulumi CLI and no cloud is reachable here."""

import json
import threading
from contextlib import contextmanager

from pulumi import automation as auto
from pulumi.automation.errors import create_command_error
from semver import VersionInfo

from burst import targets
from infra.driver import BurstPulumiCommand

URN = "urn:pulumi:t::burst::gcp:container/cluster:Cluster::burst-t"


class RecordingPulumi(BurstPulumiCommand):
    """Answers like the Pulumi CLI; ``fail_up``, ``block_up`` and ``leftover`` script its behaviour."""

    def __init__(self, fail_up=False, block_up=False, leftover_destroys=0, fail_store=False):
        self.command, self.version, self.process = "pulumi", VersionInfo.parse("3.272.0"), None
        self.calls: list[list[str]] = []
        self.store_calls: list[list[str]] = []
        self.fail_store = fail_store
        self.fail_up, self.block_up, self.leftover_destroys = fail_up, block_up, leftover_destroys
        self.stacks: set[str] = set()
        self.interrupted = threading.Event()
        self.blocking = threading.Event()  # set once `up` is running and waiting to be interrupted
        self.destroys = 0
        self.config: dict[str, dict[str, str]] = {}  # each stack's configuration, as `config set-all` left it

    def run(self, args, cwd, additional_env, on_output=None, on_error=None):
        args = [a for a in args if a != "--non-interactive"]
        stack = args[args.index("--stack") + 1] if "--stack" in args else (args[2] if args[:2] == ["stack", "init"] else None)
        # a region's store stack (infra.store) is recorded apart: `calls` are the cluster stack's
        (self.store_calls if stack and stack.startswith("store-") else self.calls).append(args)
        assert additional_env["PULUMI_CONFIG_PASSPHRASE"]  # secrets provider always has its passphrase
        if stack and stack.startswith("store-") and args[0] == "up" and self.fail_store:
            raise create_command_error(auto.CommandResult("", "error: googleapi: Error 403: storage.buckets.create denied", 255))
        if args[:2] == ["stack", "select"]:
            if stack not in self.stacks:
                raise create_command_error(auto.CommandResult("", f"error: no stack named '{stack}' found", 255))
        elif args[:2] == ["stack", "init"]:
            self.stacks.add(stack)
        elif args[0] == "up":
            if self.block_up and not (stack or "").startswith("store-"):
                self.blocking.set()
                self.interrupted.wait(10)
                raise create_command_error(auto.CommandResult("", "error: update canceled", 255))
            if self.fail_up and not (stack or "").startswith("store-"):
                raise create_command_error(auto.CommandResult("", "error: googleapi: Error 403: Quota 'NVIDIA_V100_GPUS' exceeded", 255))
        elif args[:2] == ["stack", "output"] and stack and stack.startswith("store-"):
            return auto.CommandResult(json.dumps({"storage_uri": "gs://store-bucket", "bucket": "store-bucket"}), "", 0)
        elif args[:2] == ["stack", "output"]:
            return auto.CommandResult(json.dumps({"storage_uri": "gs://b", "kubeconfig": "apiVersion: v1", "ray_namespace": "burst",
                                                  "ray_head_service": "burst-head-svc"}), "", 0)
        elif args[:2] == ["stack", "history"]:
            return auto.CommandResult(json.dumps([{"kind": "update", "startTime": "2026-11-22T00:00:00.000Z", "message": "",
                                                   "environment": {}, "config": {}, "result": "succeeded",
                                                   "endTime": "2026-11-22T00:10:00.000Z"}]), "", 0)
        elif args[:2] == ["config", "set-all"]:
            pairs = [args[i + 1] for i, a in enumerate(args) if a in ("--plaintext", "--secret")]
            self.config.setdefault(stack, {}).update(dict(p.split("=", 1) for p in pairs))
        elif args[:1] == ["config"] and "--json" in args:  # `pulumi config --show-secrets --json`: {key: {value, secret}}
            return auto.CommandResult(json.dumps({k: {"value": v, "secret": False} for k, v in self.config.get(stack, {}).items()}), "", 0)
        elif args[0] == "destroy":
            self.destroys += 1
        elif args[:2] == ["stack", "export"]:
            left = self.destroys <= self.leftover_destroys
            resources = [{"urn": "urn:pulumi:t::burst::pulumi:pulumi:Stack::burst-t", "type": "pulumi:pulumi:Stack"}]
            if left:
                resources.append({"urn": URN, "type": "gcp:container/cluster:Cluster"})
            return auto.CommandResult(json.dumps({"version": 3, "deployment": {"resources": resources}}), "", 0)
        return auto.CommandResult("", "", 0)

    def interrupt(self) -> bool:
        self.calls.append(["<SIGINT>"])
        self.interrupted.set()
        return True

    def commands(self, calls=None) -> list[str]:
        return [" ".join(c[:2]) if c[0] in ("stack", "config") else c[0] for c in (self.calls if calls is None else calls)]


@contextmanager
def pulumi_command(fake):
    """The GKE target with the recording stand-in in place of the Pulumi CLI."""
    gke = targets.get("gcp")
    gke.command = fake
    try:
        yield gke
    finally:
        del gke.command  # back to the class default: the real CLI
