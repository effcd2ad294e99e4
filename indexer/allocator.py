"""`ngram-build` under mimalloc, when the system has it.

Hugging Face `tokenizers` allocates several small objects per token (the
token's string, its offsets, a split per word, a cached word's symbols) and
frees them a document later, a pattern glibc's malloc serves slowly and
mimalloc fast (docs/BUILD.md and CHANGELOG.md have the measurements). An
allocator is chosen when a process starts,
so the command starts itself again with ``LD_PRELOAD`` naming
``libmimalloc.so.2`` (Debian/Ubuntu: ``libmimalloc2.0``) when it finds one;
its pool workers inherit it. ``NGRAM_BUILD_ALLOCATOR=system`` keeps glibc's.
An ``LD_PRELOAD`` the caller set is left as it is.
"""
from __future__ import annotations

import ctypes.util
import os
import sys

#: ``system``: keep the C library's malloc; anything else: mimalloc when found.
ALLOCATOR_ENV = "NGRAM_BUILD_ALLOCATOR"


def active_allocator() -> str:
    """``mimalloc`` when this process runs under it, else ``system``."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return "mimalloc" if "libmimalloc" in f.read() else "system"
    except OSError:
        return "system"


def restart_under_mimalloc() -> None:
    """Replaces this process by the same command under mimalloc (never
    returns then); returns at once where that is not wanted or possible."""
    if os.environ.get(ALLOCATOR_ENV, "").strip().lower() == "system" or os.environ.get("LD_PRELOAD"):
        return
    if not sys.platform.startswith("linux") or not getattr(sys, "orig_argv", None):
        return
    library = ctypes.util.find_library("mimalloc")
    if library is None:
        return
    env = dict(os.environ, LD_PRELOAD=library)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
