"""A local Ray head's paths: Ray's Unix sockets must fit in 107 bytes, or `up` says so before
starting anything."""

from __future__ import annotations

import pytest

from burst.errors import BurstError
from burst.runtime import ray_head


def test_a_tmpdir_too_long_for_the_dashboard_s_socket_is_one_line_before_anything_starts(tmp_path, monkeypatch):
    from burst.home import state
    from burst.home.state import ClusterHandle
    from burst.targets import local

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    long_tmp = tmp_path / ("t" * (110 - len(str(tmp_path))))
    long_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(long_tmp))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again, as a new process would
    with pytest.raises(BurstError) as failure:
        local.up("long", cpus=1)
    message = str(failure.value)
    assert "\n" not in message and "set TMPDIR to a directory of at most 75 bytes" in message, message
    assert state.load(ClusterHandle, "long") is None and not list(ray_head.runtime_root().glob("*/session_*"))


def test_a_short_tmpdir_passes():
    ray_head.check_socket_room(ray_head.runtime_root() / "0123456789ab", tmp="/tmp/node-tmp")
