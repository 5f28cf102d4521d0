"""Run a stack program for real through Pulumi's Automation API: up, refresh, destroy-and-verify.

One stack per cluster, inline program, local file backend under the caller's state directory unless
``PULUMI_BACKEND_URL`` says otherwise, passphrase secrets (``PULUMI_CONFIG_PASSPHRASE``, or one
generated once and kept user-only). The Pulumi CLI runs in its own session so that burst decides
what a Ctrl-C means: exactly one SIGINT to Pulumi (a graceful cancel), then a refresh that
clears pending operations.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from pulumi import automation as auto
from pulumi.automation.errors import create_command_error

from .spec import StackSpec
from .store import StoreSpec

PROJECT = "burst"


class StackError(Exception):
    """A stack operation that cannot go on, in one line that says what to do."""

INSTALL_HINT = "curl -fsSL https://get.pulumi.com | sh (the CLI is not on PyPI), then put ~/.pulumi/bin on PATH"
CLI_MISSING = f"the Pulumi CLI is not installed: {INSTALL_HINT}"


def find_cli() -> Optional[str]:
    """The ``pulumi`` binary: on PATH, or where its installer puts it."""
    import shutil

    found = shutil.which("pulumi")
    if found:
        return found
    default = Path.home() / ".pulumi" / "bin" / "pulumi"
    return str(default) if default.exists() else None


class BurstPulumiCommand(auto.PulumiCommand):
    """The real CLI, started in its own session, with a handle to interrupt the running command.

    A Ctrl-C that comes before the CLI's process exists is held and sent the moment it starts, so
    that an interruption is never lost to a race with the operation's start."""

    process: Optional[subprocess.Popen] = None
    interrupt_pending = False
    _process_lock = threading.Lock()  # guards ``process`` and ``interrupt_pending`` against the Ctrl-C thread

    def __init__(self):
        binary = find_cli()
        if binary is None:
            raise StackError(CLI_MISSING)
        root = str(Path(binary).parent.parent) if Path(binary).parent.name == "bin" else None
        try:
            super().__init__(root=root)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise StackError(f"the Pulumi CLI at {binary} does not run ({exc}); reinstall it: {INSTALL_HINT}") from None
        except auto.InvalidVersionError as exc:
            raise StackError(f"the Pulumi CLI at {binary} is too old ({exc}); update it: {INSTALL_HINT}") from None
        self.process: Optional[subprocess.Popen] = None

    def run(self, args, cwd, additional_env, on_output=None, on_error=None) -> auto.CommandResult:
        if "--non-interactive" not in args:
            args = ["--non-interactive", *args]
        env = {**os.environ, **additional_env, "PULUMI_AUTOMATION_API": "true"}
        chunks: dict[str, list[str]] = {"out": [], "err": []}

        def consume(stream, callback, key):
            for line in iter(stream.readline, ""):
                line = line.rstrip()
                if callback:
                    callback(line)
                chunks[key].append(line)
            stream.close()

        with subprocess.Popen([self.command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
                              encoding="utf-8", start_new_session=True) as process:
            with self._process_lock:
                self.process = process
                if self.interrupt_pending:  # Ctrl-C came while the CLI was starting
                    self.interrupt_pending = False
                    process.send_signal(signal.SIGINT)
            readers = [threading.Thread(target=consume, args=(process.stdout, on_output, "out")),
                       threading.Thread(target=consume, args=(process.stderr, on_error, "err"))]
            for t in readers:
                t.start()
            for t in readers:
                t.join()
            process.wait()
        with self._process_lock:
            self.process = None
        result = auto.CommandResult(stdout="\n".join(chunks["out"]), stderr="\n".join(chunks["err"]), code=process.returncode)
        if process.returncode != 0:
            raise create_command_error(result)
        return result

    def interrupt(self) -> bool:
        """One SIGINT: Pulumi cancels gracefully (a second one would kill it mid-operation).
        With no CLI running yet, the SIGINT waits for the next one to start (``forget_interrupt``
        drops it once the interrupted operation has ended)."""
        with self._process_lock:
            process = self.process
            if process is None or process.poll() is not None:
                self.interrupt_pending = True
                return False
            process.send_signal(signal.SIGINT)
            return True

    def forget_interrupt(self) -> None:
        """The interrupted operation is over: a SIGINT still held must not cancel the refresh after it."""
        with self._process_lock:
            self.interrupt_pending = False


def passphrase(home: Path) -> str:
    """``PULUMI_CONFIG_PASSPHRASE``, or one generated once and stored readable by the user only."""
    if os.environ.get("PULUMI_CONFIG_PASSPHRASE"):
        return os.environ["PULUMI_CONFIG_PASSPHRASE"]
    path = home / "pulumi" / "passphrase"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def backend_url(home: Path) -> str:
    if os.environ.get("PULUMI_BACKEND_URL"):
        return os.environ["PULUMI_BACKEND_URL"]
    path = home / "pulumi" / "backend"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return f"file://{path}"


def _join_even_if_starting(worker: threading.Thread) -> None:
    """Join a thread whose ``start()`` a Ctrl-C may have cut short: it runs, or never began."""
    for _ in range(500):
        try:
            worker.join()
            return
        except RuntimeError:  # started, not yet marked running (or never started: give up after 5 s)
            time.sleep(0.01)


class StackDriver:
    """One cluster's (or one region's store's) Pulumi stack; its work dir, passphrase and file backend live under ``home``."""

    def __init__(self, spec_or_name: "StackSpec | StoreSpec | str", home: Path, program: Callable[[], object] = lambda: None,
                 command: Optional[auto.PulumiCommand] = None, on_output: Optional[Callable[[str], None]] = None,
                 on_event: Optional[Callable] = None):
        self.home = Path(home)
        self.spec = None if isinstance(spec_or_name, str) else spec_or_name
        self.stack_name = self.spec.stack_name if self.spec else spec_or_name
        self.program = program
        self.command = command or BurstPulumiCommand()
        self.on_output = on_output
        self.on_event = on_event
        self._stack: Optional[auto.Stack] = None

    def _options(self) -> auto.LocalWorkspaceOptions:
        work_dir = self.home / "pulumi" / "work" / self.stack_name
        work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return auto.LocalWorkspaceOptions(
            work_dir=str(work_dir), pulumi_command=self.command, secrets_provider="passphrase",
            project_settings=auto.ProjectSettings(name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=backend_url(self.home))),
            env_vars={"PULUMI_CONFIG_PASSPHRASE": passphrase(self.home), "PULUMI_SKIP_UPDATE_CHECK": "true"},
        )

    @property
    def stack(self) -> auto.Stack:
        if self._stack is None:
            self._stack = auto.create_or_select_stack(stack_name=self.stack_name, project_name=PROJECT, program=self.program,
                                                      opts=self._options())
        return self._stack

    def _interruptible(self, fn: Callable[[], object]):
        """Run a Pulumi operation in a thread; Ctrl-C becomes one SIGINT to Pulumi, then a refresh."""
        box: dict = {}

        def target():
            try:
                box["result"] = fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = exc

        worker = threading.Thread(target=target, daemon=True)
        try:
            worker.start()  # inside: a Ctrl-C can land while the thread starts, with Pulumi already on its way
            while worker.is_alive():
                worker.join(0.2)
        except KeyboardInterrupt:
            if isinstance(self.command, BurstPulumiCommand):
                self.command.interrupt()
            _join_even_if_starting(worker)
            if isinstance(self.command, BurstPulumiCommand):
                self.command.forget_interrupt()
            self.refresh()
            raise
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def up(self) -> dict:
        """Create or update the stack; returns its outputs ({name: value}; secrets included)."""
        stack = self.stack
        if self.spec is not None:
            stack.set_all_config({k: auto.ConfigValue(v) for k, v in self.spec.config.items()})
        result = self._interruptible(lambda: stack.up(on_output=self.on_output, on_event=self.on_event, color="never"))
        return {k: v.value for k, v in result.outputs.items()}

    def config(self) -> dict[str, str]:
        """The stack's configuration as last set ({} for a stack never brought up)."""
        return {k: v.value for k, v in self.stack.get_all_config().items()}

    def outputs(self) -> dict:
        return {k: v.value for k, v in self.stack.outputs().items()}

    def refresh(self) -> None:
        """Reconcile the state with the cloud and clear operations an interruption left pending."""
        self.stack.refresh(on_output=self.on_output, clear_pending_creates=True, color="never")

    def resources_left(self) -> list[str]:
        """URNs of the cloud resources the stack still holds (not the stack or its providers)."""
        deployment = self.stack.export_stack().deployment or {}
        return [r["urn"] for r in deployment.get("resources", [])
                if r.get("type") != "pulumi:pulumi:Stack" and not r.get("type", "").startswith("pulumi:providers:")]

    def destroy(self, attempts: int = 2) -> None:
        """Destroy, verify nothing is left, retry once after a refresh; list what is left by URN."""
        last_error = None
        for attempt in range(attempts):
            try:
                self._interruptible(lambda: self.stack.destroy(on_output=self.on_output, continue_on_error=True, color="never"))
                last_error = None
            except auto.CommandError as exc:
                last_error = exc
            left = self.resources_left()
            if not left:
                self.stack.workspace.remove_stack(self.stack_name)
                return
            if attempt + 1 < attempts:
                self.refresh()
        detail = f" (last error: {str(last_error).strip().splitlines()[-1][:200]})" if last_error else ""
        raise StackError(f"stack {self.stack_name}: {len(left)} resource(s) could not be destroyed: {', '.join(left)}{detail}; "
                         "the cluster handle is kept: fix the cause and run `burst down` again")
