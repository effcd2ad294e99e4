"""Executors run the build's map and reduce tasks.

An executor only needs ``map_unordered(fn, tasks)``, yielding results as
tasks finish, and ``close()``. LocalExecutor keeps one process pool (spawned,
so workers share nothing implicit with the driver) for all the build's
phases, so each worker imports its modules and builds its tokenizer once;
``workers=1`` runs tasks in process. RayExecutor runs the same functions as
Ray tasks on a cluster.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Callable, Iterable, Iterator, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    workers: int

    def map_unordered(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]: ...

    def close(self) -> None: ...


class SharedObject:
    """A handle to an object in Ray's object store; ``resolve`` gets it back."""

    def __init__(self, ref: object) -> None:
        self.ref = ref


def resolve(obj: object) -> object:
    """The object itself, fetched from Ray's object store when it is a SharedObject."""
    if isinstance(obj, SharedObject):
        import ray

        return ray.get(obj.ref)
    return obj


class LocalExecutor:
    def __init__(self, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def map_unordered(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        tasks = list(tasks)
        if self.workers == 1:
            for t in tasks:
                yield fn(t)
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"))
        pending = {self._pool.submit(fn, t) for t in tasks}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    yield f.result()
        except BaseException:
            for f in pending:
                f.cancel()
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RayExecutor:
    """Runs tasks as Ray tasks on a Ray cluster, one CPU each.

    Joins the cluster at ``address`` (or the one ``RAY_ADDRESS`` names, or
    one this process already joined); with neither, starts a local one.
    ``workers`` is the cluster's CPU count, so the build sizes its
    per-task memory and its number of reduce ranges for that many
    concurrent tasks. Ray retries a task whose worker died (``max_retries``)
    or that raised an ``OSError`` (a transient read or write failure); every
    task writes its outputs under a fresh attempt and records them only when
    finished, so a retry gives the same bytes.
    """

    def __init__(self, address: str | None = None, max_retries: int = 3) -> None:
        try:
            import ray
        except ImportError as e:  # the optional extra
            raise RuntimeError("--executor ray needs Ray: pip install 'ngram-trie-host[ray]'") from e
        self._ray = ray
        self._owns_connection = False
        if not ray.is_initialized():
            ray.init(address=address or os.environ.get("RAY_ADDRESS") or None, log_to_driver=False,
                     include_dashboard=False, configure_logging=False)
            self._owns_connection = True
        self.workers = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        self.max_retries = max_retries

    def map_unordered(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        ray = self._ray
        remote = ray.remote(fn).options(num_cpus=1, max_retries=self.max_retries, retry_exceptions=[OSError])
        pending = [remote.remote(t) for t in tasks]
        try:
            while pending:
                finished, pending = ray.wait(pending, num_returns=1)
                try:
                    yield ray.get(finished[0])
                except ray.exceptions.RayTaskError as e:
                    # The task's own exception (a ShardError naming file and
                    # line), not Ray's wrapper with a remote traceback.
                    raise e.cause if e.cause is not None else e
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

    def share(self, obj: T) -> "SharedObject":
        """Puts a large object every task needs (the tokenizer) into Ray's
        object store once, instead of into every task's arguments."""
        return SharedObject(self._ray.put(obj))

    def close(self) -> None:
        if self._owns_connection:
            self._ray.shutdown()
            self._owns_connection = False

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_executor(kind: str, workers: int, ray_address: str | None = None) -> LocalExecutor | RayExecutor:
    """The executor ``--executor`` names: ``local`` (a process pool) or ``ray``."""
    if kind == "local":
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(ray_address)
    raise ValueError(f"--executor must be local or ray, got {kind!r}")
