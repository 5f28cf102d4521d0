"""Cluster storage that is either a local directory, a bucket URI (gs://, abfs://, s3://), or a
claim inside a site's Kubernetes cluster reached through its Ray head pod (kube://, see
``kube_storage``).

Buckets go through pyarrow's filesystems, the layer Ray Train already uses for checkpoints, so
no cloud SDK is added. Imported lazily: pyarrow is only needed where a bucket is. ``filesystem``
is the one place a bucket URI becomes a filesystem: there a storage emulator named the way the
clouds' own SDKs take one (``STORAGE_EMULATOR_HOST`` for ``gs://``, a connection string with a
``BlobEndpoint`` for ``abfs://``) serves the bucket instead of the cloud, in burst and in the jobs
it submits (``emulator_env``), so that the same code runs against real storage servers in tests.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

GCS_EMULATOR = "STORAGE_EMULATOR_HOST"              # google-cloud-storage's name: http://HOST:PORT
AZURE_CONNECTION = "AZURE_STORAGE_CONNECTION_STRING"  # the Azure SDKs' name: BlobEndpoint=...;AccountName=...;AccountKey=...


def is_remote(uri: str) -> bool:
    return "://" in str(uri)


def join(uri: str, *parts: str) -> str:
    return "/".join([str(uri).rstrip("/"), *parts]) if is_remote(uri) else str(Path(uri, *parts))


def _azure_connection() -> dict:
    """The fields of the Azure connection string in the environment (empty without one)."""
    text = os.environ.get(AZURE_CONNECTION, "")
    return {k.strip(): v.strip() for k, _, v in (part.partition("=") for part in text.split(";")) if k.strip()}


def filesystem(uri: str):
    """(pyarrow filesystem, path inside it) of a bucket URI: the cloud's, or the emulator the
    environment names for it (see the module's docstring)."""
    from pyarrow import fs

    real, inner = fs.FileSystem.from_uri(uri)  # the path inside the bucket; nothing is asked of the cloud yet
    scheme, netloc = urlsplit(uri).scheme, urlsplit(uri).netloc
    if scheme in ("gs", "gcs") and os.environ.get(GCS_EMULATOR):
        from datetime import timedelta

        host = os.environ[GCS_EMULATOR]
        endpoint = urlsplit(host if "://" in host else f"http://{host}")
        return fs.GcsFileSystem(anonymous=True, scheme=endpoint.scheme, endpoint_override=endpoint.netloc,
                                retry_time_limit=timedelta(seconds=15)), inner
    conn = _azure_connection()
    account = netloc.rpartition("@")[2].split(".")[0]
    if scheme in ("abfs", "abfss") and conn.get("BlobEndpoint") and conn.get("AccountName") == account:
        endpoint = urlsplit(conn["BlobEndpoint"])
        return fs.AzureFileSystem(account_name=account, account_key=conn.get("AccountKey"),
                                  blob_storage_authority=endpoint.netloc, dfs_storage_authority=endpoint.netloc,
                                  blob_storage_scheme=endpoint.scheme, dfs_storage_scheme=endpoint.scheme), inner
    return real, inner


def emulator_env() -> dict[str, str]:
    """The emulator settings a job on this machine's clusters needs to reach the same buckets: only
    emulators that listen on this machine (a real cloud's credentials never travel with a job)."""
    out = {}
    if os.environ.get(GCS_EMULATOR) and _loopback(os.environ[GCS_EMULATOR]):
        out[GCS_EMULATOR] = os.environ[GCS_EMULATOR]
    if _loopback(_azure_connection().get("BlobEndpoint", "")):
        out[AZURE_CONNECTION] = os.environ[AZURE_CONNECTION]
    return out


def _loopback(address: str) -> bool:
    host = urlsplit(address if "://" in address else f"http://{address}").hostname or ""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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

    bucket, inner = filesystem(uri)
    return bucket.get_file_info(inner).type != fs.FileType.NotFound


def read_text(uri: str) -> str:
    if not is_remote(uri):
        return Path(uri).read_text()
    if kube := _kube(uri):
        return kube.read_bytes(uri).decode()
    bucket, inner = filesystem(uri)
    with bucket.open_input_stream(inner) as f:
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
    bucket, inner = filesystem(uri)
    bucket.create_dir(inner.rsplit("/", 1)[0], recursive=True)  # a no-op on object stores
    with bucket.open_output_stream(inner) as f:
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

    bucket, inner = filesystem(uri)
    if bucket.get_file_info(inner).type != fs.FileType.NotFound:
        bucket.delete_file(inner)


def remove_tree(uri: str) -> None:
    """Delete a directory tree, local or in a bucket or claim; nothing happens when it is absent."""
    if not is_remote(uri):
        shutil.rmtree(uri, ignore_errors=True)
        return
    if kube := _kube(uri):
        kube.remove(uri)  # rm -rf
        return
    from pyarrow import fs

    bucket, inner = filesystem(uri)
    if bucket.get_file_info(inner).type != fs.FileType.NotFound:
        bucket.delete_dir(inner)


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

    bucket, inner = filesystem(src)
    kind = bucket.get_file_info(inner).type
    if kind == fs.FileType.NotFound:
        return False
    if kind == fs.FileType.Directory:
        copy_dir(src, dest)
    else:
        if not is_remote(dest):
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
        _copy_files(src, dest)
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
        shutil.copytree(src, dest, dirs_exist_ok=True, copy_function=shutil.copy)  # each copy's own time, as a bucket's objects have
        return
    if is_remote(dest):
        bucket, inner = filesystem(dest)
        bucket.create_dir(inner, recursive=True)  # a no-op on object stores
    else:
        Path(dest).mkdir(parents=True, exist_ok=True)
    _copy_files(str(src), dest)


def _copy_files(src: str, dest: str) -> None:
    """pyarrow's copy of a file or tree between a local path and a bucket, or two buckets."""
    from pyarrow import fs

    def side(uri: str):
        return filesystem(uri) if is_remote(uri) else (fs.LocalFileSystem(), str(Path(uri).resolve()))

    (src_fs, src_path), (dest_fs, dest_path) = side(src), side(dest)
    fs.copy_files(src_path, dest_path, source_filesystem=src_fs, destination_filesystem=dest_fs)


def tree_stats(uri: str) -> tuple[int, int]:
    """(files, bytes) under ``uri`` (0, 0 when it is absent), local, in a bucket or in a claim."""
    if not is_remote(uri):
        files = [p for p in Path(uri).rglob("*") if p.is_file()] if Path(uri).is_dir() else []
        return len(files), sum(p.stat().st_size for p in files)
    if kube := _kube(uri):
        return kube.tree_stats(uri)
    from pyarrow import fs

    bucket, inner = filesystem(uri)
    if bucket.get_file_info(inner).type == fs.FileType.NotFound:
        return 0, 0
    infos = [i for i in bucket.get_file_info(fs.FileSelector(inner, recursive=True)) if i.type == fs.FileType.File]
    return len(infos), sum(i.size or 0 for i in infos)


def list_dirs(uri: str) -> list[str]:
    """The names of the directories directly under ``uri`` (none when it is absent), local or in a bucket."""
    if not is_remote(uri):
        return sorted(p.name for p in Path(uri).iterdir() if p.is_dir()) if Path(uri).is_dir() else []
    if kube := _kube(uri):
        return kube.list_dirs(uri)
    from pyarrow import fs

    bucket, inner = filesystem(uri)
    if bucket.get_file_info(inner).type == fs.FileType.NotFound:
        return []
    # Listed in full and cut at the first level: an object store has no directories, only names
    # with slashes, and not every server answers a delimited listing with its prefixes.
    names = set()
    for info in bucket.get_file_info(fs.FileSelector(inner, recursive=True)):
        first, _, rest = info.path[len(inner.rstrip("/")) + 1:].partition("/")
        if first and (rest or info.type == fs.FileType.Directory):
            names.add(first)
    return sorted(names)
