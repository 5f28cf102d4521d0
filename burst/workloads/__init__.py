"""Workloads: what a run trains, found the same way whoever wrote them.

Three sources, none above another (a name found in two is refused, naming both):

- burst's own (``BUILT_IN``: gan3d, calo, under ``workloads/``);
- installed packages, by entry point (group ``burst.workloads``: ``NAME = "package.module:OBJECT"``);
- code named on the command line: ``package.module:OBJECT`` (importable here) or ``path/to/file.py:OBJECT``.

The object is a workload of the public interface (``burst.workload.Workload``: a group's own) or of
burst's internal one (``base.Workload``: gan3d and calo). Code outside this package asks a workload
for what it has and never compares names or imports a workload's modules. A workload's object is
imported on first use; a named one (``SPEC``) is remembered under its name in this machine's burst
home, so a later command (`burst status`, a managed run's controller) finds it by name, and a job
carries the spec to its cluster (``TrainSettings.workload_source``).
"""

from __future__ import annotations

import json
import os
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..errors import BurstError

if TYPE_CHECKING:
    from .base import Workload

GROUP = "burst.workloads"  # the entry-point group an installed package registers its workloads in
# burst's own: name -> "module:object" (the module is imported when the workload is first asked for)
BUILT_IN = {
    "gan3d": "workloads.gan3d.workload:WORKLOAD",
    "calo": "workloads.calo.workload:WORKLOAD",
}
NAMES: tuple[str, ...] = tuple(BUILT_IN)  # burst's own, for help texts (`burst workloads` lists every one)
DEFAULT: str = NAMES[0]  # what `burst run` trains when no workload is named
_instances: dict[str, "Workload"] = {}
_sources: dict[str, str] = {}  # name -> where it came from, for those loaded in this process
_by_spec: dict[str, "Workload"] = {}  # spec -> the workload its code holds (imported once per process)


def is_spec(text: str) -> bool:
    """Whether ``text`` names code (``module:OBJECT`` or ``file.py:OBJECT``) rather than a workload's name."""
    return ":" in text


def entry_points() -> dict[str, list[str]]:
    """name -> the "module:object" of every installed package's entry point of that name."""
    from importlib.metadata import entry_points as installed

    found: dict[str, list[str]] = {}
    for point in installed(group=GROUP):
        found.setdefault(point.name, []).append(point.value)
    return found


def _remembered_file() -> Path:
    from ..home import state

    return state.home() / "workloads.json"


def _remembered() -> dict[str, str]:
    """name -> spec of the workloads named by their code on this machine."""
    try:
        data = json.loads(_remembered_file().read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}


def _remember(name: str, spec: str) -> None:
    from ..home.records import write_json_atomic

    known = _remembered()
    if known.get(name) != spec:
        try:
            write_json_atomic(_remembered_file(), {**known, name: spec})
        except OSError:
            pass  # a read-only home: this process still knows it


def where(name: str) -> str:
    """Where the workload ``name`` comes from, in words (`burst workloads`)."""
    get(name)
    return _sources[name]


def names() -> list[str]:
    """Every workload's name: burst's own, the installed packages', and those named by their code here."""
    return list(dict.fromkeys([*BUILT_IN, *entry_points(), *_remembered()]))


def check(name: str) -> str:
    get(name)
    return name


def get(name: str, source: Optional[str] = None) -> "Workload":
    """The workload called ``name`` (one instance per process), or the one ``name`` names by its code
    (``module:OBJECT``, ``file.py:OBJECT``); ``source``: the spec a job was handed for ``name``."""
    if is_spec(name):
        return load_spec(name)
    if name in _instances:
        return _instances[name]
    installed = entry_points().get(name, [])
    places = ([f"burst's own ({BUILT_IN[name]})"] if name in BUILT_IN else []) + [f"entry point {v}" for v in installed]
    if len(places) > 1:
        raise BurstError(f"two workloads are called {name!r}: {' and '.join(places)}; uninstall one, or rename it in its package")
    if name in BUILT_IN:
        return _adopt(name, _load_object(BUILT_IN[name]), f"burst's own ({BUILT_IN[name]})")
    if installed:
        return _adopt(name, _load_object(installed[0]), f"entry point {installed[0]} (group {GROUP})")
    spec = source or _remembered().get(name)
    if spec is not None:
        workload = load_spec(spec)
        if workload.name == name:
            return workload
    raise BurstError(f"unknown workload {name!r}; choose one of: {', '.join(names())}, or name its code "
                     "(package.module:OBJECT, path/to/file.py:OBJECT)")


