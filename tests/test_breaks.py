"""The fast half of ``python -m tests.breaks`` as part of the suite: each deliberate regression whose
tests start no cluster is applied in a copy of the tree, and its tests must fail there (the suite
itself has run them unbroken). The slow half runs weekly; see tests/breaks.py."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests import breaks


@pytest.mark.slow
def test_every_fast_break_is_caught_by_its_tests():
    proc = subprocess.run([sys.executable, "-m", "tests.breaks", "--fast", "--in-suite"], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=900)
    fast = [b for b in breaks.BREAKS if b.fast]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert f"{len(fast)} caught, 0 not caught, of {len(fast)} break(s)" in proc.stdout
