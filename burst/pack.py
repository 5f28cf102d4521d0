"""``burst pack``: everything a site without internet needs to install and run burst, as files.

Run on a connected machine. The bundle holds burst's own wheel and a wheelhouse of every
dependency, resolved by pip's own resolver (``pip download``) for the target Python and platform,
a lock file pinning each to its exact version and SHA-256 (installed with ``--require-hashes``),
the policies, a ``SHA256SUMS`` of every file, and ``install.sh``, which checks every file against
``SHA256SUMS`` (naming the first that does not match), creates a venv and installs with
``--no-index`` from the bundle alone. Optionally, synthetic Monte Carlo in the CERN format, so a
site can smoke-test without moving data.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from . import __version__
from .errors import BurstError

SOURCE_ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("gcp", "azure")
INSTALL_SH = r"""#!/bin/sh
# Install burst from this bundle alone: no index, no network, every file checked first.
#   ./install.sh [VENV]        (default: ./venv next to this script)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:-$here/venv}
cd "$here"
while read -r sum path; do
  if [ ! -f "$path" ] || [ "$(sha256sum "$path" | cut -d' ' -f1)" != "$sum" ]; then
    echo "install.sh: $path does not match SHA256SUMS (changed, truncated or missing): copy the bundle again" >&2
    exit 1
  fi
done < SHA256SUMS
python=${BURST_PYTHON:-python%(python)s}
command -v "$python" >/dev/null 2>&1 || { echo "install.sh: $python not found (this bundle is for Python %(python)s; set BURST_PYTHON)" >&2; exit 1; }
"$python" -m venv "$venv"
# --isolated: ignore the site's pip configuration (indexes, find-links, constraints)
"$venv/bin/python" -m pip --isolated install --quiet --no-index --find-links "$here/wheels" --require-hashes -r "$here/requirements.lock"
echo "burst $("$venv/bin/burst" --version) installed in $venv"
"""


@dataclass(frozen=True)
class Bundle:
    path: Path
    files: int
    bytes: int
    wheels: int
    seconds: float

    def to_dict(self) -> dict:
        return {"path": str(self.path), "files": self.files, "bytes": self.bytes, "wheels": self.wheels, "seconds": round(self.seconds, 1)}


def _run(args: Sequence[str], what: str, timeout: int = 3600) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        last = next((line for line in reversed((proc.stderr or proc.stdout).splitlines()) if line.strip()), "no output")
        raise BurstError(f"burst pack: {what} failed: {last.strip()[:300]}", exit_code=1)
    return proc


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def _requirement(wheel: Path) -> tuple[str, str]:
    m = _WHEEL.match(wheel.name)
    if m is None:
        raise BurstError(f"burst pack: {wheel.name} is not a wheel file name pip would accept", exit_code=1)
    return m["name"].replace("_", "-").lower(), m["version"]


def target_flags(python: Optional[str], platform_tag: Optional[str]) -> list[str]:
    """pip's flags for a bundle built for another Python or platform than the running one."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    flags = []
    if python and python != running:
        flags += ["--python-version", python, "--implementation", "cp", "--abi", f"cp{python.replace('.', '')}"]
    if platform_tag:
        flags += ["--platform", platform_tag]
    if flags:
        flags.append("--only-binary=:all:")  # pip can only pick wheels for a foreign interpreter
    return flags


