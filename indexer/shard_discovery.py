"""Finding shards: local files, folders and globs, and object-storage
objects, prefixes and globs, as a sorted list of ``Shard``s named relative
to the INPUT that found them."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from indexer.shards import ShardError, shard_format, supported_list
from indexer.storage import filesystem, is_uri


def _walk_dir(root: Path) -> list[Path]:
    # Hidden files (".DS_Store", "._x.jsonl" from macOS tar) are never shards.
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if not name.startswith(".") and shard_format(name) is not None:
                found.append(Path(dirpath) / name)
    return found


def expand_inputs(inputs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Turn files, directories and glob patterns into a sorted list of shard files.

    - a file must have a supported ending, else ``ShardError``;
    - a directory is searched recursively; files with other endings (README,
      checksums) and hidden files are ignored;
    - a glob (``*``, ``?``, ``[``; ``**`` recurses) keeps the supported files
      it matches, and expands directories it matches as above;
    - an input that yields no shard at all is an error, so a typo never
      silently builds from less data than intended.

    The result is sorted by path and free of duplicates (the same file reached
    twice, even spelt differently, appears once). Local inputs only:
    ``find_shards`` takes URIs too.
    """
    by_real: dict[str, Path] = {}
    for raw in inputs:
        text = os.fspath(raw)
        if "://" in text:
            raise ShardError(text, None, "remote URLs are expanded by find_shards, not here")
        path = Path(text)
        if path.is_file():
            if shard_format(path) is None:
                raise ShardError(text, None, f"unsupported file type (expected one of {supported_list()})")
            files = [path]
        elif path.is_dir():
            files = _walk_dir(path)
            if not files:
                raise ShardError(text, None, f"directory holds no shard files ({supported_list()})")
        elif any(ch in text for ch in "*?["):
            import glob

            files = []
            for match in glob.glob(text, recursive=True):
                m = Path(match)
                if m.is_dir():
                    files.extend(_walk_dir(m))
                elif m.is_file() and shard_format(m) is not None:
                    files.append(m)
            if not files:
                raise ShardError(text, None, f"pattern matches no shard files ({supported_list()})")
        else:
            raise ShardError(text, None, "no such file or directory")
        for f in files:
            by_real.setdefault(os.path.realpath(f), f)
    return sorted(by_real.values(), key=lambda p: str(p))


@dataclass(frozen=True)
class Shard:
    """One input file: where it is, and its name relative to the INPUT argument
    that found it (what the trie's manifest records, so the same shards at
    another path or in a bucket give the same manifest)."""

    location: str  # local path or URI
    name: str
    size: int
    mtime_ns: int


def _relative_name(root: str, found: str, is_file_arg: bool) -> str:
    if is_file_arg:
        return found.rstrip("/").rsplit("/", 1)[-1]
    return os.path.relpath(found, root).replace(os.sep, "/") if not is_uri(root) else found[len(root):].lstrip("/")


def _glob_root(pattern: str) -> str:
    """The folder a glob is relative to: its part before the first wildcard."""
    head = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
    return head[: head.rfind("/") + 1]


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regex over '/'-separated keys: ``*`` and ``?`` stay within
    one folder, ``**`` crosses folders, ``[...]`` is a character class."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):  # zero or more folders
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1:]:
            j = pattern.index("]", i + 1)
            out.append("[" + pattern[i + 1:j].replace("!", "^", 1) + "]")
            i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def find_shards(inputs: Iterable[str | os.PathLike[str]]) -> list[Shard]:
    """``expand_inputs`` for local paths and object-storage URIs alike.

    A URI names an object, a prefix (a "folder", searched recursively) or a
    glob (``s3://bucket/dolma/*.json.gz``; ``**`` matches across folders).
    Sorted by location, duplicates removed; an input that finds nothing is an
    error, as for local paths.
    """
    found: dict[str, Shard] = {}
    for raw in inputs:
        text = os.fspath(raw)
        if not is_uri(text):
            root = text if Path(text).is_dir() else (_glob_root(text) or ".")
            for p in expand_inputs([text]):
                st = p.stat()
                name = _relative_name(root, str(p), Path(text).is_file())
                found.setdefault(os.path.realpath(p), Shard(str(p), name, st.st_size, st.st_mtime_ns))
            continue
        for shard in _find_remote(text):
            found.setdefault(shard.location, shard)
    return sorted(found.values(), key=lambda s: s.location)


def _find_remote(uri: str) -> list[Shard]:
    import pyarrow.fs as pafs

    scheme = uri.split("://", 1)[0] + "://"
    try:
        fs, path = filesystem(uri)
        if any(ch in path for ch in "*?["):
            root = _glob_root(path).rstrip("/")
            base = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
            regex = _glob_regex(path)
            infos = [i for i in base if regex.match(i.path) or any(regex.match(p) for p in _parents(i.path, root))]
            kind = "pattern matches no shard files"
        else:
            info = fs.get_file_info(path)
            root = path
            if info.type == pafs.FileType.File:
                infos, root = [info], path.rsplit("/", 1)[0]
            else:
                infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
            kind = "no shard files under this prefix" if not infos or info.type != pafs.FileType.File else ""
    except OSError as e:
        raise ShardError(uri, None, f"cannot list ({e})") from e
    shards = []
    for info in infos:
        if info.type != pafs.FileType.File or info.base_name.startswith(".") or shard_format(info.path) is None:
            continue
        mtime = info.mtime_ns or 0
        shards.append(Shard(scheme + info.path, info.path[len(root):].lstrip("/"), info.size, mtime))
    if not shards:
        if len(infos) == 1 and infos[0].type == pafs.FileType.File:
            raise ShardError(uri, None, f"unsupported file type (expected one of {supported_list()})")
        raise ShardError(uri, None, kind or f"no shard files ({supported_list()})")
    return shards


def _parents(path: str, root: str) -> Iterator[str]:
    """The folders between root and path (a glob that matches a folder takes
    everything below it)."""
    parts = path[len(root):].strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        yield root + "/" + "/".join(parts[:i])
