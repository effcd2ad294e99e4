"""One ngram-build at a time per --out: an exclusive ``flock`` on ``OUT.lock``
beside the trie, held for the whole run and removed at its end. A second
build of the same OUT would share its work folder (same key) and delete
the first one's runs under it; it is refused before any work, naming the
process that holds the lock. Holding the lock also makes it safe to remove
what killed runs of the same OUT left beside it (``OUT.tmp-PID``)."""
from __future__ import annotations

import fcntl
import glob
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from indexer.build_config import BuildError
from indexer.storage import is_uri


class OutLockedError(BuildError):
    """Another process is writing the same --out."""


class OutNotWritableError(BuildError):
    """Nothing can be written beside --out (the lock file could not be made)."""


@contextmanager
def out_lock(out: str) -> Iterator[None]:
    """Holds OUT.lock (a local OUT only: object storage has no locks) while
    the body runs; raises OutLockedError when another process holds it."""
    if is_uri(out):
        yield
        return
    path = Path(out + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _acquire(path, out)
    except OSError as e:
        raise OutNotWritableError(f"cannot write beside {out}: {path}: {e.strerror or e}") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        remove_stale_temporaries(Path(out))
        yield
    finally:
        path.unlink(missing_ok=True)  # before the lock goes: see _acquire
        os.close(fd)


def _acquire(path: Path, out: str) -> int:
    """An fd of ``path`` holding its exclusive lock. A holder removes the file
    before it unlocks, so a lock won on a file no longer at ``path`` is
    retried on the new one (else two processes could hold "the" lock)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise OutLockedError(f"{out}: another ngram-build (pid {holder}) is writing it, holding {path}; "
                                 "wait for it to end, or give another --out") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


#: OUT.tmp-PID, OUT.plain.tmp.tmp-PID, OUT.v1.tmp.tmp-PID, ...: a writer's temporary files (the C++
#: SectionFile's, compress_file's, upload_atomic's), which a killed writer leaves behind.
_TEMPORARY = r"(?:\.plain\.tmp)?(?:\.v1\.tmp)?\.tmp-(\d+)"


#: OUT.plain.tmp, OUT.v1.tmp, OUT.plain.tmp.v1.tmp: the files those temporaries become, named without a pid.
_STAGED = (".plain.tmp", ".v1.tmp", ".plain.tmp.v1.tmp")


def remove_stale_temporaries(out: Path) -> list[Path]:
    """Removes the temporary files of OUT that processes no longer alive left
    (killed before their rename), and the staged files only a build of OUT
    writes; returns them. Called with OUT's lock held, so no build of this
    OUT is writing them."""
    pattern = re.compile(re.escape(out.name) + _TEMPORARY + r"\Z")
    removed = []
    for f in out.parent.glob(glob.escape(out.name) + ".*tmp-*"):
        m = pattern.match(f.name)
        if m and not _alive(int(m.group(1))):
            f.unlink(missing_ok=True)
            removed.append(f)
    for suffix in _STAGED:
        f = out.with_name(out.name + suffix)
        if f.is_file():
            f.unlink()
            removed.append(f)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
