"""The documentation a user reads: the README's front, and the site under ``docs/`` built strictly.

The site's command reference must say what the installed command line says (it is written from
each command's ``--help`` at every build), and no page may link to a page or anchor that is not
there (``mkdocs build --strict``).
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _set_up_block(text: str) -> list[str]:
    """The lines of the code block under ``## Set up`` (what `.ci/run` reads its test command from)."""
    block = text.split("## Set up", 1)[1].split("```", 2)[1]
    return [line for line in block.splitlines() if line.strip()]


def _first_screen(text: str) -> str:
    """Title, pitch, example and the set-up commands with their two lines: up to the next heading."""
    head, rest = text.split("## Set up", 1)
    return head + "## Set up" + rest.split("\n## ", 1)[0]


def test_the_readme_opens_with_what_burst_is_then_the_two_set_up_commands_and_stays_a_front_page():
    text = README.read_text()
    assert text.startswith("# burst\n"), "README.md begins with its title"
    run, test = _set_up_block(text)
    assert run.endswith("burst run gan3d --provider local") and "pip install -e ." in run
    assert test.endswith("python -m pytest -q -n auto") and "'.[dev]'" in test  # -n auto: two tests at a time where they can be told apart
    screen = _first_screen(text)
    assert len(screen.splitlines()) <= 30, "the title, pitch, example and set-up fit one screen"
    prose = re.sub(r"```.*?```", "", screen, flags=re.S)  # the commands' own numbers are theirs
    figures = re.findall(r"\d+(?:[.,]\d+)*\s*(?:s|%|min|minutes|CPU-s\w*)\b|\b[0-9a-f]{7,40}\b|\d{4}-\d{2}-\d{2}|Xeon|EPYC|AVX", prose)
    assert figures == [], f"measurements belong in docs/internals/benchmarks.md, not on the first screen: {figures}"
    # a front page, not the manual: the manual is the site under docs/
    assert len(text.encode()) < 12_000, f"README.md is {len(text.encode())} bytes: move detail into docs/"
    for heading in ("## Words", "## Commands", "## Documentation"):
        assert heading in text


def test_ci_runs_the_readme_s_test_command():
    """`.ci/run` reads the command with its own awk program: run here, it finds the README's."""
    program = re.search(r"test_cmd=\$\(awk '(.+?)' README\.md\)", (ROOT / ".ci" / "run").read_text()).group(1)
    found = subprocess.run(["awk", program, str(README)], capture_output=True, text=True, check=True).stdout.strip()
    assert found == _set_up_block(README.read_text())[1]


def test_every_page_the_readme_links_to_exists():
    links = re.findall(r"\]\((docs/[^)#]+)", README.read_text())
    assert links, "the README links into docs/"
    missing = sorted({link for link in links if not (ROOT / link).is_file()})
    assert missing == []


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[dev]'")
    pytest.importorskip("material", reason="mkdocs-material is not installed: pip install -e '.[dev]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, "mkdocs build --strict failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _page_text(site: Path, page: str) -> str:
    raw = (site / page / "index.html").read_text() if page else (site / "index.html").read_text()
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def _help(*words: str) -> str:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-m", "burst.cli", *words, "--help"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_site_builds_strictly_with_every_page_in_its_navigation(site):
    for page in ("guide/managed-runs", "sites/slurm", "sites/kubernetes", "sites/air-gapped", "workloads/physics",
                 "internals/architecture", "contributing/breaks", "reference/commands"):
        assert (site / page / "index.html").is_file(), page
    home = _page_text(site, "")
    assert "burst run gan3d --provider local" in home and "Words" in home


def test_the_command_reference_has_every_command_and_option_the_command_line_has(site):
    reference = _page_text(site, "reference/commands")
    top = _help()
    commands = re.findall(r"^│ ([a-z][a-z-]+) ", top, flags=re.M)
    assert {"plan", "up", "train", "run", "tune", "down", "monitor", "catalog", "policy"} <= set(commands)
    for command in commands:
        assert f"burst {command}" in reference, f"the reference lacks burst {command}"
        options = set(re.findall(r"(--[a-z][a-z-]+)", _help(command)))
        missing = sorted(option for option in options if option not in reference)
        assert missing == [], f"burst {command}: the reference lacks {missing}"
    refresh = set(re.findall(r"(--[a-z][a-z-]+)", _help("catalog", "refresh")))
    assert "burst catalog refresh" in reference and refresh <= set(re.findall(r"(--[a-z][a-z-]+)", reference))
