"""A trie the native server can map: fetched from object storage or a URL
once into a local cache and verified, or a local zstd-compressed one
decompressed into memory.

``ngram-serve s3://bucket/corpus.ngt --cache-dir /var/cache/ngram ...``: a pod
starts from an image and a volume, so the trie host takes its trie from where
the build wrote it. Supported locations: ``s3://`` and ``gs://`` (pyarrow.fs,
credentials and endpoint from the usual environment: ``AWS_*`` with
``AWS_ENDPOINT_URL`` for S3-compatible stores, Google's application default
credentials for GCS) and ``https://`` (``http://`` too, for an in-cluster
mirror).

The copy is written to a temporary file in the cache folder, checked (size
against the source's, then every section's CRC-32C by the engine), and only
then renamed into place, so the cache never holds a partial or corrupted
trie under its final name. A zstd-compressed trie (``ngram-build --compress``)
is decompressed into the cache, because the server maps plain tries.
A cached copy that verifies is used without contacting the source: locations
are treated as immutable (publish a new trie under a new name; docs/OPERATIONS.md).

A local compressed trie (``ngram-serve corpus.ngt.zst``) is decompressed into
an anonymous in-memory file (memfd) that the server inherits and opens as
``/proc/self/fd/N``: in RAM, as ``NgramIndex.open`` holds one, with the
server's own checks (and ``--verify``'s) on the plain bytes.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ngram_service.index import ZSTD_MAGIC, NgramIndex, TrieFormatError, decompress_trie_file

__all__ = ["REMOTE_SCHEMES", "TrieFetchError", "cache_path", "decompress_to_memory", "fetch_trie", "is_compressed",
           "is_remote"]

REMOTE_SCHEMES = ("s3://", "gs://", "gcs://", "https://", "http://")
CHUNK = 8 << 20
URL_TIMEOUT = 60.0  # seconds without progress on an http(s) connection


class TrieFetchError(RuntimeError):
    """The trie could not be fetched, or what was fetched is not an intact trie."""


def is_remote(location: str) -> bool:
    return location.startswith(REMOTE_SCHEMES)


def is_compressed(path: str) -> bool:
    """A local file that starts with zstd's magic (ngram-build --compress); False
    for one that cannot be read (the server says why when it opens it)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(ZSTD_MAGIC)) == ZSTD_MAGIC
    except OSError:
        return False


def decompress_to_memory(path: str) -> str:
    """A local zstd-compressed trie decompressed into a memfd left open (and
    inheritable) for the server this process becomes; returns the path the
    server opens it by, ``/proc/self/fd/N``."""
    fd = os.memfd_create(f"ngram-serve:{Path(path).name}", 0)
    os.set_inheritable(fd, True)
    t0 = time.monotonic()
    with os.fdopen(os.dup(fd), "wb") as dest:
        decompress_trie_file(path, dest, path, TrieFetchError)
    log_event("info", "trie_decompressed", path=path, bytes=os.fstat(fd).st_size,
              seconds=round(time.monotonic() - t0, 3))
    return f"/proc/self/fd/{fd}"


def log_event(level: str, event: str, **fields: object) -> None:
    """One JSON line on stderr, the native server's log format (json_log.cc)."""
    sys.stderr.write(json.dumps({"ts": round(time.time(), 6), "level": level, "event": event, **fields}) + "\n")
    sys.stderr.flush()


def cache_path(location: str, cache_dir: str | Path) -> Path:
    """Where ``location`` is cached: ``CACHE_DIR/<16 hex of sha256(location)>-<file name>``.
    The hash keeps two locations with the same file name apart; the name keeps
    the cache readable. A ``.zst`` suffix is dropped (the copy is decompressed)."""
    name = Path(urllib.parse.urlsplit(location).path).name or "trie"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    if name.endswith(".zst"):
        name = name[:-4] or "trie"
    digest = hashlib.sha256(location.encode()).hexdigest()[:16]
    return Path(cache_dir) / f"{digest}-{name}"


def _verify(path: Path) -> NgramIndex:
    """The engine's own check: header, file length, every section's CRC-32C."""
    return NgramIndex.open(path, verify=True)


