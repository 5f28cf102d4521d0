"""Cluster storage that is either a local directory or a bucket URI (gs://, abfs://).

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


def exists(uri: str) -> bool:
    if not is_remote(uri):
        return Path(uri).exists()
    from pyarrow import fs

    filesystem, inner = fs.FileSystem.from_uri(uri)
    return filesystem.get_file_info(inner).type != fs.FileType.NotFound


def write_text(uri: str, text: str) -> None:
    if not is_remote(uri):
        Path(uri).parent.mkdir(parents=True, exist_ok=True)
        Path(uri).write_text(text)
        return
    from pyarrow import fs

    filesystem, inner = fs.FileSystem.from_uri(uri)
    filesystem.create_dir(inner.rsplit("/", 1)[0], recursive=True)  # a no-op on object stores
    with filesystem.open_output_stream(inner) as f:
        f.write(text.encode())


def copy_dir(src: str, dest: str) -> None:
    """Copy a directory tree between any two of: local path, bucket URI."""
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
