"""The rules that keep the code base open to new targets: provider names live in one place
(``burst/targets``), and the Pulumi programs do not depend on the CLI package."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _provider_name_comparisons(path: Path, names: set[str]) -> list[str]:
    """`x == "gcp"`, `x in ("gcp", "azure")`, `x.startswith("gcp")`: decisions taken on a provider's name."""
    def is_name(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(is_name(e) for e in node.elts)

    def about_kind(node) -> bool:  # a target's kind ("local", "onprem", "cloud") is a capability
        text = ast.unparse(node)
        return text.endswith((".kind", ".target")) or text.startswith("kinds[")

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        operands = [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
        if operands and any(is_name(x) for x in operands) and not any(about_kind(x) for x in operands):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"
                and node.args and is_name(node.args[0])):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_outside_the_targets_package_branches_on_a_provider_name():
    from burst import targets

    names = set(targets.PROVIDERS)
    files = [p for d in ("burst", "infra", "workloads") for p in (ROOT / d).rglob("*.py") if "targets" not in p.parts]
    found = [hit for p in files for hit in _provider_name_comparisons(p, names)]
    assert found == [], "ask the target for a capability instead:\n" + "\n".join(found)


def test_the_rule_would_catch_a_provider_branch(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_architecture.ROOT", tmp_path)
    sample = tmp_path / "sample.py"
    sample.write_text('if provider in ("gcp", "azure") or handle.provider == "gcp-tpu" or p.startswith("gcp"):\n    pass\n'
                      'if target.kind == "local":\n    pass\n')
    assert len(_provider_name_comparisons(sample, {"gcp", "gcp-tpu", "azure", "local"})) == 3


def test_infra_imports_nothing_from_burst():
    for path in (ROOT / "infra").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(m == "burst" or m.startswith("burst.") for m in modules), f"{path.relative_to(ROOT)} imports {modules}"


# ---------------------------------------------------------------------- workloads


def _naming(names: set[str]) -> re.Pattern:
    """A workload's name as a word (``calo``, not ``calorimeter``; ``gan3d_presets`` counts)."""
    return re.compile(r"(?<![a-z0-9])(" + "|".join(map(re.escape, sorted(names))) + r")(?![a-z0-9])", re.IGNORECASE)


def _workload_mentions(path: Path, names: set[str]) -> list[str]:
    """Imports of a workload package (``workloads.common`` is shared code, not a workload), and
    anything in the source naming a workload: string literals, identifiers, comments."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        if any(m == "workloads" or (m.startswith("workloads.") and not m.startswith("workloads.common")) for m in modules):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    pattern = _naming(names)
    found += [f"{path.relative_to(ROOT)}:{i}: {line.strip()[:80]}" for i, line in enumerate(path.read_text().splitlines(), 1)
              if pattern.search(line.replace("_", " "))]
    return found


def test_burst_names_no_workload_outside_the_workload_registry():
    """A workload is added by one line in ``burst/workloads/__init__.py``: no other module of burst
    imports a workload's package or names one (docstrings and comments included)."""
    from burst import workloads

    names = {n.lower() for n in workloads.NAMES}
    registry = ROOT / "burst" / "workloads" / "__init__.py"
    files = [p for p in (ROOT / "burst").rglob("*.py") if p != registry]
    found = [hit for p in files for hit in _workload_mentions(p, names)]
    assert found == [], "ask the workload (burst.workloads) instead:\n" + "\n".join(sorted(set(found)))


def test_the_workload_rule_would_catch_an_import_and_a_name(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_architecture.ROOT", tmp_path)
    sample = tmp_path / "sample.py"
    sample.write_text('from workloads.gan3d import pipeline\nimport workloads.calo.data\nfrom workloads.common.cpu import machine_facts\n'
                      'if workload == "GAN3D":\n    gan3d_presets = 1  # a calorimeter is no workload\n')
    hits = _workload_mentions(sample, {"gan3d", "calo"})
    lines = sorted({int(h.split(":")[1]) for h in hits})
    assert lines == [1, 2, 4, 5], hits  # the two imports (as import and as names), the literal, the identifier


def _import_graph(*packages: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports, anywhere in it: at the top, inside
    functions, and under ``if TYPE_CHECKING:`` (a type-only import is a dependency too: the two
    modules cannot be understood, moved or tested apart)."""
    modules = {}
    for package in packages:
        for path in package.rglob("*.py"):
            parts = list(path.relative_to(package.parent).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                prefix = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else [])) if node.level else node.module
                targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]
            for target in targets:
                while target and target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != module:
                    graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


TREE = ("burst", "infra", "workloads", "tests", "benchmarks", "docs")


def test_the_whole_tree_has_no_import_cycle():
    """Layers import downwards only, type-only imports included: module by module, and package by
    package (``burst.placement`` and ``burst.targets`` used to import each other, the targets for
    the placement's types; those values now live below both, in ``burst.values``)."""
    graph = _import_graph(*(ROOT / d for d in TREE))
    assert _cycles(graph) == []
    group = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    packages: dict[str, set[str]] = {}
    for m, targets in graph.items():
        packages.setdefault(group(m), set()).update(group(t) for t in targets if group(t) != group(m))
    for m in list(packages.values()):
        for t in m:
            packages.setdefault(t, set())
    assert _cycles(packages) == []


def test_the_cycle_rule_would_catch_a_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "b.py").write_text("from .a import f\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n")
    (pkg / "c.py").write_text("from . import b\n")
    assert _cycles(_import_graph(pkg)) == [["pkg.a", "pkg.b", "pkg.c"]]  # b imports c for type checkers: still a circle


def test_workloads_import_burst_only_through_its_workload_interface():
    """A workload may use ``burst.workloads`` (the interface it implements) and nothing else of
    burst: it stays runnable on its own (`python -m workloads.NAME`)."""
    found = []
    for path in (ROOT / "workloads").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {m}" for m in modules
                      if (m == "burst" or m.startswith("burst.")) and not m.startswith("burst.workloads")]
    assert found == []


def _private_imports(root: Path, packages: tuple[str, ...]) -> list[str]:
    """``from .module import _name``: a private name taken from another module of the tree."""
    found = []
    for package in packages:
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                internal = isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in packages)
                if internal:
                    found += [f"{path.relative_to(root)}:{node.lineno}: {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_imports_a_private_name_of_another():
    """What one module uses of another is public there: the controller and the watcher took
    ``managed``'s ``_file``, ``_spawn`` and ``_take_lock`` (issue 40)."""
    assert _private_imports(ROOT, ("burst", "infra", "workloads")) == []


def test_the_private_import_rule_would_catch_one(tmp_path):
    (tmp_path / "burst").mkdir()
    (tmp_path / "burst" / "a.py").write_text("from .managed import _spawn, load\nfrom .render import emit_json as _emit_json\n"
                                             "from __future__ import annotations\n")
    assert _private_imports(tmp_path, ("burst",)) == ["burst/a.py:1: _spawn"]


def _test_module_imports(tests: Path) -> list[str]:
    """A test module importing another test module (``tests.….test_x``): what tests share lives in
    ``tests/support`` (helpers) and ``tests/fakes`` (stand-ins), so that moving a test moves nothing else."""
    found = []
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):  # `from tests.x.test_y import h` and `from tests.x import test_y`
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.relative_to(tests.parent)}:{node.lineno}: {n}" for n in names
                      if n.startswith("tests.") and n.rsplit(".", 1)[-1].startswith("test_")]
    return sorted(found)


