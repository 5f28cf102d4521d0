"""The Slurm target: burst's Ray cluster inside one batch allocation on the site's own nodes.

``up`` submits one job with ``sbatch`` (never an interactive ``salloc``); the job starts Ray on
its nodes (``slurm_job.py``) and writes where the head is into the cluster directory, which
must be on storage this machine and the nodes share (the state directory normally is: a home
directory). ``down`` cancels exactly that job and verifies that none of its processes are left.
The plan asks the same scheduler how long a job of each size would wait (``sbatch --test-only``).

With ``--bundle`` (a ``burst pack`` bundle on shared storage) the nodes install burst from it and
run that installation; with the policy's ``onprem.container`` the job runs inside a Charliecloud
image with ``ch-run``. Slurm commands run here, or on the policy's ``login`` host through ssh. The head is reached
directly when it runs on this machine, else through an ssh port forward (``-J login``) to the
head node's loopback, where its dashboard listens.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from ..home import state
from ..errors import BurstError
from ..home.state import ClusterHandle
from ..runtime import ray_head
from ..client.jobs import JobRuntime
from . import slurm_job
from .base import QUIET, Lease, QueueWait, Reporter, Target
from .tunnel import tunnel

if TYPE_CHECKING:
    from ..values.placement import Placement
    from ..values.site import OnPrem

COMMAND_TIMEOUT_S = 15.0
HEAD_TIMEOUT_S = 120.0      # from the job running to its Ray head answering
CANCEL_TIMEOUT_S = 90.0     # Slurm's KillWait (30 s by default) and a margin
PENDING_GRACE_S = 10.0      # a free partition starts a job within the scheduler's next pass
NOTICE_MARGIN_S = 5         # of the notice period: left for stopping Ray once the workers have checkpointed
DEFAULT_WALLTIME_H = 24.0
START_AT = re.compile(r"to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")
WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED")


@dataclass(frozen=True)
class JobState:
    state: str            # PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, ..., UNKNOWN
    reason: str = ""      # why pending, or how it ended ("CANCELLED by 0", ...)
    start: str = ""       # expected start of a pending job

    @property
    def ended(self) -> bool:
        return self.state not in WAITING and self.state != "RUNNING"


def run_slurm(site: "OnPrem", args: list[str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    """One Slurm command, here or on the login host; one line when the tools or the controller are missing."""
    command = ["ssh", "-o", "BatchMode=yes", site.login, shlex.join(args)] if site.login else args
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise BurstError(f"no Slurm tools here: `{command[0]}` is not on PATH; install the Slurm client commands, "
                         "or set onprem.login in the policy to a login node that has them") from None
    except subprocess.TimeoutExpired:
        raise BurstError(f"the Slurm controller does not answer (`{args[0]}` gave no answer within {timeout:.0f} s); "
                         "check that slurmctld is up (`sinfo`)", exit_code=1) from None


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in (proc.stderr or proc.stdout or "").splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"


def _walltime(hours: float) -> str:
    minutes = max(1, math.ceil(hours * 60))
    return f"{minutes // 60}:{minutes % 60:02d}:00"


def _this_host(host: str) -> bool:
    return host in (socket.gethostname(), socket.getfqdn(), "localhost")


CONTAINER_PYTHON = "/opt/burst/venv/bin/python"  # where docker/Dockerfile.charliecloud installs the bundle


def job_script(name: str, cdir: Path, cluster_id: str, storage: str, bundle: Optional[str], container: Optional[str],
               notice_s: int = 120, idle_minutes: Optional[float] = None) -> tuple[str, str]:
    """The batch script, and the Python the cluster's jobs run.

    Plain: this machine's Python (the nodes share its installation). ``bundle``: the nodes install
    burst from the bundle into BUNDLE/venv the first time (under flock: several jobs may start
    together) and run that. ``container``: the job runs inside the Charliecloud image directory with
    ``ch-run``, binding the cluster directory and a path storage at the same paths. On SIGTERM the
    job posts a notice on ``storage`` and gives the workers up to ``notice_s`` less a margin to
    checkpoint before it stops Ray. ``idle_minutes``: the keeper inside the allocation cancels the
    job after that long with no job on it.
    """
    from ..pack import bundle_python, install_command

    lines = ["#!/bin/bash", f"# burst cluster {name}: Ray inside this allocation", "set -e"]
    args = f"-m burst.targets.slurm_job {shlex.quote(str(cdir))} {cluster_id} {shlex.quote(storage)} {max(5, notice_s - NOTICE_MARGIN_S)}"
    if idle_minutes is not None:
        args += f" {idle_minutes:g}"
    if container:
        binds = [str(cdir)] + ([storage] if "://" not in storage and not Path(storage).is_relative_to(cdir) else [])
        for path in binds:  # ch-run binds onto existing directories of the image
            try:
                (Path(container) / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BurstError(f"cannot make the mount point {path} in the Charliecloud image {container} ({exc.strerror}); "
                                 f"create it there (mkdir -p {container}{path}) or give a writable image directory") from None
        bind_args = " ".join(f"-b {shlex.quote(p)}" for p in binds)
        lines.append('export USER="${USER:-$(id -un)}"')  # ch-run refuses to start without it
        lines.append(f"exec ch-run {bind_args} {shlex.quote(container)} -- {CONTAINER_PYTHON} {args}")
        return "\n".join(lines) + "\n", CONTAINER_PYTHON
    python = sys.executable
    if bundle:
        lines.append(install_command(Path(bundle)).rstrip())
        python = bundle_python(bundle)
    lines.append(f"exec {shlex.quote(python)} {args}")
    return "\n".join(lines) + "\n", python


class SlurmTarget(Target):
    provider = "slurm"
    kind = "onprem"
    is_scheduler = True
    takes_bundle = True
    default_cluster_name = "slurm"

    def __init__(self):
        self._waits: dict[tuple, QueueWait] = {}

    def serves(self, site) -> bool:
        return site.scheduler == "slurm"

    def job_runtime(self, handle: ClusterHandle) -> JobRuntime:
        """The Python the allocation runs: this machine's, the bundle's venv, or the container's. An
        allocation ends by Slurm's signals (its notice), never by Ray draining a node."""
        return JobRuntime(python=handle.outputs.get("python") or sys.executable, nodes_drain=False)

    # ------------------------------------------------------------------ asking Slurm

    def _site(self, handle: ClusterHandle) -> "OnPrem":
        from ..values.site import OnPrem

        return OnPrem.model_validate(handle.outputs["site"])

    def partition(self, site: "OnPrem") -> dict:
        """The partition burst submits to: name, nodes and CPUs per node (the default one when the policy names none)."""
        proc = run_slurm(site, ["sinfo", "-h", "-o", "%P|%D|%c|%a"])
        if proc.returncode != 0:
            raise BurstError(f"the Slurm controller does not answer: {_last_line(proc)}", exit_code=1)
        rows = [line.split("|") for line in proc.stdout.splitlines() if line.count("|") == 3]
        names = [r[0].rstrip("*") for r in rows]
        wanted = site.partition or next((r[0].rstrip("*") for r in rows if r[0].endswith("*")), None)
        if wanted is None or wanted not in names:
            raise BurstError(f"partition {wanted!r} does not exist on this Slurm cluster (partitions: {', '.join(names) or 'none'}); "
                             "fix onprem.partition or --partition")
        row = rows[names.index(wanted)]
        return {"name": wanted, "nodes": int(row[1]), "cpus_per_node": int(row[2].rstrip("+")), "up": row[3] == "up"}

    def job_state(self, site: "OnPrem", job_id: str) -> JobState:
        proc = run_slurm(site, ["squeue", "-h", "-j", job_id, "-o", "%T|%r|%S"])
        line = proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else ""
        if line:
            st, reason, start = (line.split("|") + ["", ""])[:3]
            if st != "COMPLETING":  # ending: how it ends is the controller's to say
                return JobState(st, reason if reason not in ("None", "(null)") else "", start if start not in ("N/A", "Unknown") else "")
        return self._final_state(site, job_id)

    def _final_state(self, site: "OnPrem", job_id: str) -> JobState:
        """How a job that left the queue ended (waiting out its COMPLETING phase, Slurm's KillWait)."""
        deadline = time.time() + CANCEL_TIMEOUT_S
        while True:
            found = self._ended_as(site, job_id)
            if found.state != "COMPLETING" or time.time() > deadline:
                return found
            time.sleep(0.5)

    def _ended_as(self, site: "OnPrem", job_id: str) -> JobState:
        """How a job ended: from accounting, else from the controller's memory of it."""
        proc = run_slurm(site, ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"])
        if proc.returncode == 0 and proc.stdout.strip():
            how = proc.stdout.strip().splitlines()[0]
            return JobState(how.split()[0], how)
        proc = run_slurm(site, ["scontrol", "show", "job", job_id, "-o"])
        if proc.returncode == 0 and "JobState=" in proc.stdout:
            fields = dict(f.split("=", 1) for f in proc.stdout.split() if "=" in f)
            st = fields.get("JobState", "UNKNOWN")
            reason = fields.get("Reason", "")
            return JobState(st, (f"{reason}, " if reason and reason != "None" else "") + f"exit code {fields.get('ExitCode', '?')}")
        return JobState("UNKNOWN", "Slurm no longer knows the job")

    def queue_estimate(self, site, nodes: int, hours: float) -> QueueWait:
        """``sbatch --test-only`` with the real request: when Slurm would start it (one ask per size)."""
        key = (site.login, site.partition, site.account, site.qos, nodes)  # one ask per request size
        if key not in self._waits:
            self._waits[key] = self._ask_wait(site, nodes, hours)
        return self._waits[key]

    def _ask_wait(self, site, nodes: int, hours: float) -> QueueWait:
        """Slurm words the start in the local time of the host that runs ``sbatch`` (its ``TZ``): the
        same host says what time it is there, in the same breath, so the wait is one clock's difference
        (this machine's zone, or a laptop's clock off by minutes, plays no part)."""
        test = shlex.join(["sbatch", "--test-only", *self._request(site, nodes, hours), "--wrap", "true"])
        try:
            proc = run_slurm(site, ["sh", "-c", f"date +%Y-%m-%dT%H:%M:%S; exec {test}"], timeout=5.0)
        except BurstError as exc:
            return QueueWait(None, f"Slurm not asked: {exc}")
        found = START_AT.search(proc.stderr + proc.stdout)
        if proc.returncode != 0 or not found:
            return QueueWait(None, f"Slurm would not take the job: {_last_line(proc)}")
        start = datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S")
        there = re.match(r"\s*(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", proc.stdout or "")
        now = datetime.strptime(there.group(1), "%Y-%m-%dT%H:%M:%S") if there else datetime.now()
        return QueueWait(max(0.0, (start - now).total_seconds() / 3600))

    @staticmethod
    def _request(site, nodes: int, hours: float) -> list[str]:
        # --no-requeue: a node failure ends the allocation (NODE_FAIL), which burst's controller moves from at
        # once; a requeued job is a new Ray head nobody follows, judged only after the blind grace (sbatch(1))
        args = [f"--nodes={nodes}", "--ntasks-per-node=1", "--exclusive", f"--time={_walltime(hours)}", "--no-requeue"]
        if hours * 3600 > 2 * site.notice_seconds:  # the batch script alone is told, this long before the walltime
            args.append(f"--signal=B:TERM@{site.notice_seconds}")
        if site.partition:
            args.append(f"--partition={site.partition}")
        if site.account:
            args.append(f"--account={site.account}")
        if site.qos:
            args.append(f"--qos={site.qos}")
        if site.gpus_per_node:
            args.append(f"--gpus-per-node={site.gpus_per_node}")
        return args

    # ------------------------------------------------------------------ lifecycle

    def check_site(self, site: "OnPrem") -> dict:
        """The tools are there, the controller answers, the partition exists: its facts."""
        return self.partition(site)

    def up(self, name: str, placement: "Placement", lease: Lease, report: Reporter = QUIET) -> tuple[ClusterHandle, bool]:
        site = placement.site
        existing = state.load(ClusterHandle, name)
        if existing is not None:
            return self._existing(existing, lease, report), False
        part = self.check_site(site)
        site = site.model_copy(update={"partition": part["name"]})
        nodes = placement.nodes or 1
        if nodes > part["nodes"]:
            raise BurstError(f"{nodes} nodes is more than partition {part['name']} has ({part['nodes']}); ask for fewer with --nodes")
        hours = lease.hours or DEFAULT_WALLTIME_H
        cluster_id = uuid.uuid4().hex[:12]
        cdir = state.cluster_dir(name)
        storage = site.storage or str(cdir / "storage")
        script = cdir / "job.sh"
        body, python = job_script(name, cdir, cluster_id, storage, placement.bundle, site.container, site.notice_seconds,
                                  lease.idle_minutes)
        handle = ClusterHandle(name=name, provider=self.provider, cluster_id=cluster_id, state="starting", expires=time.time() + hours * 3600,
                               token_path=str(cdir / "auth_token"), storage_uri=storage,
                               layout={"nodes": nodes, "cpus": nodes * part["cpus_per_node"], "gpus": nodes * site.gpus_per_node,
                                       "accelerator": placement.accelerator, "description": f"{nodes} node(s) of partition {part['name']}"},
                               accelerator=placement.accelerator, hourly_usd=placement.hourly_usd,
                               region=site.name, starter_pid=os.getpid(), idle_minutes=lease.idle_minutes,
                               outputs={"site": site.model_dump(mode="json"), "cluster_dir": str(cdir), "python": python})
        args = ["sbatch", "--parsable", f"--job-name=burst-{name}", *self._request(site, nodes, hours),
                f"--output={cdir}/slurm-%j.out", f"--chdir={cdir}", str(script)]
        # Claimed before sbatch, in one locked step with the check: `burst down` can always find what
        # was submitted, and a second `up` of this name finds this one instead of submitting again.
        existing = state.claim(handle)
        if existing is not None:
            return self._existing(existing, lease, report), False
        (cdir / "head.json").unlink(missing_ok=True)  # the name is ours: its directory may be rewritten
        ray_head.new_token(cdir / "auth_token")
        script.write_text(body)
        script.chmod(0o700)
        try:
            proc = run_slurm(site, args)
        except BurstError:
            self._forget(handle)
            raise
        if proc.returncode != 0:
            self._forget(handle)
            raise BurstError(f"Slurm refused the job: {_last_line(proc)}; nothing was submitted")
        handle.outputs["job_id"] = proc.stdout.strip().split(";")[0]
        with state.locked():
            state.save(handle)
        report.say(f"Slurm job {handle.outputs['job_id']} submitted to partition {part['name']} ({nodes} node(s), walltime {_walltime(hours)})")
        try:
            return self._wait_for_head(handle, lease.wait, report), True
        except KeyboardInterrupt:
            report.say(f"interrupted: Slurm job {handle.outputs['job_id']} stays in the queue; `burst up --provider slurm --name {name} "
                       f"--wait` waits for it again, `burst down {name}` cancels it")
            raise

    def _existing(self, existing: ClusterHandle, lease: Lease, report: Reporter) -> ClusterHandle:
        """``up`` of a name already recorded: wait for its job like the first ``up`` would, unless that
        ``up`` is still submitting it."""
        if existing.provider != self.provider:
            raise BurstError(f"cluster {existing.name!r} is a {existing.provider} cluster; pick another --name")
        if not existing.outputs.get("job_id"):
            if state.starter_alive(existing):
                raise BurstError(f"cluster {existing.name!r} is being submitted by PID {existing.starter_pid}; wait for it "
                                 f"(`burst status`), then run `burst up` again", exit_code=1)
            raise BurstError(f"cluster {existing.name!r} is recorded without a Slurm job (its `burst up` was stopped while submitting); "
                             f"run `burst down {existing.name}` first")
        return self._wait_for_head(existing, lease.wait, report)

    def _wait_for_head(self, handle: ClusterHandle, wait: bool, report: Reporter) -> ClusterHandle:
        """Until the head answers; or, for a queued job without ``wait``, say so and return."""
        site, job_id = self._site(handle), handle.outputs.get("job_id")
        head_file = Path(handle.outputs["cluster_dir"]) / "head.json"
        running_since = None
        said_pending = False
        asked = time.time()
        while True:
            js = self.job_state(site, job_id)
            if js.state in WAITING:
                if not wait and time.time() - asked > PENDING_GRACE_S:
                    report.say(f"Slurm job {job_id} is pending ({js.reason or 'queued'}); expected start {js.start or 'unknown'}; "
                               f"`burst up --provider slurm --name {handle.name} --wait` waits for it")
                    return handle
                if wait and not said_pending:
                    report.say(f"waiting for Slurm job {job_id} ({js.reason or 'queued'}; expected start {js.start or 'unknown'})")
                    said_pending = True
            elif js.ended:
                detail = self._job_output(handle)
                self._cancel_and_forget(handle)
                raise BurstError(f"Slurm job {job_id} ended ({js.reason or js.state}) before Ray answered"
                                 + (f": {detail}" if detail else "") + "; nothing was left", exit_code=1)
            else:
                running_since = running_since or time.time()
                head = self._head(handle, head_file)
                if head is not None and ray_head.is_alive(handle):
                    with state.locked():
                        handle.state = "running"
                        state.save(handle)
                    return handle
                if time.time() - running_since > HEAD_TIMEOUT_S:
                    self._cancel_and_forget(handle)
                    raise BurstError(f"the Ray head of Slurm job {job_id} did not answer within {HEAD_TIMEOUT_S:.0f} s; "
                                     "the job was cancelled", exit_code=1)
            time.sleep(1.0)

    def _head(self, handle: ClusterHandle, head_file: Path) -> Optional[dict]:
        """Where the job's head is (its ``head.json``), recorded in the handle; None until it is written."""
        try:
            head = json.loads(head_file.read_text())
        except (OSError, ValueError):
            return None
        if str(head.get("job_id")) != str(handle.outputs.get("job_id")):
            return None  # left by an earlier allocation
        handle.temp_dir = head["temp_dir"]
        handle.outputs.update(head_host=head["host"], dashboard_port=head["dashboard_port"])
        handle.layout.update(nodes=head["nodes"], cpus=head["cpus"], gpus=head["gpus"])
        handle.gcs_address = f"{head['node_ip']}:{head['gcs_port']}"
        handle.dashboard_url = f"http://127.0.0.1:{head['dashboard_port']}" if _this_host(head["host"]) else None
        return head

    def _job_output(self, handle: ClusterHandle) -> str:
        out = Path(handle.outputs["cluster_dir"]) / f"slurm-{handle.outputs.get('job_id')}.out"
        try:
            lines = [line.strip() for line in out.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""

    def _cancel_and_forget(self, handle: ClusterHandle) -> None:
        self._cancel(handle)
        self._forget(handle)

    def _cancel(self, handle: ClusterHandle) -> None:
        """scancel the job and wait until Slurm no longer runs it; then no process of it may be left here."""
        site, job_id = self._site(handle), handle.outputs.get("job_id")
        if job_id:
            proc = run_slurm(site, ["scancel", job_id])
            if proc.returncode != 0 and "Invalid job id" not in _last_line(proc):
                raise BurstError(f"scancel {job_id} failed: {_last_line(proc)}", exit_code=1)
            deadline = time.time() + CANCEL_TIMEOUT_S
            while not self.job_state(site, job_id).ended:
                if time.time() > deadline:
                    raise BurstError(f"Slurm job {job_id} did not end within {CANCEL_TIMEOUT_S:.0f} s of scancel; "
                                     f"check `squeue -j {job_id}` and run `burst down {handle.name}` again", exit_code=1)
                time.sleep(0.5)
        survivors = ray_head.stop_processes(handle.cluster_id, handle.temp_dir)  # this machine's share, if any
        if survivors:
            raise BurstError(f"cluster {handle.name!r}: processes {survivors} of Slurm job {job_id} did not stop; kill them and "
                             f"run `burst down {handle.name}` again", exit_code=1)
        if handle.temp_dir:  # the head's Ray directory, when the head ran here: the job removes it itself unless
            shutil.rmtree(handle.temp_dir, ignore_errors=True)  # Slurm's SIGKILL (after KillWait) came first
            slurm_job.lock_beside(handle.temp_dir).unlink(missing_ok=True)  # and the lock the job held beside it

    def _forget(self, handle: ClusterHandle) -> None:
        with state.locked():
            state.delete(ClusterHandle, handle.name)
        cdir = Path(handle.outputs.get("cluster_dir", ""))
        for leftover in ("head.json", "auth_token", "job.sh"):
            (cdir / leftover).unlink(missing_ok=True)

    def down(self, handle: ClusterHandle, report: Reporter = QUIET) -> None:
        with state.locked():
            handle.state = "stopping"
            state.save(handle)
        self._cancel(handle)
        self._forget(handle)

    def is_alive(self, handle: ClusterHandle, timeout: float = 2.0) -> bool:
        if handle.state != "running" or not handle.outputs.get("job_id"):
            return False
        if self.job_state(self._site(handle), handle.outputs["job_id"]).state != "RUNNING":
            return False
        return ray_head.is_alive(handle, timeout) if handle.dashboard_url else True

    def is_gone(self, handle: ClusterHandle) -> bool:
        """The scheduler says the cluster's job has ended, or waits in the queue again after it ran
        (requeued: a new allocation would be a new Ray head); a failed ``squeue``, a login host that
        does not answer: not known."""
        if not handle.outputs.get("job_id"):
            return False
        try:
            js = self.job_state(self._site(handle), handle.outputs["job_id"])
        except (BurstError, subprocess.TimeoutExpired, OSError):
            return False
        return (js.ended and js.state != "UNKNOWN") or (handle.state == "running" and js.state in WAITING)

    def answers_here(self, handle: ClusterHandle) -> bool:
        return bool(handle.dashboard_url)

    def stopped_reason(self, handle: ClusterHandle) -> str:
        js = self.job_state(self._site(handle), handle.outputs.get("job_id", ""))
        requeued = " again after it ran (requeued)" if handle.state == "running" and js.state in WAITING else ""
        return f"Slurm job {handle.outputs.get('job_id')} {js.state}{requeued}" + (f": {js.reason}" if js.reason and js.reason != js.state else "")

    def not_ready(self, handle: ClusterHandle) -> str:
        js = self.job_state(self._site(handle), handle.outputs.get("job_id", ""))
        if js.state in WAITING:
            return (f"Slurm job {handle.outputs.get('job_id')} of cluster {handle.name!r} is pending ({js.reason or 'queued'}; expected "
                    f"start {js.start or 'unknown'}); `burst up --provider slurm --name {handle.name} --wait` waits for it")
        if js.ended:
            how = js.state + (f" ({js.reason})" if js.reason and not js.reason.startswith(js.state) else f" ({js.reason[len(js.state):].strip()})" if js.reason[len(js.state):].strip() else "")
            return (f"Slurm job {handle.outputs.get('job_id')} of cluster {handle.name!r} has ended: {how}; "
                    f"run `burst down {handle.name}`, `burst up` for a new allocation, and `burst train --resume RUN` to go on")
        return super().not_ready(handle)

    def describe_state(self, handle: ClusterHandle) -> str:
        js = self.job_state(self._site(handle), handle.outputs.get("job_id", ""))
        if js.state == "RUNNING":
            return "running" if handle.state == "running" else "starting"
        return js.state.lower() + (f" ({js.reason})" if js.reason and js.reason != js.state else "")

    @contextmanager
    def reach(self, handle: ClusterHandle) -> Iterator[ClusterHandle]:
        if handle.dashboard_url:
            yield handle
            return
        site, host = self._site(handle), handle.outputs["head_host"]
        command = lambda local_port: self._ssh_forward(handle, local_port, int(handle.outputs["dashboard_port"]))  # noqa: E731
        with tunnel(command, handle.name, f"check that ssh reaches {host}" + (f" through {site.login}" if site.login else "")) as url:
            yield handle.model_copy(update={"dashboard_url": url})

    def _ssh_forward(self, handle: ClusterHandle, local_port: int, remote_port: int) -> list[str]:
        site = self._site(handle)
        jump = ["-J", site.login] if site.login else []
        return ["ssh", "-N", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", *jump, "-L", f"{local_port}:127.0.0.1:{remote_port}",
                handle.outputs["head_host"]]

    def forward_command(self, handle: ClusterHandle, local_port: int, remote_port: int, workdir: Path) -> Optional[list[str]]:
        return None if handle.dashboard_url else self._ssh_forward(handle, local_port, remote_port)
