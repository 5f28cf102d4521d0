"""A pytest run inside a copy of the tree, forked from a process that has already imported pytest
and the third-party libraries burst uses (``python -m tests.breaks --fast``).

Each fast break runs a few tests in a fresh copy of the tree. Started as ``python -m pytest``, every
one paid Python's start, pytest's import and the libraries' imports again (about a CPU-second of
the 1.5 to 3 a fast break costs). Forked from a multiprocessing forkserver that preloaded them,
a break's pytest starts with those in memory, and imports only the copy's own packages, after this
module has dropped every module of the tree the forkserver knew (``tests``, ``burst``,
``workloads``, ``infra``): what runs is the copy's code, with the break in it.

TensorFlow and Ray are not preloaded: TensorFlow starts native threads when imported, and a
process forked beside running threads may inherit a held lock.

Imports nothing of the tree itself, so that nothing of it is held when the copy's packages come in.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TREE_PACKAGES = ("tests", "burst", "workloads", "infra", "benchmarks")
# what the forkserver imports once for every break (a name that fails to import is skipped by multiprocessing)
PRELOAD = ("pytest", "_pytest.python", "_pytest.capture", "xdist.plugin", "_hypothesis_pytestplugin", "hypothesis",
           "numpy", "h5py", "yaml", "pydantic", "typer", "rich.console", "rich.table", "rich.text", "filelock", "psutil",
           "sqlalchemy", "sqlalchemy.orm", "fastapi", "starlette", "httpx", "jinja2", "requests", "urllib3")
SHADOWED = 97  # the exit code of a child whose imports did not come from the copy
BROKE = 98  # the exit code of a child that failed before pytest could answer


def run_in_copy(copy: str, args: list[str], output: str, env: dict) -> None:
    """Run ``pytest ARGS`` from ``copy`` as ``cd COPY && env ENV python -m pytest ARGS`` would (``ENV`` puts
    the copy on ``PYTHONPATH``),
    its stdout and stderr to ``output`` and pytest's exit code to ``OUTPUT.code``: a child that
    failed before pytest answered (in multiprocessing's own start, say) exits 1 too, and must not
    be read as its tests failing."""
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    code = BROKE
    try:
        for name in [m for m in sys.modules if m.split(".")[0] in TREE_PACKAGES]:
            del sys.modules[name]
        tree = {os.path.abspath(p) for p in ("", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))}
        sys.path[:] = [copy] + [p for p in sys.path if os.path.abspath(p) not in tree]
        os.chdir(copy)
        os.environ.clear()
        os.environ.update(env)  # every subprocess the tests start (Ray's included) takes the copy too
        import burst
        import workloads

        if not all(str(m.__file__).startswith(copy) for m in (burst, workloads)):
            print(f"the copy's packages do not shadow the tree's: {burst.__file__} {workloads.__file__}", flush=True)
            code = SHADOWED
        else:
            import pytest

            code = int(pytest.main(args))
            Path(output + ".code").write_text(str(code))  # the parent reads pytest's answer here, never from the exit code alone
    except BaseException as exc:  # noqa: BLE001 (anything else is the child's own failure, said in its output)
        print(f"the forked pytest failed: {exc!r}", flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
