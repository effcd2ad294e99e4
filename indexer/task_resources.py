"""What a map or reduce task computes with and how much of it it used: a
DuckDB connection bounded in memory that spills into the task's scratch
folder, the scratch folder's peak size, and the process' peak RSS."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import duckdb


def duckdb_connection(memory_limit_bytes: int, spill_dir: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that spills to ``spill_dir`` beyond
    ``memory_limit_bytes`` (at least DuckDB's floor of 64 MB)."""
    con = duckdb.connect(":memory:")
    con.execute(f"SET memory_limit = '{max(memory_limit_bytes // (1 << 20), 64)}MB'")
    con.execute(f"SET temp_directory = '{spill_dir}'")
    con.execute("SET threads = 1")  # one task per core; the executor provides parallelism
    con.execute("SET preserve_insertion_order = false")
    return con


class DiskMeter:
    """Samples the bytes under a folder in a background thread; ``peak`` is
    the largest seen (DuckDB's spill files come and go within a statement)."""

    def __init__(self, path: Path, interval: float = 0.2) -> None:
        self.path, self.interval, self.peak = path, interval, 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_until_stopped, daemon=True)

    def _size(self) -> int:
        total = 0
        for root, _dirs, files in os.walk(self.path):
            for name in files:
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    pass  # removed while we looked
        return total

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._size())

    def __enter__(self) -> DiskMeter:
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = max(self.peak, self._size())
        self._stop.set()
        self._sampler.join()


def peak_rss_bytes() -> int:
    """This process' peak resident memory so far (a pool worker's covers the
    tasks it ran before too: an upper bound for the task)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
