"""The worker threads sync spells run in.

A ``ThreadPoolExecutor`` joins its threads at interpreter exit, so one sync spell stuck in
an endless call would keep the daemon from ever exiting. These workers are daemon threads:
a spell that never returns is abandoned at exit instead (its call was cancelled long before).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class SpellThreads(Executor):
    """At most ``max_workers`` daemon threads, started on demand."""

    def __init__(self, max_workers: int = 8, name: str = "spell") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max_workers = max_workers
        self._name = name
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0
        self._waiting = 0  # workers about to take work from the queue
        self._pending = 0  # work in the queue not yet taken
        self._closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the spell threads are shut down")
            self._queue.put((future, fn, args, kwargs))
            self._pending += 1
            if self._pending > self._waiting and self._workers < self._max_workers:
                self._workers += 1
                self._waiting += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._workers}", daemon=True).start()
        return future

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
            del item, future, fn, args, kwargs
            with self._lock:
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
