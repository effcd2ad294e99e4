"""Progress of a build: per phase, tasks done/total, documents, tokens/s, ETA.

The pipeline reports through a plain ``Progress`` callback of lines, so a
log (a Ray job, CI) gets one line per finished task; ``ProgressPrinter``
turns the task lines into one redrawn bar line when stderr is a terminal.
"""
from __future__ import annotations

import re
import shutil
import sys
import time
from typing import Callable, TextIO

Progress = Callable[[str], None]


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def format_seconds(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class PhaseProgress:
    """One phase's tasks (``map``, ``reduce``): a line per finished task.

    The ETA divides the work left (shard bytes for the map, tasks for the
    reduce) by the measured rate: the finished tasks' own seconds per unit
    of work, times the tasks that run at once (``workers``, fewer at the
    end). Scaling the phase's elapsed time by the work done instead would
    promise far too long on a cluster, where the first of thousands of
    concurrent tasks finishes while the rest are almost done. Tasks resumed
    from an earlier run count as done but not into the rate, so a resumed
    build does not promise too much.
    """

    def __init__(self, phase: str, total: int, progress: Progress, total_work: float | None = None,
                 workers: int = 1) -> None:
        self.phase, self.total, self.progress, self.workers = phase, total, progress, max(workers, 1)
        self.total_work = float(total if total_work is None else total_work)
        self.done = 0
        self.work_done = self.fresh_work = self.fresh_seconds = 0.0
        self.documents = self.tokens = self.fresh_tokens = 0
        self.t0 = time.perf_counter()

    def task_done(self, detail: str, *, work: float = 1.0, documents: int = 0, tokens: int = 0,
                  resumed: bool = False, seconds: float = 0.0) -> None:
        """``seconds``: the task's own run time (0 when unknown: the ETA then
        scales the elapsed time)."""
        self.done += 1
        self.work_done += work
        self.documents += documents
        self.tokens += tokens
        if not resumed:
            self.fresh_work += work
            self.fresh_tokens += tokens
            self.fresh_seconds += seconds
        elapsed = time.perf_counter() - self.t0
        parts = []
        if self.tokens:
            parts.append(f"total {self.documents:,} docs, {self.tokens:,} tokens, "
                         f"{self.phase} {self.fresh_tokens / max(elapsed, 1e-9) / 1e6:.2f} M tokens/s")
        left = self.total_work - self.work_done
        if self.done < self.total and self.fresh_work > 0:
            if self.fresh_seconds > 0:
                running = min(self.workers, self.total - self.done)
                eta = left * self.fresh_seconds / self.fresh_work / running
            else:
                eta = elapsed * left / self.fresh_work
            parts.append(f"ETA {format_seconds(eta)}")
        tail = (" | " + ", ".join(parts)) if parts else ""
        self.progress(f"[{self.phase} {self.done}/{self.total}] {detail}{tail}")


_TASK_LINE = re.compile(r"^\[(\w+) (\d+)/(\d+)\] ")


class ProgressPrinter:
    """Prints progress lines to a stream; on a terminal, task lines
    (``[map 3/40] ...``) redraw one status line with a bar instead."""

    def __init__(self, stream: TextIO = sys.stderr, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self._open = False  # a status line is on screen

    def __call__(self, line: str) -> None:
        m = _TASK_LINE.match(line) if self.tty else None
        if m is None:
            if self._open:
                self.stream.write("\n")
                self._open = False
            self.stream.write(line + "\n")
        else:
            done, total = int(m.group(2)), int(m.group(3))
            width = 20
            filled = width * done // max(total, 1)
            bar = f"{m.group(1)} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
            columns = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r\x1b[K" + (bar + line[m.end():])[: columns - 1])
            self._open = True
            if done == total:
                self.stream.write("\n")
                self._open = False
        self.stream.flush()
