"""The fast half of ``python -m tests.breaks`` as part of the suite: each deliberate regression whose
tests start no cluster is applied in a copy of the tree, and its tests must fail there (the suite
itself has run them unbroken). The slow half runs weekly; see tests/breaks.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import breaks
from tests.support import slurm_site


@pytest.mark.slow
def test_every_fast_break_is_caught_by_its_tests():
    proc = subprocess.run([sys.executable, "-m", "tests.breaks", "--fast", "--in-suite"], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=900)
    fast = [b for b in breaks.BREAKS if b.fast]
    lines = proc.stdout.splitlines()  # each break: its name, then where and its verdict; the missed ones first
    missed = [f"{lines[i - 1]}\n{line}" for i, line in enumerate(lines) if i and ("MISSED" in line or "INVALID" in line)]
    assert proc.returncode == 0, "\n".join(missed) + "\n" + proc.stdout[-3000:] + proc.stderr[-2000:]
    (summary,) = [line for line in proc.stdout.splitlines() if " not caught, of " in line]
    caught, _, rest = summary.partition(" caught, 0 not caught, of ")
    assert rest.startswith(f"{len(fast)} break(s)"), summary
    if os.environ.get(slurm_site.REQUIRED) == "1":  # CI installs every site tool: every break's tests run there
        assert int(caught) == len(fast), summary


def test_every_break_applies_to_the_tree_as_it_is():
    """Each entry's texts are found, once each, in one source file, and each of its tests exists:
    an entry that no longer applies would report nothing caught for a reason that is no regression."""
    stale = []
    for item in breaks.BREAKS:
        if breaks.locate(item) is None:
            stale.append(f"{item.name}: no source file holds each of its texts exactly once")
        for test in breaks.tests_now(item):
            path, _, name = test.partition("::")
            function = name.split("[")[0]
            if not (breaks.ROOT / path).is_file() or f"def {function}(" not in (breaks.ROOT / path).read_text():
                stale.append(f"{item.name}: no test {test}")
    assert stale == []


def test_a_break_follows_its_code_and_its_test_when_they_move(tmp_path):
    (tmp_path / "burst" / "lifecycle").mkdir(parents=True)
    (tmp_path / "burst" / "lifecycle" / "runs.py").write_text("def f():\n    return guard.stop()\n")
    (tmp_path / "tests" / "burst" / "lifecycle").mkdir(parents=True)
    (tmp_path / "tests" / "burst" / "lifecycle" / "test_budget.py").write_text("def test_stops():\n    pass\n")
    moved = breaks.Break("x", "burst/runs.py", (("return guard.stop()", "return None"),), ("tests/burst/test_budget.py::test_stops",), "")
    assert breaks.locate(moved, tmp_path) == tmp_path / "burst" / "lifecycle" / "runs.py"
    assert breaks.tests_now(moved, tmp_path) == ("tests/burst/lifecycle/test_budget.py::test_stops",)
    (tmp_path / "burst" / "copy.py").write_text("def g():\n    return guard.stop()\n")  # the text twice in the tree: no guess
    assert breaks.locate(moved, tmp_path) is None


def test_a_fast_break_s_forked_pytest_runs_the_copy_s_code_and_says_what_it_saw():
    """The fast breaks' pytests fork from a process that imported the libraries once: the copy's
    code must be what runs (a harmless edit is MISSED, then the real break caught in the same copy,
    which is whole again afterwards), and a child that
    dies before pytest answers (here: multiprocessing cannot re-read a ``<stdin>`` main) is never
    counted as caught."""
    script = (
        "from tests import breaks\n"
        "breaks.forking()\n"
        "real = next(b for b in breaks.BREAKS if b.name == 'journal-end-forgotten')\n"
        "target = breaks.ROOT / real.file\n"
        "first = next(line for line in target.read_text().splitlines() if line.startswith('\"\"\"'))\n"
        "harmless = breaks.Break('harmless', real.file, ((first, first + '  # harmless'),), real.tests, 'nothing', fast=True)\n"
        "print(breaks.check(harmless)[0]); print(breaks.check(real)[0])\n"
        "copy = breaks._copies.take()\n"  # the copy both breaks ran in, whole again for the next one
        "print(copy != breaks.ROOT and (copy / real.file).read_bytes() == target.read_bytes() and (copy / real.file).stat().st_mtime_ns == target.stat().st_mtime_ns)\n"
    )
    root = Path(__file__).resolve().parents[1]
    said = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    lines = said.stdout.splitlines()
    assert said.returncode == 0 and len(lines) == 3, said.stdout + said.stderr[-2000:]
    assert lines[0] == "MISSED: the tests passed with the break in place"
    assert lines[1].startswith("caught: FAILED tests/burst/server/test_money.py::")
    assert lines[2] == "True"  # one copy served both, and the break's file is back as it was, bytes and time
    dead = subprocess.run([sys.executable, "-"], input=script.replace("harmless)[0]); ", "real)[0]); #"), cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert dead.stdout.splitlines()[0].startswith("not run:") and "never answered" in dead.stdout, dead.stdout + dead.stderr[-2000:]
