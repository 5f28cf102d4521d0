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


@pytest.mark.slow
def test_a_ray_start_that_ray_timed_out_is_tried_once_more_and_another_failure_is_not(tmp_path, monkeypatch):
    """Ray gives a new raylet a fixed 30 s; on a busy machine `ray start` can fail so, leaving
    nothing: `up` starts again, on new ports. Any other failure is reported, not retried."""
    import sys

    from burst.home import state
    from burst.home.state import ClusterHandle
    from burst.targets import local
    from tests.support import census

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    before = census.snapshot()
    said = "Exception: The current node timed out during startup. This could happen because some of the raylet failed to startup"
    failing = [sys.executable, "-c", f"import sys; print({said!r}); sys.exit(1)"]
    calls = []
    real = local.head_command

    def first_fails(*args, **kwargs):
        calls.append(args[0])
        return failing if len(calls) == 1 else real(*args, **kwargs)

    monkeypatch.setattr(local, "head_command", first_fails)
    handle, created = local.up("again", cpus=1)
    try:
        assert created and handle.state == "running" and len(calls) == 2 and calls[0] != calls[1]  # new ports the second time
        assert ray_head.is_alive(handle)
    finally:
        local.down(handle)
    assert state.load(ClusterHandle, "again") is None
    census.assert_none_left(before)

    calls.clear()
    other = [sys.executable, "-c", "import sys; print('Exception: something else broke'); sys.exit(1)"]
    monkeypatch.setattr(local, "head_command", lambda *a, **k: calls.append(1) or other)
    with pytest.raises(BurstError, match="something else broke"):
        local.up("other", cpus=1)
    assert len(calls) == 1 and state.load(ClusterHandle, "other") is None


def test_a_local_cluster_is_gone_once_its_head_s_gcs_or_raylet_is_and_not_while_both_live():
    """What a controller that cannot reach a local head asks before it moves the run: a head that
    does not answer is not gone while its GCS and raylet (processes marked with its cluster in
    their environment, named as Ray names them) live: it may be busy. Without its GCS it is gone,
    whatever else of it lingers, and so it is with nothing of it left."""
    import os
    import subprocess
    import sys

    from burst import targets
    from burst.home.state import ClusterHandle
    from burst.runtime.ray_head import MARKER

    handle = ClusterHandle(name="c", provider="local", cluster_id="localgone1", state="running", storage_uri="/tmp/x")

    def named(name: str) -> subprocess.Popen:  # a process of the cluster called as Ray's daemon is (its /proc comm)
        return subprocess.Popen([sys.executable, "-c", f"open('/proc/self/comm', 'w').write({name!r}); import time; time.sleep(60)"],
                                env={**os.environ, MARKER: handle.cluster_id})

    procs = {name: named(name) for name in ("gcs_server", "raylet", "dashboard")}
    local = targets.get("local")
    try:
        import time

        time.sleep(0.5)  # each has named itself
        assert not local.is_gone(handle)  # its head's processes live: a head that does not answer may be busy
        assert not local.is_gone(handle.model_copy(update={"state": "starting"}))
        procs["gcs_server"].kill()
        procs["gcs_server"].wait()
        assert local.is_gone(handle)  # the raylet and the dashboard linger; without its GCS nothing of it runs a job again
        assert local.stopped_reason(handle) == "its head's gcs_server is gone on this machine"
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    assert local.is_gone(handle) and local.stopped_reason(handle) == "none of its processes is left on this machine"
    assert not local.is_gone(handle.model_copy(update={"state": "starting"}))  # still coming up: not known



@pytest.mark.slow
def test_a_look_that_hangs_on_a_head_whose_gcs_was_killed_is_cut_short_by_this_machine_s_word(tmp_path, monkeypatch):
    """Issue 86: with its GCS killed, a real head's dashboard takes a job-API request and answers
    only when its own call to the GCS gives up (a 500 after 31 s here; a controller's look is two
    such requests, so the loss was judged 61 s after the kill). The controller's look now asks this
    machine beside it: the look ends in the platform's word, not in the dashboard's 500."""
    from burst import targets
    from burst.client import jobs
    from burst.controller import PlatformSaysGone, asked_beside_platform
    from burst.targets import local
    from tests.support import census

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    before = census.snapshot()
    handle, _ = local.up("hung", cpus=1)
    try:
        target, client = targets.get("local"), jobs.client(handle)
        assert asked_beside_platform(client.list_jobs, target, handle) == []  # a healthy head answers; nothing else is asked
        (gcs,) = [p for p in ray_head.cluster_processes(handle.cluster_id, handle.temp_dir) if p.name() == "gcs_server"]
        gcs.kill()
        with pytest.raises(PlatformSaysGone) as gone:
            asked_beside_platform(client.list_jobs, target, handle)
        # the raylet follows its GCS within seconds: either word is this machine's
        assert gone.value.why in ("its head's gcs_server is gone on this machine", "its head's gcs_server and raylet are gone on this machine")
        with pytest.raises(RuntimeError, match="status code 500"):  # what the look would have waited for
            client.list_jobs()
    finally:
        local.down(handle)
    census.assert_none_left(before)
