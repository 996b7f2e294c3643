"""What wakes a tailer: inotify (Linux), watchfiles (other systems) or polling.

A waker's ``wait()`` returns after something may have happened to the watched file
(spurious wake-ups are allowed: the tailer then finds nothing new). A waker watches from its
creation (inotify, polling), or its first ``wait()`` returns once it watches (watchfiles, whose
public ``watch()`` starts its watcher when first iterated), so a read made after creating it and
the read after its first wait miss nothing. A waker whose notifier fails
raises :class:`WakerFailed` from ``wait()``: the tailer then polls, saying so once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from watchfiles import Change, watch

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


class WakerFailed(Exception):
    """A waker's notifier stopped working (or never started): the tailer polls instead, saying why once."""


class WatchPhase(Enum):
    """Where a :class:`WatchfilesWaker`'s watcher is."""

    NEW = "new"
    """Not started: the first :meth:`WatchfilesWaker.wait` starts it and returns once it watches."""
    STARTING = "starting"
    """Started; a first wait cut short (cancelled) before it watched is resumed by the next one."""
    WATCHING = "watching"
    """Watching: a wait returns on a change to the file (or when the directory goes away)."""
    DEAD = "dead"
    """The directory went away, or the watcher ended: the tailer creates a waker for the new target."""
    FAILED = "failed"
    """watchfiles could not watch (it raised): the tailer falls back to polling."""
    CLOSED = "closed"
    """:meth:`WatchfilesWaker.aclose` was called."""


class _WatchingSignal:
    """The ``stop_event`` given to watchfiles' public ``watch()`` (anything with ``is_set()``).

    watchfiles asks ``is_set()`` between two checks for changes, that is only once its watcher
    exists: the first call says the watcher is watching (``on_watching``, called once, in the
    watch thread); every call says whether to stop.
    """

    def __init__(self, on_watching: Callable[[], None]) -> None:
        self._stop = threading.Event()
        self._on_watching: Callable[[], None] | None = on_watching

    def set(self) -> None:
        """Ask the watcher to stop (within one ``step``)."""
        self._stop.set()

    def is_set(self) -> bool:
        """Whether to stop; the first call also announces that the watcher watches."""
        announce, self._on_watching = self._on_watching, None
        if announce is not None:
            announce()
        return self._stop.is_set()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class WatchfilesWaker:
    """watchfiles' Rust watcher (FSEvents, kqueue, ReadDirectoryChanges, inotify) through its public
    ``watch()``, in a thread of its own.

    Tuned for latency: the watcher checks every ``WATCHFILES_STEP_MS`` ms, which is also what it
    costs when idle. ``watch()`` creates its watcher when first iterated, so the first :meth:`wait`
    starts it and returns (spuriously, for the caller to read again) once it watches: nothing
    written before that is missed by the read after, nothing after by the watcher.
    """

    def __init__(self, directory: Path, name: str) -> None:
        self._directory = str(directory)
        self._name = name
        self._phase = WatchPhase.NEW
        self._signal: _WatchingSignal | None = None
        self._watching: asyncio.Future[None] | None = None
        self._changes: Generator[set[tuple[Change, str]], None, None] | None = None
        self._pending: asyncio.Future[set[tuple[Change, str]] | None] | None = None
        # Its own thread: an idle watch blocks it indefinitely, which must not starve the
        # loop's default executor (asyncio.to_thread) of workers.
        self._thread: ThreadPoolExecutor | None = None

    @property
    def phase(self) -> WatchPhase:
        """Where the watcher is (:class:`WatchPhase`)."""
        return self._phase

    @property
    def dead(self) -> bool:
        """The watched directory went away (or watchfiles stopped watching it)."""
        return self._phase is WatchPhase.DEAD

    async def wait(self) -> None:
        """Return once watchfiles reports a change to the file, or the directory is gone (then :attr:`dead`).

        The first call returns once the watcher watches. Raises :class:`WakerFailed` when watchfiles
        cannot watch the directory.
        """
        if self._phase is WatchPhase.NEW:
            self._start()
        if self._phase is WatchPhase.STARTING:
            assert self._watching is not None and self._pending is not None
            first: list[asyncio.Future[Any]] = [self._watching, self._pending]
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            self._phase = WatchPhase.WATCHING
            if self._pending.done():
                self._take()  # it ended (or failed) before it watched
            return
        while self._phase is WatchPhase.WATCHING:
            if self._pending is None:
                assert self._thread is not None and self._changes is not None
                self._pending = asyncio.get_running_loop().run_in_executor(self._thread, next, self._changes, None)
            # Shielded: a cancelled wait leaves the thread running; aclose() stops and reaps it.
            await asyncio.shield(self._pending)
            if self._take():
                return

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        watching: asyncio.Future[None] = loop.create_future()

        def announce() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_resolve, watching)

        self._watching = watching
        self._signal = _WatchingSignal(announce)
        self._changes = watch(
            self._directory,
            watch_filter=None,
            debounce=WATCHFILES_DEBOUNCE_MS,
            step=WATCHFILES_STEP_MS,
            stop_event=self._signal,
            rust_timeout=0,
            raise_interrupt=False,
            force_polling=False,
            recursive=False,
            ignore_permission_denied=False,
            debug=False,
        )
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coven-watchfiles")
        self._pending = loop.run_in_executor(self._thread, next, self._changes, None)
        self._phase = WatchPhase.STARTING

    def _take(self) -> bool:
        """Read the finished watch: whether the caller should look at the file (sets the phase)."""
        pending, self._pending = self._pending, None
        assert pending is not None
        try:
            changes = pending.result()
        except FileNotFoundError:
            self._phase = WatchPhase.DEAD  # the directory vanished before the watcher started
            return True
        except Exception as exc:
            self._phase = WatchPhase.FAILED
            raise WakerFailed(f"watchfiles cannot watch {self._directory}: {exc}") from exc
        if changes is None or self._directory_gone(changes):
            self._phase = WatchPhase.DEAD
            return True
        return any(os.path.basename(changed) == self._name for _change, changed in changes)

    def _directory_gone(self, changes: set[tuple[Change, str]]) -> bool:
        if any(changed == self._directory for _change, changed in changes):
            return True
        return not os.path.isdir(self._directory)

    async def aclose(self) -> None:
        """Stop the watcher, wait for its thread's current wait to return, and close it.

        watchfiles' own watcher thread (inotify's loop) ends, closing its descriptors, a moment later."""
        self._phase = WatchPhase.CLOSED
        if self._signal is not None:
            self._signal.set()
        if self._pending is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._pending)
            self._pending = None
        if self._changes is not None:
            self._changes.close()  # leaves watch()'s ``with`` block: the watcher is closed
        if self._thread is not None:
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
