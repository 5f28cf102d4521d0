"""What the tests of processes that act with no CLI attached share: a state directory of their own."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty BURST_HOME for this test, read by this process and whatever it starts."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("BURST_HOME", str(path))
    return path
