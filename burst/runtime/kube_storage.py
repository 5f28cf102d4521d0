"""Storage on a claim inside a Kubernetes cluster, reached from this machine through the RayCluster's
head pod: ``kube://CONTEXT/NAMESPACE/RAYCLUSTER/path`` (the context URL-quoted).

A site's Kubernetes cluster may offer no bucket that both its pods and this machine reach; the Ray
pods then share a PersistentVolumeClaim mounted at one path, and this side reads and writes that
path with ``kubectl exec`` and ``kubectl cp`` in the head pod: the stop requests of the budget
guard, the results after a run, checkpoints a managed run moves. The job itself sees a plain
directory (the target hands it the mount path).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from ..errors import BurstError

SCHEME = "kube://"
CONTAINER = "ray-head"


@dataclass(frozen=True)
class KubePath:
    context: str
    namespace: str
    cluster: str
    path: str  # absolute, inside the pod

    @classmethod
    def parse(cls, uri: str) -> "KubePath":
        rest = uri[len(SCHEME):]
        context, namespace, cluster, *path = rest.split("/")
        return cls(unquote(context), namespace, cluster, "/" + "/".join(p for p in path if p))


def uri(context: str, namespace: str, cluster: str, path: str) -> str:
    return f"{SCHEME}{quote(context, safe='')}/{namespace}/{cluster}{path}"


def is_kube(value: str) -> bool:
    return str(value).startswith(SCHEME)


def _kubectl(p: KubePath, *args: str, data: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(["kubectl", f"--context={p.context}", "-n", p.namespace, *args], input=data, capture_output=True, timeout=300)
    except FileNotFoundError:
        raise BurstError("kubectl is not installed: it reaches the storage of a Kubernetes cluster (https://kubernetes.io/docs/tasks/tools/)",
                         exit_code=1) from None
    if check and proc.returncode != 0:
        why = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
        raise BurstError(f"the storage in cluster {p.cluster} ({p.context}/{p.namespace}) did not answer: {why[-1] if why else 'no output'}",
                         exit_code=1)
    return proc


def head_pod(p: KubePath) -> str:
    proc = _kubectl(p, "get", "pods", "-l", f"ray.io/cluster={p.cluster},ray.io/node-type=head", "-o", "jsonpath={.items[0].metadata.name}")
    name = proc.stdout.decode().strip()
    if not name:
        raise BurstError(f"the head pod of RayCluster {p.cluster} in {p.context}/{p.namespace} is gone; its storage cannot be reached", exit_code=1)
    return name


def _exec(p: KubePath, *command: str, data: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return _kubectl(p, "exec", "-i" if data is not None else "-q", head_pod(p), "-c", CONTAINER, "--", *command, data=data, check=check)


def exists(value: str) -> bool:
    p = KubePath.parse(value)
    return _exec(p, "test", "-e", p.path, check=False).returncode == 0


def read_bytes(value: str) -> bytes:
    p = KubePath.parse(value)
    return _exec(p, "cat", p.path).stdout


def write_bytes(value: str, data: bytes) -> None:
    p = KubePath.parse(value)
    parent = p.path.rsplit("/", 1)[0] or "/"
    _exec(p, "sh", "-c", 'mkdir -p "$1" && cat > "$2"', "sh", parent, p.path, data=data)


def remove(value: str) -> None:
    p = KubePath.parse(value)
    _exec(p, "rm", "-rf", p.path)


def is_dir(value: str) -> bool:
    p = KubePath.parse(value)
    return _exec(p, "test", "-d", p.path, check=False).returncode == 0


def list_dirs(value: str) -> list[str]:
    """The names of the directories directly under the path in the pod (none when it is absent)."""
    p = KubePath.parse(value)
    proc = _exec(p, "find", p.path, "-mindepth", "1", "-maxdepth", "1", "-type", "d", "-printf", "%f\\n", check=False)
    return sorted(line for line in proc.stdout.decode(errors="replace").splitlines() if line) if proc.returncode == 0 else []


def tree_stats(value: str) -> tuple[int, int]:
    """(files, bytes) under the path in the pod (0, 0 when it is absent)."""
    p = KubePath.parse(value)
    proc = _exec(p, "find", p.path, "-type", "f", "-printf", "%s\\n", check=False)
    sizes = [int(line) for line in proc.stdout.decode(errors="replace").splitlines() if line.strip().isdigit()] if proc.returncode == 0 else []
    return len(sizes), sum(sizes)


def download(value: str, dest: str) -> None:
    """A file or a directory tree in the pod to ``dest`` here (the tree's contents as ``dest``).
    Copied to a fresh path beside ``dest`` and renamed into place once complete: what was at
    ``dest`` is replaced, never merged with (a half copy is never what a later step reads)."""
    p = KubePath.parse(value)
    target = Path(dest)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.partial-{uuid.uuid4().hex[:8]}"
    try:
        _kubectl(p, "cp", "-c", CONTAINER, f"{p.namespace}/{head_pod(p)}:{p.path}", str(partial))
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        os.replace(partial, target)
    finally:
        if partial.is_dir():
            shutil.rmtree(partial, ignore_errors=True)
        elif partial.exists():
            partial.unlink()


def upload(src: str, value: str) -> None:
    """A local file or directory tree into the pod, as the path (a tree's contents as the path).

    ``kubectl cp DIR pod:DEST`` copies into ``DEST/DIR`` when DEST already exists (kubernetes#51215,
    and so is not idempotent: #96755): the copy goes to a fresh path that cannot exist, and is
    renamed into place once complete, so a copy made again after a restart replaces the first and a
    partial one is never used."""
    p = KubePath.parse(value)
    parent = p.path.rsplit("/", 1)[0] or "/"
    partial = f"{parent.rstrip('/')}/.burst-partial-{uuid.uuid4().hex[:12]}"
    _exec(p, "mkdir", "-p", parent)
    try:
        _kubectl(p, "cp", "-c", CONTAINER, str(src), f"{p.namespace}/{head_pod(p)}:{partial}")
        _exec(p, "sh", "-c", 'rm -rf "$2" && mv "$1" "$2"', "sh", partial, p.path)
    except BaseException:
        _exec(p, "rm", "-rf", partial, check=False)
        raise


def copy_between(src: str, dest: str, copy_dir) -> None:
    """Through a local temporary directory, when the other end is not a local path."""
    with tempfile.TemporaryDirectory() as tmp:
        local = str(Path(tmp) / "x")
        copy_dir(src, local)
        copy_dir(local, dest)