@contextmanager
def _locked(dest: Path) -> Iterator[bool]:
    """An exclusive lock beside ``dest`` (two servers sharing a cache volume
    fetch once). Yields False when the cache folder is read-only."""
    try:
        fd = os.open(dest.parent / f".{dest.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield True
    finally:
        os.close(fd)


def _open_source(location: str) -> tuple[BinaryIO, int | None]:
    """A byte stream of ``location`` and its size when the source states one."""
    if location.startswith(("https://", "http://")):
        try:
            resp = urllib.request.urlopen(location, timeout=URL_TIMEOUT)  # noqa: S310 (scheme checked above)
        except urllib.error.HTTPError as e:
            raise TrieFetchError(f"{location}: HTTP {e.code} {e.reason}") from e
        except (urllib.error.URLError, OSError) as e:
            raise TrieFetchError(f"{location}: cannot connect: {getattr(e, 'reason', e)}") from e
        length = resp.headers.get("Content-Length")
        return resp, int(length) if length and length.isdigit() else None
    from pyarrow import fs

    uri = "gs://" + location[len("gcs://"):] if location.startswith("gcs://") else location
    try:
        filesystem, path = fs.FileSystem.from_uri(uri)
        info = filesystem.get_file_info(path)
        if info.type == fs.FileType.NotFound:
            raise TrieFetchError(f"{location}: no such object")
        if info.type != fs.FileType.File:
            raise TrieFetchError(f"{location}: not a file (a folder or prefix)")
        return filesystem.open_input_stream(path), info.size
    except TrieFetchError:
        raise
    except Exception as e:  # noqa: BLE001 (pyarrow raises OSError/ArrowException with the store's message)
        raise TrieFetchError(f"{location}: {e}") from e


def _download(location: str, out: BinaryIO) -> int:
    """Copies ``location`` to ``out``; returns the bytes written. A stream that
    ends before the size the source stated is refused."""
    src, expected = _open_source(location)
    written = 0
    try:
        with src:
            while True:
                chunk = src.read(CHUNK)
                if not chunk:
                    break
                out.write(chunk)
                written += len(chunk)
    except TrieFetchError:
        raise
    except Exception as e:  # noqa: BLE001 (a dropped connection mid-transfer)
        raise TrieFetchError(f"{location}: download failed after {written:,} bytes: {e}") from e
    if expected is not None and written != expected:
        raise TrieFetchError(f"{location}: download truncated: {written:,} of {expected:,} bytes")
    return written


def _fetch_into(location: str, dest: Path) -> int:
    """Download, check, and atomically rename into ``dest``; returns the bytes downloaded."""
    tmp_paths: list[Path] = []

    def temp() -> BinaryIO:
        f = tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part", delete=False)
        tmp_paths.append(Path(f.name))
        return f

    try:
        with temp() as raw:
            downloaded = _download(location, raw)
        ready = tmp_paths[0]
        with open(ready, "rb") as f:
            compressed = f.read(4) == ZSTD_MAGIC
        if compressed:
            with temp() as plain:
                decompress_trie_file(ready, plain, location, TrieFetchError)
            ready = tmp_paths[1]
        try:
            _verify(ready)
        except TrieFormatError as e:
            # The engine's message names the temporary file; name the source instead.
            detail = str(e).replace(str(ready), "").lstrip(": ")
            raise TrieFetchError(f"{location}: refused, not an intact trie ({detail}); nothing was cached") from e
        with open(ready, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(ready, 0o444)
        os.replace(ready, dest)
        dir_fd = os.open(dest.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return downloaded
    finally:
        for p in tmp_paths:
            p.unlink(missing_ok=True)


def fetch_trie(location: str, cache_dir: str | Path) -> Path:
    """The local path of the trie at ``location``: the cached copy when it
    verifies, else a fresh, verified download. Raises TrieFetchError (with
    the location and what is wrong) when neither is possible."""
    cache_dir = Path(cache_dir)
    dest = cache_path(location, cache_dir)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if not dest.exists():
            raise TrieFetchError(f"--cache-dir {cache_dir}: cannot create: {e.strerror}") from e
    with _locked(dest) as writable:
        if dest.exists():
            t0 = time.monotonic()
            try:
                _verify(dest)
                log_event("info", "trie_cached", location=location, path=str(dest), bytes=dest.stat().st_size,
                          verify_seconds=round(time.monotonic() - t0, 3))
                return dest
            except TrieFormatError as e:
                if not writable:
                    raise TrieFetchError(f"{location}: the cached copy {dest} is refused ({e}) and "
                                         f"--cache-dir {cache_dir} is read-only") from e
                log_event("warning", "trie_cache_refused", location=location, path=str(dest), error=str(e))
                dest.unlink()
        if not writable:
            raise TrieFetchError(f"{location}: not in the cache and --cache-dir {cache_dir} is read-only "
                                 f"(expected {dest})")
        log_event("info", "trie_fetch", location=location, path=str(dest))
        t0 = time.monotonic()
        try:
            downloaded = _fetch_into(location, dest)
        except OSError as e:  # the cache volume: full, or not ours to write
            raise TrieFetchError(f"{location}: cannot write to --cache-dir {cache_dir}: {e}") from e
        log_event("info", "trie_fetched", location=location, path=str(dest), bytes=downloaded,
                  file_bytes=dest.stat().st_size, seconds=round(time.monotonic() - t0, 3))
        return dest
