"""Files on a local disk or in object storage, one interface for the build.

A location is a local path or a URI (``s3://bucket/key``, ``gs://bucket/key``)
opened through ``pyarrow.fs``: S3 takes its credentials, region and endpoint
from the usual environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``, ``AWS_ENDPOINT_URL`` for MinIO or another S3-compatible
server), GCS from ``GOOGLE_APPLICATION_CREDENTIALS`` (or, with
``STORAGE_EMULATOR_HOST`` set, anonymously from that GCS emulator).

``Store`` is a folder at such a location (the build's work directory): tasks
compute in a local scratch folder, then ``put`` finished files into the store
(a rename on a local disk, an upload to object storage), so a reader of the
store never sees a half-written file: an object PUT becomes visible whole or
not at all, and a local file is renamed into place.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pyarrow.fs as pafs

URI_SCHEMES = ("s3://", "gs://", "gcs://")


def is_uri(location: str) -> bool:
    """True for object-storage URIs (``s3://``, ``gs://``)."""
    return location.startswith(URI_SCHEMES)


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) for a local path or a URI."""
    if location.startswith("s3://"):
        path = location[len("s3://"):].rstrip("/")
        return _s3(path.split("/", 1)[0]), path
    if is_uri(location):
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            return _gcs_emulator(os.environ["STORAGE_EMULATOR_HOST"]), location.split("://", 1)[1].rstrip("/")
        fs, path = pafs.FileSystem.from_uri(location)
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(location)


def _gcs_emulator(host: str) -> pafs.GcsFileSystem:
    """GCS served by an emulator (``STORAGE_EMULATOR_HOST=http://127.0.0.1:9023``,
    the variable Google's own clients read): plain HTTP, no credentials, and a
    short retry limit, so that a server that is not there fails fast."""
    scheme, _, address = host.rpartition("://")
    return pafs.GcsFileSystem(anonymous=True, endpoint_override=address.rstrip("/"), scheme=scheme or "http",
                              retry_time_limit=timedelta(seconds=10))


def _s3(bucket: str) -> pafs.S3FileSystem:
    """An S3 filesystem configured from the environment. Delayed open: a small
    object is written with one PUT when closed (no multipart upload), and
    opening many run files costs no request each."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region is None and endpoint is None:
        region = pafs.resolve_s3_region(bucket)
    return pafs.S3FileSystem(endpoint_override=endpoint, region=region, allow_delayed_open=True)


def join(location: str, *parts: str) -> str:
    """A location below another (URIs joined with '/')."""
    if is_uri(location):
        return "/".join([location.rstrip("/"), *parts])
    return os.path.join(location, *parts)


@dataclass
class StoredFile:
    key: str  # relative to the store's root, '/'-separated
    size: int


class Store:
    """A folder, local or in object storage, holding the build's work files."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.remote = is_uri(root)
        self._fs, self._base = filesystem(root)

    def __reduce__(self) -> tuple[type["Store"], tuple[str]]:
        return (Store, (self.root,))  # filesystems are rebuilt from the location in each worker

    def _path(self, key: str) -> str:
        return f"{self._base}/{key}" if key else self._base

    def location(self, key: str) -> str:
        """A key as a local path or URI (what DuckDB or a reader opens)."""
        return join(self.root, key) if key else self.root

    def exists(self, key: str) -> bool:
        return self._fs.get_file_info(self._path(key)).type != pafs.FileType.NotFound

    def read_bytes(self, key: str) -> bytes:
        with self._fs.open_input_stream(self._path(key)) as f:
            return f.read()

    def write_bytes(self, key: str, data: bytes) -> None:
        """Writes a small file whole (temporary name and rename on a local disk)."""
        if not self.remote:
            path = Path(self._path(key))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            return
        with self._fs.open_output_stream(self._path(key)) as f:
            f.write(data)

    def put(self, local: Path, key: str) -> int:
        """Moves a finished local file into the store; returns its size."""
        size = local.stat().st_size
        if not self.remote:
            dest = Path(self._path(key))
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(local), dest)
            return size
        pafs.copy_files(str(local), self._path(key), source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=self._fs)
        local.unlink()
        return size

    def fetch(self, key: str, scratch: Path) -> Path:
        """A local path holding the key's bytes: the file itself on a local
        disk, else a download into ``scratch``."""
        if not self.remote:
            return Path(self._path(key))
        dest = scratch / key.replace("/", "__")
        pafs.copy_files(self._path(key), str(dest), source_filesystem=self._fs,
                        destination_filesystem=pafs.LocalFileSystem())
        return dest

    def list(self, prefix: str) -> list[StoredFile]:
        """Every file below ``prefix`` (recursive), sorted by key."""
        sel = pafs.FileSelector(self._path(prefix), recursive=True, allow_not_found=True)
        out = []
        for info in self._fs.get_file_info(sel):
            if info.type == pafs.FileType.File:
                out.append(StoredFile(info.path[len(self._base) + 1:], info.size))
        return sorted(out, key=lambda f: f.key)

    def delete(self, prefix: str) -> None:
        """Deletes a folder (recursively) or a file; absent is fine."""
        path = self._path(prefix)
        info = self._fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            self._fs.delete_file(path)
        elif info.type == pafs.FileType.Directory and not self.remote:
            self._fs.delete_dir(path)
        else:  # object stores have no folders, only keys under a prefix
            if info.type == pafs.FileType.Directory:
                try:
                    self._fs.delete_dir(path)  # S3: batched deletes
                except FileNotFoundError:
                    pass  # GCS: the keys went, then the folder's marker object was not there
            for f in self.list(prefix):
                self._fs.delete_file(self._path(f.key))


def local_scratch(store: Store, name: str) -> Path:
    """A fresh local folder for one task's DuckDB files: inside the store on a
    local disk (the user chose that disk with --tmp-dir), else in TMPDIR."""
    if store.remote:
        return Path(tempfile.mkdtemp(prefix=f"ngram-{name}-"))
    path = Path(store._path("scratch")) / f"{name}-{os.getpid()}-{os.urandom(4).hex()}"
    path.mkdir(parents=True)
    return path


def upload_atomic(local: Path, location: str) -> None:
    """Copies a finished file to a local path or URI so that no reader sees it
    partly written: an object appears whole when its upload completes (an
    aborted upload leaves nothing); a local copy is renamed into place."""
    fs, path = filesystem(location)
    if not is_uri(location):
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            shutil.copyfile(local, tmp)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)  # left only by a failed or interrupted copy
        return
    pafs.copy_files(str(local), path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
