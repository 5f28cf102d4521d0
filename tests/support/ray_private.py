"""A test's Ray clusters kept to itself.

Ray remembers the last cluster started on the machine in ``$RAY_TMPDIR/ray/ray_current_cluster``
(``/tmp/ray`` by default; ``ray start`` and ``ray.cluster_utils.Cluster`` both write it), and a
``ray.init()`` given no address connects to that cluster while it lives instead of starting its
own. With tests running side by side, one test's multi-node cluster then received another test's
driver (seen: "When connecting to an existing cluster, num_cpus and num_gpus must not be
provided"). A test that starts such a cluster gives it a temporary directory of its own.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from typing import Iterator


@contextlib.contextmanager
def own_ray_tmpdir() -> Iterator[dict[str, str]]:
    """The environment that keeps a test's Ray sessions (and its "current cluster") in a directory
    of its own, short enough for Ray's Unix sockets (107 bytes); removed after."""
    path = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    try:
        yield {"RAY_TMPDIR": path}
    finally:
        shutil.rmtree(path, ignore_errors=True)
