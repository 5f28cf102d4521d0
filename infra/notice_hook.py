"""The notice a Kubernetes pod posts before it ends, in the format ``burst.runtime.notice`` reads.

A pod's preStop hook runs in the pod's image, a stock Ray image where burst is not installed (Ray's
runtime env installs it for the job, not for the container), and infra imports nothing from burst:
so the hook is a few lines of Python that need only pyarrow, which Ray ships. It writes ``NOTICE``
(JSON: id, action, source, time) at the root of the cluster's storage and waits until
``NOTICE.taken`` holds its id (the workers' checkpoint is on storage) or the wait is over.
"""

from __future__ import annotations

# argv: STORAGE ACTION SOURCE WAIT_S
HOOK_SCRIPT = """
import json, sys, time, uuid
from pyarrow import fs
storage, action, source, wait = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
filesystem, root = fs.FileSystem.from_uri(storage)
root = root.rstrip('/')
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


def hook_command(storage, action: str, source: str, wait_s: int) -> list:
    """The command a Kubernetes preStop hook runs to post a notice (``storage`` may be a Pulumi output)."""
    return ["python", "-c", HOOK_SCRIPT, storage, action, source, str(wait_s)]
