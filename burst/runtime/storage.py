"""Cluster storage that is either a local directory, a bucket URI (gs://, abfs://, s3://), or a
claim inside a site's Kubernetes cluster reached through its Ray head pod (kube://, see
``kube_storage``).

Buckets go through pyarrow's filesystems, the layer Ray Train already uses for checkpoints, so
no cloud SDK is added. Imported lazily: pyarrow is only needed where a bucket is.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def is_remote(uri: str) -> bool:
    return "://" in str(uri)


def join(uri: str, *parts: str) -> str:
    return "/".join([str(uri).rstrip("/"), *parts]) if is_remote(uri) else str(Path(uri, *parts))


def _kube(uri: str):
    """The Kubernetes claim backend when ``uri`` is one, else None."""
    from . import kube_storage

    return kube_storage if kube_storage.is_kube(uri) else None


def exists(uri: str) -> bool:
    if not is_remote(uri):
        return Path(uri).exists()
    if kube := _kube(uri):
        return kube.exists(uri)
    from pyarrow import fs

    filesystem, inner = fs.FileSystem.from_uri(uri)
    return filesystem.get_file_info(inner).type != fs.FileType.NotFound


def read_text(uri: str) -> str:
    if not is_remote(uri):
        return Path(uri).read_text()
    if kube := _kube(uri):
        return kube.read_bytes(uri).decode()
    from pyarrow import fs

    filesystem, inner = fs.FileSystem.from_uri(uri)
    with filesystem.open_input_stream(inner) as f:
        return f.read().decode()


def write_text(uri: str, text: str) -> None:
    write_bytes(uri, text.encode())


def write_bytes(uri: str, data: bytes) -> None:
    if not is_remote(uri):
        Path(uri).parent.mkdir(parents=True, exist_ok=True)
        Path(uri).write_bytes(data)
        return
    if kube := _kube(uri):
        kube.write_bytes(uri, data)
        return
    from pyarrow import fs

    filesystem, inner = fs.FileSystem.from_uri(uri)
    filesystem.create_dir(inner.rsplit("/", 1)[0], recursive=True)  # a no-op on object stores
    with filesystem.open_output_stream(inner) as f:
        f.write(data)


def remove(uri: str) -> None:
    """Delete one file, local or in a bucket; nothing happens when it is absent."""
    if not is_remote(uri):
        Path(uri).unlink(missing_ok=True)
        return
    if kube := _kube(uri):
        kube.remove(uri)
        return
    from pyarrow import fs

    filesystem, inner = fs.FileSystem.from_uri(uri)
    if filesystem.get_file_info(inner).type != fs.FileType.NotFound:
        filesystem.delete_file(inner)


def copy(src: str, dest: str) -> bool:
    """Copy a file or a directory tree between local paths and bucket URIs; False when ``src`` is absent."""
    if _kube(src) or _kube(dest):
        if not exists(src):
            return False
        if _kube(src) and _kube(src).is_dir(src):
            copy_dir(src, dest)
        elif _kube(src) and not is_remote(dest):
            _kube(src).download(src, dest)
        elif _kube(src):
            write_bytes(dest, _kube(src).read_bytes(src))
        elif Path(src).is_dir():
            copy_dir(src, dest)
        elif not is_remote(src):
            write_bytes(dest, Path(src).read_bytes())
        else:
            write_bytes(dest, read_text(src).encode())
        return True
    if not is_remote(src):
        path = Path(src)
        if not path.exists():
            return False
        if path.is_dir():
            copy_dir(src, dest)
        elif is_remote(dest):
            write_bytes(dest, path.read_bytes())
        else:
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        return True
    from pyarrow import fs

    filesystem, inner = fs.FileSystem.from_uri(src)
    kind = filesystem.get_file_info(inner).type
    if kind == fs.FileType.NotFound:
        return False
    if kind == fs.FileType.Directory:
        copy_dir(src, dest)
    else:
        if not is_remote(dest):
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
        fs.copy_files(src, dest if is_remote(dest) else str(Path(dest).resolve()))
    return True


def copy_dir(src: str, dest: str) -> None:
    """Copy a directory tree between any two of: local path, bucket URI, Kubernetes claim."""
    if _kube(src) or _kube(dest):
        if _kube(src) and not is_remote(dest):
            _kube(src).download(src, dest)
        elif _kube(dest) and not is_remote(src):
            _kube(dest).upload(src, dest)
        else:
            from . import kube_storage

            kube_storage.copy_between(src, dest, copy_dir)
        return
    if not is_remote(src) and not is_remote(dest):
        shutil.copytree(src, dest, dirs_exist_ok=True)
        return
    from pyarrow import fs

    if is_remote(dest):
        filesystem, inner = fs.FileSystem.from_uri(dest)
        filesystem.create_dir(inner, recursive=True)  # a no-op on object stores
    else:
        Path(dest).mkdir(parents=True, exist_ok=True)
    fs.copy_files(str(src), dest if is_remote(dest) else str(Path(dest).resolve()))
