"""The worker threads sync spells run in.

A ``ThreadPoolExecutor`` joins its threads at interpreter exit, so one sync spell stuck in
an endless call would keep the daemon from ever exiting. These workers are daemon threads:
a spell that never returns is abandoned at exit instead (its call was cancelled long before).

A thread cannot be killed, so a sync spell that timed out (or whose call was cancelled) keeps
its thread until it returns. Such a thread is *abandoned* (:meth:`SpellThreads.abandon`): it no
longer counts against ``max_workers``, so the pool starts another thread and other spells keep
working. Threads are never more than ``max_threads`` in all; once that many are stuck, new work
is refused with :class:`SpellThreadsExhausted`, whose message names the hung spells. A stuck
thread that finally returns rejoins the pool (or ends, when the pool has enough threads).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger(__name__)

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class SpellThreadsExhausted(RuntimeError):
    """Every thread the pool may start is stuck in a sync spell that timed out."""


class SpellThreads(Executor):
    """At most ``max_workers`` working daemon threads, started on demand, plus threads abandoned
    to hung spells, never more than ``max_threads`` in all (default: four times ``max_workers``)."""

    def __init__(self, max_workers: int = 8, name: str = "spell", *, max_threads: int | None = None) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max_workers = max_workers
        self._max_threads = max(max_workers, max_threads if max_threads is not None else 4 * max_workers)
        self._name = name
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0
        self._waiting = 0  # workers about to take work from the queue
        self._pending = 0  # work in the queue not yet taken
        self._abandoned: dict[Future[Any], str] = {}  # running work whose caller gave up -> spell name
        self._exhausted_logged = False
        self._started = 0
        self._closed = False

    @property
    def abandoned(self) -> int:
        """Threads stuck in work whose caller gave up."""
        with self._lock:
            return len(self._abandoned)

    @property
    def threads(self) -> int:
        """Threads alive in the pool (working, waiting or abandoned)."""
        with self._lock:
            return self._workers

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Queue ``fn(*args, **kwargs)`` for a worker thread, starting one if needed.

        Raises :class:`SpellThreadsExhausted` when every thread the pool may start is stuck.
        """
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the spell threads are shut down")
            if self._waiting == 0 and self._workers - len(self._abandoned) <= 0 and self._workers >= self._max_threads:
                raise SpellThreadsExhausted(self._exhausted_message())
            self._queue.put((future, fn, args, kwargs))
            self._pending += 1
            self._grow()
        return future

    def abandon(self, future: Future[Any], spell_name: str) -> None:
        """The caller of ``future`` gave up while it runs: free its place for other work."""
        with self._lock:
            if future.done() or not future.running() or future in self._abandoned:
                return
            self._abandoned[future] = spell_name
            self._grow()

    def _grow(self) -> None:
        """Start a thread when work waits and the pool may (call with the lock held)."""
        if (
            self._pending > self._waiting
            and self._workers - len(self._abandoned) < self._max_workers
            and self._workers < self._max_threads
        ):
            self._workers += 1
            self._waiting += 1
            self._started += 1
            threading.Thread(target=self._work, name=f"{self._name}-{self._started}", daemon=True).start()

    def _exhausted_message(self) -> str:
        hung = Counter(self._abandoned.values())
        names = ", ".join(f"{name!r} ×{count}" if count > 1 else repr(name) for name, count in hung.most_common(5))
        if not self._exhausted_logged:
            self._exhausted_logged = True
            log.error(
                "all %d spell threads are stuck in sync spells that timed out (%s); sync spells are refused "
                "until one returns",
                self._max_threads,
                names,
            )
        return (
            f"no thread is free for sync spells: all {self._max_threads} are stuck in spells that timed out "
            f"and never returned ({names}); make those spells return (check ctx.cancelled) or restart the daemon"
        )

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            with self._lock:
                self._waiting -= 1
                if item is not None:
                    self._pending -= 1
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            with self._lock:
                if self._abandoned.pop(future, None) is not None:
                    self._exhausted_logged = False
                del item, future, fn, args, kwargs
                if self._workers - len(self._abandoned) > self._max_workers:
                    self._workers -= 1  # the pool has enough threads without this one
                    return
                self._waiting += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers; ``wait`` is ignored (spells may never return, see the module doc)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = self._workers
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in range(workers):
            self._queue.put(None)
