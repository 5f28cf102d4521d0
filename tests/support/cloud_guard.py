"""No test may reach a cloud, whatever the machine it runs on has configured.

A pytest plugin (loaded by ``tests/conftest.py``) with two layers:

* **A scrubbed environment** for the whole session, inherited by every subprocess the tests
  start (the burst CLI, Ray, Pulumi): no cloud credentials or config directories, no Pulumi
  backend or access token, no kubeconfig, no ``RAY_ADDRESS`` pointing at somebody's cluster.
* **A guard** that fails the test in which anything tried to leave the machine:
  - every cloud CLI (``pulumi``, ``gcloud``, ``az``, ``kubectl``, ...) is shadowed on ``PATH`` by
    a stand-in that records the call and exits non-zero, so a real CLI is never started;
  - in the test process itself, a connection or a name lookup for anything but loopback raises
    ``CloudCallBlocked`` and is recorded (cloud SDKs speak HTTPS from this process).
  A test fails even when the code under test swallowed the error.

Tests that need a stand-in CLI of their own put it on ``PATH`` before the guard's directory.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
from pathlib import Path

import pytest

CLOUD_CLIS = ("pulumi", "gcloud", "gsutil", "bq", "gke-gcloud-auth-plugin", "az", "kubectl", "helm", "aws")
SCRUBBED_PREFIXES = ("GOOGLE_", "CLOUDSDK_", "GCLOUD_", "GCP_", "AZURE_", "ARM_", "PULUMI_", "AWS_", "KUBECONFIG", "RAY_ADDRESS")
LOG_VAR = "BURST_TEST_CLOUD_LOG"
SHIM = """#!/bin/sh
echo "$(basename "$0") $*" >> "${%s:-/dev/null}"
echo "blocked by the test suite's cloud guard: $(basename "$0") $*" >&2
exit 97
""" % LOG_VAR


class CloudCallBlocked(OSError):
    """A test tried to reach something beyond this machine."""


_in_process: list[str] = []


def _is_local_host(host) -> bool:
    if host in (None, "", "localhost", "localhost.localdomain", socket.gethostname()):
        return True
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    try:
        ip = ipaddress.ip_address(str(host).split("%")[0])
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def _check_address(address) -> None:
    if isinstance(address, tuple) and address and not _is_local_host(address[0]):
        _in_process.append(f"connect {address[0]}:{address[1] if len(address) > 1 else ''}")
        raise CloudCallBlocked(f"blocked by the test suite's cloud guard: connection to {address[0]}")


_real = {"connect": socket.socket.connect, "connect_ex": socket.socket.connect_ex, "getaddrinfo": socket.getaddrinfo}


def _guarded_connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _check_address(address)
    return _real["connect"](self, address)


def _guarded_connect_ex(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _check_address(address)
    return _real["connect_ex"](self, address)


def _guarded_getaddrinfo(host, *args, **kwargs):
    if not _is_local_host(host):
        _in_process.append(f"resolve {host}")
        raise CloudCallBlocked(f"blocked by the test suite's cloud guard: name lookup of {host}")
    return _real["getaddrinfo"](host, *args, **kwargs)


def scrub_environment(root: Path) -> None:
    """Remove every cloud credential and setting from this process's environment; point the
    tools' config directories at empty ones under ``root``; shadow the cloud CLIs."""
    for key in list(os.environ):
        if key.startswith(SCRUBBED_PREFIXES):
            del os.environ[key]
    for var, sub in (("CLOUDSDK_CONFIG", "gcloud"), ("AZURE_CONFIG_DIR", "azure"), ("PULUMI_HOME", "pulumi-home")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(root / sub)
    os.environ["KUBECONFIG"] = str(root / "no-kubeconfig")
    shims = root / "bin"
    shims.mkdir(parents=True, exist_ok=True)
    for name in CLOUD_CLIS:
        path = shims / name
        path.write_text(SHIM)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ["PATH"] = f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ[LOG_VAR] = str(root / "cloud-calls.log")


def cli_calls() -> list[str]:
    """Cloud CLI calls recorded by the stand-ins since the session started."""
    log = os.environ.get(LOG_VAR)
    if not log or not Path(log).exists():
        return []
    return [line for line in Path(log).read_text().splitlines() if line.strip()]


_root: Path | None = None


def pytest_configure(config) -> None:
    import tempfile

    global _root
    _root = Path(tempfile.mkdtemp(prefix="burst-cloud-guard-"))
    scrub_environment(_root)


def pytest_unconfigure(config) -> None:
    import shutil

    if _root is not None:
        shutil.rmtree(_root, ignore_errors=True)


@pytest.fixture(autouse=True)
def cloud_guard(monkeypatch):
    """Fail the test if it ran a cloud CLI or opened a connection beyond loopback."""
    before_cli = len(cli_calls())
    _in_process.clear()
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", _guarded_getaddrinfo)
    yield
    attempts = cli_calls()[before_cli:] + list(_in_process)
    _in_process.clear()
    if attempts:
        pytest.fail("this test tried to reach beyond the machine (blocked by the cloud guard): " + "; ".join(attempts[:5]), pytrace=False)
