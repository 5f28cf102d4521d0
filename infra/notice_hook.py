"""The notice a Kubernetes pod posts before it ends, in the format ``burst.runtime.notice`` reads.

A pod's preStop hook runs in the pod's image, a stock Ray image where burst is not installed (Ray's
runtime env installs it for the job, not for the container), and infra imports nothing from burst:
so the hook is a few lines of Python that need only pyarrow, which Ray ships. It writes ``NOTICE``
(JSON: id, action, source, time) in its cluster's notice directory on the storage
(``notice_root``: ``<storage>/notices/<cluster id>``, never the storage's root, which other clusters
may share) and waits until ``NOTICE.taken`` holds its id (the workers' checkpoint is on storage)
or the wait is over.
"""

from __future__ import annotations

NOTICES_DIR = "notices"


def notice_root(storage, cluster_id: str):
    """Where one cluster's notices live on its storage: ``burst.runtime.notice.root`` reads the same
    (``storage`` may be a Pulumi output)."""
    if hasattr(storage, "apply"):
        return storage.apply(lambda s: notice_root(s, cluster_id))
    return f"{str(storage).rstrip('/')}/{NOTICES_DIR}/{cluster_id}"

# argv: STORAGE ACTION SOURCE WAIT_S
HOOK_SCRIPT = """
import json, sys, time, uuid
from pyarrow import fs
storage, action, source, wait = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
filesystem, root = fs.FileSystem.from_uri(storage)
root = root.rstrip('/')
filesystem.create_dir(root, recursive=True)
nid = uuid.uuid4().hex[:12]
with filesystem.open_output_stream(root + '/NOTICE') as f:
    f.write(json.dumps({'id': nid, 'action': action, 'source': source, 'time': time.time()}).encode())
deadline = time.time() + wait
while time.time() < deadline:
    try:
        with filesystem.open_input_stream(root + '/NOTICE.taken') as f:
            if f.read().decode().strip() == nid:
                break
    except OSError:
        pass
    time.sleep(0.5)
"""


def hook_command(root, action: str, source: str, wait_s: int) -> list:
    """The command a Kubernetes preStop hook runs to post a notice in the cluster's notice directory
    ``root`` (``notice_root``; it may be a Pulumi output)."""
    return ["python", "-c", HOOK_SCRIPT, root, action, source, str(wait_s)]
