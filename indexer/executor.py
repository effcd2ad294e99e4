"""Executors run the build's map and reduce tasks.

An executor only needs ``map_unordered(fn, tasks)``, yielding results as
tasks finish. LocalExecutor uses a process pool (spawned, so workers share
nothing implicit with the driver); ``workers=1`` runs tasks in process.
A cluster executor (Ray) implements the same method.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Callable, Iterable, Iterator, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    workers: int

    def map_unordered(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]: ...


class LocalExecutor:
    def __init__(self, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def map_unordered(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        tasks = list(tasks)
        if self.workers == 1 or len(tasks) <= 1:
            for t in tasks:
                yield fn(t)
            return
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(self.workers, len(tasks)), mp_context=ctx) as pool:
            pending = {pool.submit(fn, t) for t in tasks}
            try:
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in finished:
                        yield f.result()
            except BaseException:
                for f in pending:
                    f.cancel()
                raise
