"""Executors run the build's map and reduce tasks.

An executor only needs ``map_unordered(fn, tasks)``, yielding results as
tasks finish, and ``close()``. LocalExecutor keeps one process pool (spawned,
so workers share nothing implicit with the driver) for all the build's
phases, so each worker imports its modules and builds its tokenizer once;
``workers=1`` runs tasks in process. RayExecutor runs the same functions as
Ray tasks on a cluster.

Both retry a task that raised an ``OSError`` (a transient read or write
failure) and one whose worker process died (the OOM killer, a signal), up
to ``max_retries`` times: the tasks write under fresh attempt names and
record their results last, so a retry gives the same bytes.
"""
from __future__ import annotations

import itertools
import multiprocessing
import os
import shutil
import signal
import tempfile
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Retries of a task after its first attempt (Ray's max_retries; the local pool the same).
MAX_RETRIES = 3


class TaskDiedError(RuntimeError):
    """A task whose worker process died on every attempt."""


def task_label(task: object, index: int) -> str:
    """How messages name a task: its ``label`` (``map 3 (part-3.jsonl.zst)``), else its index."""
    label = getattr(task, "label", None)
    return label if isinstance(label, str) else f"task {index}"


class Executor(Protocol):
    workers: int
    spare_core: bool  # a core free beside each task, for reading and encoding ahead on

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


def _run_marked(fn: Callable[[T], R], started: str, task: T) -> R:
    """Runs fn(task) in a pool worker after leaving a file that says it
    started: when a worker dies, the driver learns which tasks were running."""
    Path(started).touch()
    return fn(task)


def _exit_on_interrupt() -> None:
    """A pool worker's start: Ctrl-C (SIGINT to the terminal's whole process
    group) ends it at once and quietly. The driver gets the same signal and
    reports it once; a worker's traceback would add nothing."""
    signal.signal(signal.SIGINT, lambda _sig, _frame: os._exit(128 + signal.SIGINT))


def available_cores() -> int:
    """The cores this process may run on (its affinity, as a container's
    cpuset sets it), not all the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class LocalExecutor:
    """A pool of ``workers`` spawned processes (``workers=1``: in process).

    A task that raises an OSError is run again, up to ``max_retries`` times.
    A worker that dies breaks the whole pool (every pending task fails with
    BrokenProcessPool), so the executor starts a fresh pool and runs the
    unfinished tasks again. The tasks that were running when a worker died
    are suspects; suspects then run one at a time beside the others, so the
    next death is pinned on one task (at once when only one was running). A
    task pinned more than ``max_retries`` times fails the build with a
    TaskDiedError naming it. In process (``workers=1``) a dying task takes
    the driver with it: re-run the command to resume.
    """

    def __init__(self, workers: int = 1, max_retries: int = MAX_RETRIES) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.spare_core = workers < available_cores()
        self.max_retries = max_retries
        self._pool: ProcessPoolExecutor | None = None

    def map_unordered(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        tasks = list(tasks)
        if self.workers == 1:
            for t in tasks:
                yield self._in_process(fn, t)
            return
        marks = Path(tempfile.mkdtemp(prefix="ngram-pool-"))
        try:
            yield from self._in_pool(fn, tasks, marks)
        finally:
            shutil.rmtree(marks, ignore_errors=True)

    def _in_process(self, fn: Callable[[T], R], task: T) -> R:
        for attempt in itertools.count():
            try:
                return fn(task)
            except OSError:
                if attempt >= self.max_retries:
                    raise

    def _in_pool(self, fn: Callable[[T], R], tasks: list[T], marks: Path) -> Iterator[R]:
        left = set(range(len(tasks)))  # not finished
        raised = [0] * len(tasks)  # OSErrors so far, per task
        deaths = [0] * len(tasks)  # worker deaths pinned on each task
        suspects: list[int] = []  # running when a worker died, in the order they became suspects
        unexplained = 0  # deaths while no task had started
        for round_ in itertools.count():
            if not left:
                return
            started = marks / str(round_)
            started.mkdir()
            pool = self._open_pool()
            futures: dict[Future, int] = {}
            broken = False

            def submit(i: int) -> None:
                nonlocal broken
                try:
                    futures[pool.submit(_run_marked, fn, str(started / str(i)), tasks[i])] = i
                except BrokenProcessPool:
                    broken = True  # the next pool runs it

            waiting = [i for i in suspects if i in left]
            for i in sorted(left - set(waiting)):
                submit(i)
            if waiting:
                submit(waiting.pop(0))
            try:
                while futures:
                    finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                    for f in finished:
                        i = futures.pop(f)
                        try:
                            result = f.result()
                        except BrokenProcessPool:
                            broken = True
                            continue
                        except OSError:
                            if broken:
                                continue  # the next pool runs it again
                            if raised[i] >= self.max_retries:
                                raise
                            raised[i] += 1
                            submit(i)
                            continue
                        left.discard(i)
                        yield result
                        if i in suspects:
                            suspects.remove(i)
                            if waiting and not broken:
                                submit(waiting.pop(0))
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
            if not broken:
                continue
            self._close_pool()
            running = [i for i in sorted(left) if (started / str(i)).exists()]
            pinned = [i for i in running if i in suspects] or (running if len(running) == 1 else [])
            if not running:
                unexplained += 1
                if unexplained > self.max_retries:
                    raise TaskDiedError(f"worker processes died {unexplained} times before running any task")
                continue
            unexplained = 0
            for i in pinned:
                deaths[i] += 1
                if deaths[i] > self.max_retries:
                    raise TaskDiedError(
                        f"{task_label(tasks[i], i)}: its worker process died on each of {deaths[i]} attempts "
                        "(killed by the OOM killer or a signal? give it more memory: --memory-limit, fewer -j)")
            suspects += [i for i in running if i not in suspects]

    def _open_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_exit_on_interrupt)
        return self._pool

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        self._close_pool()

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

    def __init__(self, address: str | None = None, max_retries: int = MAX_RETRIES) -> None:
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
        self.spare_core = False  # a task per CPU: the cluster's cores are all taken
        self.max_retries = max_retries

    def map_unordered(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        ray = self._ray
        tasks = list(tasks)
        remote = ray.remote(fn).options(num_cpus=1, max_retries=self.max_retries, retry_exceptions=[OSError])
        pending = {remote.remote(t): i for i, t in enumerate(tasks)}
        try:
            while pending:
                finished, _ = ray.wait(list(pending), num_returns=1)
                i = pending.pop(finished[0])
                try:
                    result = ray.get(finished[0])
                except ray.exceptions.RayTaskError as e:
                    # The task's own exception (a ShardError naming file and
                    # line), not Ray's wrapper with a remote traceback.
                    raise e.cause if e.cause is not None else e
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.OutOfMemoryError) as e:
                    raise TaskDiedError(f"{task_label(tasks[i], i)}: its worker died on each of "
                                        f"{self.max_retries + 1} attempts ({type(e).__name__})") from e
                yield result
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
