"""Notices of lost capacity (``burst.runtime.notice``): what posts them (a pod's preStop hook, a
Slurm batch script, a TPU's shutdown script, ``python -m burst.runtime.notice``) and how a worker
acts on each once."""

import json
import subprocess
import sys
import time

from burst.runtime import notice
from infra.notice_hook import hook_command, notice_root


def test_the_pod_hook_posts_a_notice_a_worker_acts_on_and_ends_as_soon_as_the_checkpoint_is_taken(tmp_path):
    root = notice.root(str(tmp_path), "c0ffee000001")
    watch = notice.NoticeWatch(root)
    assert not watch.checkpoint_now()
    command = hook_command(notice_root(str(tmp_path), "c0ffee000001"), "checkpoint", "Kubernetes ends a worker pod", 60)
    command[0] = sys.executable  # the image's python; here this environment's, which has pyarrow as Ray's images do
    started = time.time()
    hook = subprocess.Popen(command)
    deadline = time.time() + 30
    while not watch.checkpoint_now():
        assert time.time() < deadline and hook.poll() is None, "the hook posted no notice"
        time.sleep(0.2)
    assert watch.acting.source == "Kubernetes ends a worker pod" and not watch.stop_now()
    assert not watch.checkpoint_now()  # acted on once
    watch.done()  # the checkpoint is on storage
    assert hook.wait(timeout=30) == 0
    assert time.time() - started < 30  # it left when the checkpoint was taken, not at the end of its 60 s


def test_a_new_worker_ignores_an_old_checkpoint_notice_but_not_a_stop(tmp_path):
    storage = notice.root(str(tmp_path), "c1")
    notice.write(storage, "checkpoint", "a pod ended before this worker started")
    assert not notice.NoticeWatch(storage).checkpoint_now()  # its checkpoint is what this worker restored
    posted = notice.write(storage, "stop", "the allocation ends")
    watch = notice.NoticeWatch(storage)
    assert watch.stop_now() and watch.acting.id == posted.id
    assert not notice.taken(storage, posted)
    watch.done()
    assert notice.taken(storage, posted)
    notice.clear(storage)  # a new allocation on the same storage
    assert notice.read(storage) is None and not notice.NoticeWatch(storage).stop_now()


def test_a_half_written_notice_is_no_notice_and_the_module_posts_one_from_a_shell(tmp_path):
    (tmp_path / "NOTICE").write_text('{"id": "ab')
    assert notice.read(str(tmp_path)) is None
    proc = subprocess.run([sys.executable, "-m", "burst.runtime.notice", str(tmp_path), "--action", "stop", "--source", "GCE stops the slice",
                           "--wait", "1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "no checkpoint within the wait" in proc.stdout
    got = json.loads((tmp_path / "NOTICE").read_text())
    assert got["action"] == "stop" and got["source"] == "GCE stops the slice"


def test_clusters_that_share_a_storage_never_act_on_each_other_s_notices(tmp_path):
    """A site's Slurm allocations share one storage: one allocation's SIGTERM stops its own runs only,
    and a new allocation clears only its own notices (a pending one of another survives)."""
    a, b = notice.root(str(tmp_path), "alloc-a"), notice.root(str(tmp_path), "alloc-b")
    watch_a, watch_b = notice.NoticeWatch(a), notice.NoticeWatch(b)
    posted = notice.write(a, "stop", "Slurm job 7 signalled")
    assert not watch_b.stop_now() and watch_a.stop_now() and watch_a.acting.id == posted.id
    notice.clear(b)  # allocation b starts again on the same storage
    assert notice.read(a) == posted
    assert notice.read(str(tmp_path)) is None  # nothing at the storage's root
