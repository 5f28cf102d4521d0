"""Real storage servers on this machine for the tests: PyPI's ``gcp-storage-emulator`` serves
``gs://`` (Google's JSON API, resumable uploads) and Azurite's blob service from npm serves
``abfs://``, each on a free loopback port, in memory, telemetry off.

burst reaches them the way the clouds' own SDKs reach an emulator (``burst.runtime.storage``):
``STORAGE_EMULATOR_HOST`` for Google, a connection string with a ``BlobEndpoint`` for Azure. The
fixtures ``gcs_store`` and ``azure_store`` set those for the test (and for every Ray cluster and job
it starts) and hand it an empty bucket of its own. A test skips with one line where a server is
missing; under ``BURST_REQUIRE_SITE_TESTS=1`` (CI, which installs both) it fails instead.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from burst.runtime.ray_head import free_port
from tests.support.slurm_site import needs

GCS_HOW = "the gs:// store tests need PyPI's gcp-storage-emulator: pip install -e '.[dev]'"
AZURITE_HOW = ("the abfs:// store tests need Azurite's blob service (npm install azurite; "
               "BURST_AZURITE names its azurite-blob when it is not on PATH)")
# Azurite's one account and its published key (https://learn.microsoft.com/azure/storage/common/storage-use-azurite)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def gcs_emulator() -> str | None:
    found = Path(sys.executable).with_name("gcp-storage-emulator")
    return str(found) if found.exists() else shutil.which("gcp-storage-emulator")


def azurite() -> str | None:
    named = os.environ.get("BURST_AZURITE")
    return named if named and Path(named).exists() else shutil.which("azurite-blob")


def gcs_missing() -> str | None:
    return None if gcs_emulator() else GCS_HOW


def azurite_missing() -> str | None:
    return None if azurite() else AZURITE_HOW


def needs_stores() -> pytest.MarkDecorator:
    return needs(gcs_missing(), azurite_missing())


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log: Path
    env: dict[str, str]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _wait_listening(proc: subprocess.Popen, port: int, log: Path, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the storage server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the storage server did not listen on 127.0.0.1:{port} within {timeout:.0f} s: {log.read_text()[-2000:]}")


def start_gcs(root: Path) -> Server:
    port, log = free_port(), root / "gcs-emulator.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([gcs_emulator(), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "--quiet"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    _wait_listening(proc, port, log)
    return Server(proc, port, log, {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}"})


def start_azurite(root: Path) -> Server:
    port, log = free_port(), root / "azurite.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([azurite(), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                                 "--extentMemoryLimit", "512", "--disableTelemetry", "--skipApiVersionCheck"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=root)
    _wait_listening(proc, port, log)
    conn = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT}")
    return Server(proc, port, log, {"AZURE_STORAGE_CONNECTION_STRING": conn})


def new_bucket(scheme: str, env: dict[str, str]) -> str:
    """A fresh, empty bucket (GCS, made through its JSON API) or container (Azure) on the emulator; its URI."""
    name = f"burst-{uuid.uuid4().hex[:10]}"
    if scheme == "gs":
        request = urllib.request.Request(f"{env['STORAGE_EMULATOR_HOST']}/storage/v1/b?project=burst-tests", method="POST",
                                         data=json.dumps({"name": name}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10):
            pass
        return f"gs://{name}"
    from burst.runtime import storage

    uri = f"abfs://{name}@{AZURITE_ACCOUNT}.dfs.core.windows.net"
    azure, inner = storage.filesystem(uri + "/x")  # the fixture has set the connection string: burst's own way to Azurite
    azure.create_dir(inner.split("/", 1)[0])
    return uri


def _serve(missing, start, tmp_path_factory, name: str):
    """A session's server of one kind: skipped (or, in CI, failed) with one line when it is missing."""
    needs(missing())
    if missing():
        pytest.skip(missing())
    server = start(tmp_path_factory.mktemp(name))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    yield from _serve(gcs_missing, start_gcs, tmp_path_factory, "gcs")


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory):
    yield from _serve(azurite_missing, start_azurite, tmp_path_factory, "azurite")


@pytest.fixture
def gcs_store(gcs_server, monkeypatch) -> str:
    """An empty ``gs://`` bucket on the emulator, which burst and its Ray jobs reach for this test."""
    for k, v in gcs_server.env.items():
        monkeypatch.setenv(k, v)
    return new_bucket("gs", gcs_server.env)


@pytest.fixture
def azure_store(azurite_server, monkeypatch) -> str:
    """An empty ``abfs://`` container on Azurite, which burst and its Ray jobs reach for this test."""
    for k, v in azurite_server.env.items():
        monkeypatch.setenv(k, v)
    return new_bucket("abfs", azurite_server.env)
