"""The cloud guard itself: it trips on every way out, even when the code under test swallows the error."""

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support import cloud_guard

ROOT = Path(__file__).resolve().parents[1]


def test_environment_holds_no_cloud_credentials_or_settings():
    leaked = [k for k in os.environ if k.startswith(cloud_guard.SCRUBBED_PREFIXES)
              and k not in ("CLOUDSDK_CONFIG", "AZURE_CONFIG_DIR", "PULUMI_HOME", "KUBECONFIG")]
    assert leaked == []
    for var in ("CLOUDSDK_CONFIG", "AZURE_CONFIG_DIR", "PULUMI_HOME"):
        assert list(Path(os.environ[var]).iterdir()) == []  # empty: no gcloud/az login, no Pulumi Cloud token
    assert not Path(os.environ["KUBECONFIG"]).exists()
    import shutil

    for cli in cloud_guard.CLOUD_CLIS:  # a real CLI installed on this machine is shadowed
        assert Path(shutil.which(cli)).parent.name == "bin" and cloud_guard.LOG_VAR in os.environ


@pytest.mark.parametrize("body", [
    # a cloud CLI, its failure swallowed
    "import subprocess\n    subprocess.run(['pulumi', 'up', '--yes', '--stack', 'gke'], capture_output=True)",
    # an SDK-style HTTPS connection, its error swallowed
    "import socket\n    try:\n        socket.create_connection(('storage.googleapis.com', 443), timeout=1)\n    except OSError:\n        pass",
    # a connection by address, beyond loopback
    "import socket\n    s = socket.socket()\n    try:\n        s.connect(('8.8.8.8', 443))\n    except OSError:\n        pass",
])
def test_guard_fails_a_test_that_tried_to_leave_the_machine(pytester, monkeypatch, body):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(f"def test_sneaky():\n    {body}\n")
    result = pytester.runpytest_subprocess("-p", "tests.support.cloud_guard", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)  # its body passed; the guard fails it at teardown
    result.stdout.fnmatch_lines(["*blocked by the cloud guard*"])


def test_guard_lets_loopback_through(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(
        "import socket\n"
        "def test_loopback():\n"
        "    server = socket.socket(); server.bind(('127.0.0.1', 0)); server.listen(1)\n"
        "    socket.create_connection(server.getsockname(), timeout=2).close()\n"
        "    socket.create_connection(('localhost', server.getsockname()[1]), timeout=2).close()\n")
    result = pytester.runpytest_subprocess("-p", "tests.support.cloud_guard", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_guard_blocks_in_this_process_too():
    with pytest.raises(cloud_guard.CloudCallBlocked):
        socket.getaddrinfo("management.azure.com", 443)
    cloud_guard._in_process.clear()  # this test tripped it on purpose
    proc = subprocess.run(["gcloud", "container", "clusters", "list"], capture_output=True, text=True)
    assert proc.returncode == 97 and "cloud guard" in proc.stderr
    # the stand-in's record is what fails a test; drop this deliberate one
    log = Path(os.environ[cloud_guard.LOG_VAR])
    log.write_text("\n".join(line for line in log.read_text().splitlines() if "clusters list" not in line))