def pack(out: Path, python: Optional[str] = None, platform_tag: Optional[str] = None, extras: Sequence[str] = (),
         synthetic_events: int = 0, say=lambda line: None, workload: Optional[str] = None) -> Bundle:
    """Build the bundle in ``out`` (which must not exist or be empty); ``synthetic_events`` of
    ``workload``'s synthetic Monte Carlo (default: the default workload's) go into ``data/``."""
    from . import workloads

    started = time.perf_counter()
    source = workloads.get(workload or workloads.DEFAULT)
    unknown = [e for e in extras if e not in EXTRAS]
    if unknown:
        raise BurstError(f"burst pack: unknown extra {', '.join(unknown)}; choose from {', '.join(EXTRAS)}")
    if python and not re.fullmatch(r"3\.\d{1,2}", python):
        raise BurstError(f"burst pack: --python wants a version like 3.11, got {python!r}")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise BurstError(f"burst pack: {out} is not empty; give a new directory with --out")
    if not (SOURCE_ROOT / "pyproject.toml").exists():
        raise BurstError("burst pack builds burst's wheel from its source tree, which is not next to this installation")
    wheels = out / "wheels"
    wheels.mkdir(parents=True)
    try:
        say("building burst's wheel")
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(SOURCE_ROOT)], "building burst's wheel")
        (own,) = wheels.glob("burst-*.whl")
        say("resolving and downloading every dependency (pip's resolver)")
        spec = f"{own}[{','.join(extras)}]" if extras else str(own)
        _run([sys.executable, "-m", "pip", "download", "--quiet", "-d", str(wheels), *target_flags(python, platform_tag), spec],
             "pip download")
        sdists = [p.name for p in wheels.iterdir() if not p.name.endswith(".whl")]
        if sdists:
            raise BurstError(f"burst pack: {', '.join(sdists)} came as source, which an offline site may not be able to build; "
                             "give --platform so that pip takes wheels only", exit_code=1)
        lock = []
        for wheel in sorted(wheels.glob("*.whl")):
            name, version = _requirement(wheel)
            lock.append(f"{name}=={version} --hash=sha256:{sha256(wheel)}")
        (out / "requirements.lock").write_text("# exact versions and hashes, resolved by pip for this bundle\n" + "\n".join(lock) + "\n")
        shutil.copytree(SOURCE_ROOT / "policies", out / "policies")
        if synthetic_events:
            say(f"generating {synthetic_events} synthetic Monte Carlo events")
            _run(source.synthetic_command(out / "data", synthetic_events), "generating synthetic data")
        target_python = python or f"{sys.version_info.major}.{sys.version_info.minor}"
        (out / "install.sh").write_text(INSTALL_SH % {"python": target_python})
        (out / "install.sh").chmod(0o755)
        (out / "bundle.json").write_text(json.dumps({
            "burst": __version__, "python": target_python, "platform": platform_tag or f"{platform.system().lower()}_{platform.machine()}",
            "extras": list(extras), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "wheels": len(lock)}, indent=1))
        files = sorted(p for p in out.rglob("*") if p.is_file())
        (out / "SHA256SUMS").write_text("".join(f"{sha256(p)}  {p.relative_to(out)}\n" for p in files))
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # no half-built bundle left to be copied by mistake
        raise
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return Bundle(out, len(files) + 1, size, len(lock), time.perf_counter() - started)


def bundle_python(bundle: str) -> str:
    """The Python a bundle's venv runs (``BUNDLE/venv``), where nodes install it on first use."""
    return str(Path(bundle) / "venv" / "bin" / "python")


def check_bundle(bundle: str) -> Path:
    """A bundle directory as ``burst up --bundle`` needs it (the nodes read it on shared storage)."""
    path = Path(bundle).expanduser().resolve()
    for needed in ("install.sh", "SHA256SUMS", "requirements.lock", "wheels"):
        if not (path / needed).exists():
            raise BurstError(f"--bundle {bundle}: no {needed} there; give a directory made by `burst pack`")
    return path


def install_command(bundle: Path) -> str:
    """A shell line that installs the bundle into BUNDLE/venv once (several jobs may start together)."""
    venv = bundle / "venv"
    once = f"[ -x {shlex.quote(str(venv / 'bin' / 'python'))} ] || {shlex.quote(str(bundle / 'install.sh'))} {shlex.quote(str(venv))}"
    return f"flock {shlex.quote(str(bundle / '.install.lock'))} sh -c {shlex.quote(once)}\n"