def load_spec(spec: str) -> "Workload":
    """The workload ``spec`` names by its code; a file's path is made absolute (a job on another
    node, or a later command in another directory, names the same file)."""
    module, _, attr = spec.rpartition(":")
    if not module or not attr.isidentifier():
        raise BurstError(f"{spec}: name a workload as package.module:OBJECT or path/to/file.py:OBJECT")
    from ..values.served import SERVED_UPLOADS

    if os.environ.get(SERVED_UPLOADS):  # a member's words on a burst server: no member's code is imported on the server's host
        raise BurstError(f"{spec}: through a burst server a workload is one its admins installed (`burst workloads` lists them); "
                         "code named on the command line trains without a server (`burst logout`)")
    if module.endswith(".py") or os.sep in module:
        path = Path(module).expanduser().resolve()
        if not path.is_file():
            raise BurstError(f"{spec}: no such file {path}")
        spec = f"{path}:{attr}"
    if spec in _by_spec:
        return _by_spec[spec]
    obj = _load_object(spec)
    from .public import adapt

    workload = adapt(obj, spec)
    name = workload.name
    known = _instances.get(name)
    if known is not None and _sources.get(name) != f"code {spec}":
        raise BurstError(f"two workloads are called {name!r}: {_sources[name]} and code {spec}; rename one of them")
    clash = ([f"burst's own ({BUILT_IN[name]})"] if name in BUILT_IN else []) + [f"entry point {v}" for v in entry_points().get(name, [])]
    if clash:
        raise BurstError(f"two workloads are called {name!r}: {clash[0]} and code {spec}; rename the one in {spec}")
    _adopt(name, workload, f"code {spec}")
    workload.spec = spec  # what a job on another node, or a later command here, loads it from
    _by_spec[spec] = workload
    _remember(name, spec)
    return workload


def _load_object(spec: str):
    """The object ``module:attr`` or ``/path/file.py:attr`` names, imported here; one line for what fails."""
    module, _, attr = spec.rpartition(":")
    try:
        if module.endswith(".py"):
            import importlib.util
            import sys

            path = Path(module)
            unique = f"burst_workload_{abs(hash(str(path))):x}"
            found = importlib.util.spec_from_file_location(unique, path)
            loaded = importlib.util.module_from_spec(found)
            sys.modules[unique] = loaded  # dataclasses and pickling look their module up by name
            sys.path.insert(0, str(path.parent))  # the file's own neighbours import as they would beside it
            try:
                found.loader.exec_module(loaded)
            finally:
                sys.path.remove(str(path.parent))
            return getattr(loaded, attr)
        return getattr(import_module(module), attr)
    except BurstError:
        raise
    except AttributeError:
        raise BurstError(f"{spec}: {module} has no {attr}") from None
    except ImportError as exc:
        raise BurstError(f"{spec}: cannot import {module}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the workload's own module failed at import: say how, in one line
        raise BurstError(f"{spec}: importing it failed: {type(exc).__name__}: {exc}") from None


def _adopt(name: str, obj, source: str) -> "Workload":
    from .public import adapt

    workload = adapt(obj, source)
    if workload.name != name:
        raise BurstError(f"{source} is called {workload.name!r}, registered as {name!r}: give both one name")
    _instances[name] = workload
    _sources[name] = source
    return workload


def all_workloads() -> list["Workload"]:
    return [get(n) for n in names()]
