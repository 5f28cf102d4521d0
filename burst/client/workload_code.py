"""A workload's code on the cluster that trains it.

Where the cluster's nodes read this machine's files (this machine, an on-prem site's shared file
system) a workload named by its file is loaded there from the same path. Where they cannot (pods
on Kubernetes and the clouds), its package directory travels with the job as one of Ray's
runtime-environment modules (``py_modules``: uploaded once per content, put on every worker's
path) and the job names it as that module; its requirements are installed by the same runtime
environment. An installed entry point travels as the package it is: the cluster's image must
hold it, or its ``requirements`` name it."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import BurstError

MAX_CODE_BYTES = 100 * 2**20  # what Ray's job submission takes (its docs: 100 MiB; ray#55877)
EXCLUDES = (".git", ".venv", "__pycache__", "*.pyc", ".pytest_cache", "burst-runs", "*.h5", "*.npz", "*.tfrecord")


def carried(cfg, runtime, reads_local_paths: bool):
    """(the job's config, its runtime) with the workload's code where the job will look for it."""
    from dataclasses import replace

    from .. import workloads

    workload = workloads.get(cfg.workload, cfg.workload_source)
    requirements = list(getattr(getattr(workload, "user", None), "requirements", ()) or ())
    spec = cfg.workload_source
    if reads_local_paths:  # the nodes run this machine's installation (or a site's shared one): its packages are there
        return cfg, runtime
    if spec is None or not _is_file_spec(spec):
        return cfg, _with_requirements(runtime, requirements) if requirements else runtime
    package, module = package_of(spec)
    size = code_bytes(package)
    if size > MAX_CODE_BYTES:
        raise BurstError(f"workload {workload.name}'s code in {package} is {size / 2**20:.0f} MiB, over the {MAX_CODE_BYTES // 2**20} MiB a "
                         "job may carry: move data and outputs out of the package (or name them in .gitignore)")
    env = dict(runtime.runtime_env)
    env["py_modules"] = [*env.get("py_modules", []), str(package)]
    env["excludes"] = sorted({*env.get("excludes", []), *EXCLUDES})
    runtime = replace(runtime, runtime_env=env)
    if requirements:
        runtime = _with_requirements(runtime, requirements)
    return cfg.model_copy(update={"workload_source": f"{module}:{spec.rpartition(':')[2]}"}), runtime


def _is_file_spec(spec: str) -> bool:
    return spec.rpartition(":")[0].endswith(".py")


def package_of(spec: str) -> tuple[Path, str]:
    """(the directory that travels, the module the file is inside it): the outermost package the
    file is in (its parents with an ``__init__.py``), else the file's own directory."""
    path = Path(spec.rpartition(":")[0])
    top = path.parent
    while (top.parent / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    if not (top / "__init__.py").is_file():
        top = path.parent  # a directory of modules, not a package: it travels as a namespace package
    inner = path.relative_to(top.parent).with_suffix("")
    return top, ".".join(inner.parts)


def code_bytes(directory: Path) -> int:
    """The bytes of ``directory`` that travel (``EXCLUDES`` left out)."""
    import fnmatch

    total = 0
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, pattern) for pattern in EXCLUDES)]
        total += sum((Path(root) / f).stat().st_size for f in files if not any(fnmatch.fnmatch(f, pattern) for pattern in EXCLUDES))
    return total


def _with_requirements(runtime, requirements: list[str]):
    """A runtime that installs ``requirements`` on the pods (Ray's ``pip``, once per environment)."""
    from dataclasses import replace

    env = dict(runtime.runtime_env)
    env["pip"] = [*env.get("pip", []), *requirements]
    return replace(runtime, runtime_env=env)
