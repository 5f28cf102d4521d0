"""A member's verb, run by the server as that member: the same ``burst`` command line in a process of
its own, with the member's own state directory on the server (their clusters and runs apart from
everyone else's) and the team's money as the budget it may spend.

The client sends the command's words and the files its options name (a policy, a quality gate);
those files are written under the member's directory and the words point there. Any other path
names a file on the server, which a member may not read: the served command line refuses it
(``burst.cli.served``)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import yaml

from ..errors import BurstError
from ..home.state import OWNER
from ..unattended import run_lock
from . import site_policy
from ..values.served import MONEY_VERBS, SERVED_COMMIT_USD, SERVED_UPLOADS, UPLOAD, option_value, split_option

TAKES_POLICY = ("plan", "up", "run", "tune")  # planned under the site's policy whether or not the member sends one
TAKES_BUDGET = ("train", "run", "tune")
VERB_TIMEOUT_S = 6 * 3600


def home_of(data_dir: Path, uid: str) -> Path:
    path = data_dir / "users" / uid
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def with_uploads(home: Path, args: list[str], files: list[str]) -> tuple[list[str], Path]:
    """The words with every ``@upload:N`` replaced by the path of the N-th file sent, written under the member's directory."""
    uploads = home / "uploads" / f"{int(time.time())}-{secrets.token_hex(4)}"
    uploads.mkdir(parents=True, mode=0o700)
    out = []
    for word in args:
        if word.startswith(UPLOAD):
            index = word[len(UPLOAD):]
            if not index.isdigit() or int(index) >= len(files):
                raise BurstError(f"{word}: no such file was sent with the command")
            path = uploads / f"file-{index}.yaml"
            path.write_text(files[int(index)])
            out.append(str(path))
        else:
            out.append(word)
    return out, uploads


def held_to(verb: str, args: list[str], uploads: Path, left_usd: Optional[float], site: dict, cluster_spent_usd: float = 0.0) -> list[str]:
    """The words under the site's policy (``site``: the admins' document, ``site_policy``), narrowed
    by the member's own where they sent one, with the team's money left as the budget: the
    policy's ``budget_usd`` (the plan drops what costs more, a cluster's guard stops at it) and a
    run's ``--budget`` no higher than what is left (``cluster_spent_usd``: what the run's cluster
    has cost already, which its guard counts too). A member policy that says what only the admins
    may, or one that is not a file they sent, is refused (``BurstError``) before anything runs."""
    out = list(args)
    given = option_value(out, "--policy")
    if verb in TAKES_POLICY or given is not None:
        member = site_policy.read_member_policy(given, uploads) if given is not None else None
        policy = site_policy.narrowed(site, member)
        if left_usd is not None and verb in MONEY_VERBS:
            budget = policy.get("budget_usd")
            policy["budget_usd"] = round(min(left_usd, budget) if isinstance(budget, (int, float)) else left_usd, 2)
        narrowed = uploads / "policy-of-the-site.yaml"
        narrowed.write_text(yaml.safe_dump(policy, sort_keys=False))
        out = _replace_value(out, "--policy", str(narrowed))
    if left_usd is not None and verb in TAKES_BUDGET:
        given = option_value(out, "--budget")
        cap = left_usd + cluster_spent_usd
        try:
            asked = float(given) if given is not None else None
        except ValueError:
            return out  # not a number: the command line says so
        out = _replace_value(out, "--budget", f"{min(asked, cap) if asked is not None else cap:.2f}")
    return out


def cluster_named(args: list[str]) -> str:
    """The cluster a train or a run uses (``--cluster``; ``local`` by default, as the command line does)."""
    return option_value(args, "--cluster") or option_value(args, "--name") or "local"


def member_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a process the server runs as a member: the server's own without burst's
    settings (its state directory, its database), the member's state directory, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BURST_") or k == run_lock.ENV}
    return {**env, "BURST_HOME": str(home), **extra}  # run_lock.ENV: the controllers it starts hold their runs in the database


def keeps_files(verb: str, args: list[str]) -> bool:
    """Whether a process the verb leaves behind may read the files sent with it later: a managed
    run's controller (its policy, for every move) and a detached run's (its gate, its space)."""
    return verb in ("train", "run", "tune") and any(split_option(word)[0] in ("--managed", "--detach") for word in args)


UPLOADS_KEPT_DAYS = 30  # what a detached or managed run was sent outlives it by this much, then goes at a server's start


def sweep_uploads(data_dir: Path, days: float = UPLOADS_KEPT_DAYS) -> int:
    """Remove every member's uploads older than ``days`` (the server's start); how many went."""
    cutoff = time.time() - days * 86400
    gone = 0
    for folder in data_dir.glob("users/*/uploads/*"):
        try:
            if folder.is_dir() and not folder.is_symlink() and folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
                gone += 1
        except OSError:
            continue
    return gone


#: how a member process past its time is ended: asked as Ctrl-C is (burst tears down what it made),
#: then told to end, then killed; each signal to its whole session, with this long to go
ENDING = ((signal.SIGINT, 30.0), (signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0))


def as_member(home: Path, module_args: list[str], timeout: Optional[float] = None, **extra: str) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` as the member: their environment (``member_env``, with ``extra``),
    in their directory, in a session of its own, nothing read from the server's terminal; its
    output as text. Past ``timeout`` it is ended as ``ENDING`` says and ``subprocess.TimeoutExpired``
    is raised, with what it had written."""
    proc = subprocess.Popen([sys.executable, "-m", *module_args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=member_env(home, **extra), cwd=home, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = end(proc)
        raise subprocess.TimeoutExpired(proc.args, timeout, output=out, stderr=err) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def end(proc: subprocess.Popen) -> tuple[str, str]:
    """End a member process and its session (``ENDING``); what it wrote."""
    for sig, grace in ENDING:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            return proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    return proc.communicate()


def run(home: Path, uploads: Path, verb: str, args: list[str], owner: str, timeout: float = VERB_TIMEOUT_S,
        commit_usd: Optional[float] = None) -> tuple[int, str, str]:
    """Run ``burst VERB ARGS`` as the member (``owner``: their id, in the run ids they make): their
    state directory, their uploads, nothing of the server's; in their directory, where the run
    directories it collects (``burst-runs/``) are theirs, not the server's working directory.
    ``commit_usd``: what the cluster it makes may commit (its lease at its price), reserved for it."""
    extra = {SERVED_UPLOADS: str(uploads), OWNER: owner, **({SERVED_COMMIT_USD: f"{commit_usd:.2f}"} if commit_usd is not None else {})}
    try:
        proc = as_member(home, ["burst.cli", verb, *args], timeout, **extra, NO_COLOR="1", COLUMNS="120")
    except subprocess.TimeoutExpired as late:
        return 1, late.output or "", (late.stderr or "") + f"burst {verb} did not finish in {timeout / 3600:.1f} h on the server and was ended " \
                                                        "(interrupted first, so what it made was taken down)\n"
    finally:
        if not keeps_files(verb, args):  # the verb is over and left nothing that reads them: the member's files go
            shutil.rmtree(uploads, ignore_errors=True)
    return proc.returncode, proc.stdout, proc.stderr


def _replace_value(args: list[str], option: str, value: str) -> list[str]:
    out, skip = [], False
    for i, word in enumerate(args):
        if skip:
            skip = False
            continue
        if word == option:
            skip = True
            continue
        if word.startswith(option + "="):
            continue
        out.append(word)
    return [*out, option, value]
