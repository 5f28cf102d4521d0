"""The rules that keep the code base open to new targets: provider names live in one place
(``burst/targets``), and the Pulumi programs do not depend on the CLI package."""

import ast
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