def test_no_test_module_imports_another():
    assert _test_module_imports(ROOT / "tests") == []


def test_the_test_import_rule_would_catch_one(tmp_path):
    (tmp_path / "tests" / "burst").mkdir(parents=True)
    (tmp_path / "tests" / "burst" / "test_a.py").write_text("from tests.support.cli_runs import burst\n"
                                                            "def t():\n    from tests.burst.test_b import helper\n"
                                                            "from tests.burst import test_c\n")
    assert _test_module_imports(tmp_path / "tests") == ["tests/burst/test_a.py:3: tests.burst.test_b",
                                                        "tests/burst/test_a.py:4: tests.burst.test_c"]


# ---------------------------------------------------------------------- the architecture page


def _page_modules(page: Path) -> tuple[dict[str, str], list[str]]:
    """(module path -> the side it runs on) of every table row of the page, and its other mentions of ``*.py`` paths."""
    text = page.read_text()
    rows = dict(re.findall(r"^\| `((?:burst|infra|workloads)/[^`]+\.py)` \| (\w+) \|", text, flags=re.M))
    named = re.findall(r"`((?:burst|infra|workloads)/[\w/]+\.py)`", text)
    return rows, named


SIDES = {"here", "cluster", "both", "Pulumi", "alone"}


def test_the_architecture_page_names_every_module_and_its_side_of_the_wire():
    """A newcomer finds every module on one page, with the side of the wire it runs on."""
    rows, named = _page_modules(ROOT / "docs" / "internals" / "architecture.md")
    modules = sorted(str(p.relative_to(ROOT)) for d in ("burst", "infra", "workloads") for p in (ROOT / d).rglob("*.py")
                     if "__pycache__" not in p.parts)
    assert [m for m in modules if m not in rows] == [], "name these in docs/internals/architecture.md"
    assert sorted({m for m in named if not (ROOT / m).is_file()}) == [], "the page names modules that are gone"
    assert {m: s for m, s in rows.items() if s not in SIDES} == {}, f"a side is one of {sorted(SIDES)}"


def test_the_page_rule_would_catch_a_missing_module(tmp_path):
    page = tmp_path / "architecture.md"
    page.write_text("| `burst/api.py` | here | the verbs |\n| `burst/gone.py` | there | old |\nsee `burst/cli/render.py`\n")
    rows, named = _page_modules(page)
    assert rows == {"burst/api.py": "here", "burst/gone.py": "there"} and "burst/cli/render.py" in named
