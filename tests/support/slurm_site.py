"""A real Slurm site on this machine for the tests: munged, slurmctld and slurmd of Debian's
``slurm-wlm`` and ``munge``, with their own key, socket, ports, state and logs in a temp dir.

``start()`` brings one up in seconds (root only: slurmd launches jobs); ``stop()`` cancels every
job of it and stops exactly the three daemons it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from burst.runtime.ray_head import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
HOW_TO_ENABLE = "Slurm tests need Debian's slurm-wlm and munge and root: apt-get install slurm-wlm munge"
# Set by .ci/run once it has installed Slurm, munge and Charliecloud: there a site test that would
# skip is a broken CI machine, and the run fails instead of going green without them.
REQUIRED = "BURST_REQUIRE_SITE_TESTS"


def missing() -> str | None:
    """Why a Slurm site cannot be started here (None: it can)."""
    if any(shutil.which(d) is None for d in DAEMONS) or shutil.which("sbatch") is None:
        return HOW_TO_ENABLE
    if os.geteuid() != 0:
        return f"{HOW_TO_ENABLE} (the tests start slurmd, which must run as root)"
    return None


def needs(*reasons: str | None) -> pytest.MarkDecorator:
    """Skip when a site tool is missing (each reason: why, or None when present); under ``REQUIRED`` fail instead."""
    why = "; ".join(r for r in reasons if r)
    if why and os.environ.get(REQUIRED) == "1":
        pytest.fail(f"{REQUIRED}=1 (the CI machine installed the site tools), yet these tests cannot run: {why}", pytrace=False)
    return pytest.mark.skipif(bool(why), reason=why)


def charliecloud_missing() -> str | None:
    return None if shutil.which("ch-run") else "Charliecloud (ch-run) is not installed: apt-get install charliecloud"


@dataclass
class SlurmSite:
    root: Path
    conf: Path
    host: str
    cpus: int

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def slurm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: {proc.stderr}")
        return proc

    def jobs(self) -> list[str]:
        return self.slurm("squeue", "-h", "-o", "%i|%T|%j").stdout.split()

    def policy(self, path: Path, **extra) -> Path:
        """A policy whose on-prem site is this Slurm cluster (partition ``cpu``)."""
        # max_slowdown: bursting to this laptop, 20x slower than the site, is what these tests exercise
        lines = ["providers: [local, slurm]", "max_slowdown: 1000", "onprem:", "  name: test-site", "  scheduler: slurm", "  partition: cpu",
                 "  accelerator: V100", "  gpus: 1", "  usd_per_gpu_hour: 0.5", "  queue_wait_hours: 2"]
        lines += [f"  {k}: {v}" for k, v in extra.items()]
        lines += ["burst_when:", "  queue_wait_over_hours: 0.5"]
        # a cancelled job's head is gone, not busy: a short loss grace keeps the managed tests short
        # (the 30 s default is for heads under load: benchmarks/head_answers_under_load.py)
        lines += ["recovery:", "  loss_grace_seconds: 5"]
        path.write_text("\n".join(lines) + "\n")
        return path


def start() -> SlurmSite:
    root = Path(tempfile.mkdtemp(prefix="burst-slurm-", dir="/tmp"))  # short: the munge socket path has a length limit
    for d in ("munge", "state", "spool", "log"):
        (root / d).mkdir(mode=0o700)
    key = root / "munge" / "key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname()
    cpus = os.cpu_count() or 1
    import psutil

    memory_mb = int(psutil.virtual_memory().total / 2**20 * 0.8)
    conf = root / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=burst-test", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={root}/munge/sock",
        "SlurmUser=root", "SlurmdUser=root", f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory", "SchedulerType=sched/backfill", "ReturnToService=2", "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "KillWait=5", "MinJobAge=600", "SchedulerParameters=sched_interval=2",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName=cpu Nodes={host} Default=YES MaxTime=INFINITE State=UP",
    ]) + "\n")
    subprocess.run(["munged", "-f", f"--socket={root}/munge/sock", f"--key-file={key}", f"--log-file={root}/log/munged.log",
                    f"--pid-file={root}/munge/pid", f"--seed-file={root}/munge/seed"], check=True, timeout=30)
    site = SlurmSite(root, conf, host, cpus)
    for daemon in ("slurmctld", "slurmd"):
        subprocess.run([daemon, "-f", str(conf)], check=True, timeout=30, env=site.env)
    deadline = time.time() + 30
    while True:
        proc = site.slurm("sinfo", "-h", "-o", "%T", check=False)
        if proc.returncode == 0 and proc.stdout.strip() == "idle":
            return site
        if time.time() > deadline:
            stop(site)
            raise RuntimeError(f"the test Slurm site did not come up: {proc.stdout}{proc.stderr}")
        time.sleep(0.5)


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def stop(site: SlurmSite) -> None:
    site.slurm("scancel", "--full", "-u", "root", check=False)
    deadline = time.time() + 60
    while site.jobs() and time.time() < deadline:
        time.sleep(0.5)
    for pid_file in (site.root / "slurmd.pid", site.root / "slurmctld.pid", site.root / "munge" / "pid"):
        pid = _pid(pid_file)
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(site.root, ignore_errors=True)
