"""What wakes a tailer: inotify (Linux), watchfiles (other systems) or polling.

A waker's ``wait()`` returns after something may have happened to the watched file
(spurious wake-ups are allowed: the tailer then finds nothing new). Every waker starts
watching when it is created, so a read made right after creating it misses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, Literal, Protocol

# watchfiles' public ``watch()`` creates its watcher lazily, at the first ``next()``, so changes
# made between creating a waker and its first wait would be missed; ``RustNotify`` (what
# ``watch()`` wraps) starts watching when constructed. It is not public API, so pyproject.toml
# pins watchfiles below 2, and tests/tailing exercise this waker against the installed version.
from watchfiles._rust_notify import RustNotify

from coven_codex.tailing import inotify

NotifierKind = Literal["auto", "inotify", "watchfiles", "polling"]

DEFAULT_POLL_INTERVAL: Final = 0.1
"""Seconds between two checks of a polled file."""

WATCHFILES_STEP_MS: Final = 5
"""watchfiles checks for changes every ``step`` ms (its default, 50, adds ~50 ms of latency)."""
WATCHFILES_DEBOUNCE_MS: Final = 10
"""Longest watchfiles groups changes before reporting them (its default is 1,600 ms)."""


class Waker(Protocol):
    """What a tailer waits on between reads; see the module docstring."""

    @property
    def dead(self) -> bool:
        """The watched directory went away: create a waker for the new target."""
        ...

    async def wait(self) -> None:
        """Return after something may have happened to the watched file (spurious wake-ups allowed)."""
        ...

    async def aclose(self) -> None:
        """Stop watching and release what the waker holds."""
        ...


class InotifyWaker:
    """Kernel notifications through the loop's shared inotify instance: zero idle wake-ups."""

    def __init__(self, directory: Path, name: str) -> None:
        self._subscription = inotify.subscribe(directory, name)

    @property
    def dead(self) -> bool:
        """The watched directory went away."""
        return self._subscription.dead

    async def wait(self) -> None:
        """Return after the kernel reported a change to the file, or its directory went away (:attr:`dead`)."""
        await self._subscription.wait()

    async def aclose(self) -> None:
        """Drop the inotify subscription."""
        await self._subscription.aclose()


class WatchfilesWaker:
    """watchfiles' Rust watcher (FSEvents, kqueue, ReadDirectoryChanges, inotify).

    Tuned for latency: it checks every ``WATCHFILES_STEP_MS`` ms in a worker thread,
    which is also what it costs when idle.
    """

    def __init__(self, directory: Path, name: str) -> None:
        self._directory = str(directory)
        self._name = name
        self._stop = threading.Event()
        self._dead = False
        self._pending: asyncio.Future[object] | None = None
        # debug, force_polling, poll_delay_ms, recursive, ignore_permission_denied
        self._notify = RustNotify([str(directory)], False, False, 0, False, False)
        # Its own thread: an idle watch blocks it indefinitely, which must not starve the
        # loop's default executor (asyncio.to_thread) of workers.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coven-watchfiles")

    @property
    def dead(self) -> bool:
        """The watched directory went away (or watchfiles stopped watching it)."""
        return self._dead

    async def wait(self) -> None:
        """Return once watchfiles reports a change to the file, or the directory is gone (then :attr:`dead`)."""
        loop = asyncio.get_running_loop()
        while True:
            if self._pending is None:
                self._pending = loop.run_in_executor(
                    self._thread, self._notify.watch, WATCHFILES_DEBOUNCE_MS, WATCHFILES_STEP_MS, 0, self._stop
                )
            # Shielded: a cancelled wait leaves the thread running; aclose() stops and reaps it.
            result = await asyncio.shield(self._pending)
            self._pending = None
            if not isinstance(result, set):
                self._dead = True
                return
            if self._directory_gone(result):
                self._dead = True
                return
            if any(os.path.basename(changed) == self._name for _change, changed in result):
                return

    def _directory_gone(self, changes: set[tuple[int, str]]) -> bool:
        if any(changed == self._directory for _change, changed in changes):
            return True
        return not os.path.isdir(self._directory)

    async def aclose(self) -> None:
        """Stop the watcher, wait for its thread's current wait to return, and close it."""
        self._stop.set()
        if self._pending is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._pending)
            self._pending = None
        self._notify.close()
        self._thread.shutdown(wait=False)


class PollingWaker:
    """Checks the file's identity, size and modification time every ``interval`` seconds."""

    def __init__(self, path: Path, interval: float) -> None:
        self._path = path
        self._interval = interval
        self._last = self._signature()

    @property
    def dead(self) -> bool:
        """Never: a polled path is simply polled again."""
        return False

    def _signature(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self._path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    async def wait(self) -> None:
        """Return once the file's identity, size or modification time changed (checked every ``interval``)."""
        while True:
            await asyncio.sleep(self._interval)
            signature = self._signature()
            if signature != self._last:
                self._last = signature
                return

    async def aclose(self) -> None:
        """Nothing to release."""
        return None


def default_notifier() -> Literal["inotify", "watchfiles"]:
    """``"inotify"`` on Linux when it is available, else ``"watchfiles"``."""
    if sys.platform.startswith("linux") and inotify.inotify_available():
        return "inotify"
    return "watchfiles"
