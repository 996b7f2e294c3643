"""SIGINT and SIGTERM for ``coven-codex run``, from its first line to its exit (docs/operations.md).

Python's own disposition of SIGTERM is the kernel's default: the process dies by the signal,
with no log line and nothing cleaned up. The event loop's handlers (``loop.add_signal_handler``)
exist only while a loop runs, and a loop that closes puts the default back; start-up (importing
the daemon's modules takes 0.05-0.4 s, more on a loaded machine), the settings checks and the
steps between the event loops were all unprotected. So ``run`` installs one handler for both
signals as the first thing its ``main`` does, before the daemon's modules are imported, and
keeps it until the process exits:

- before the daemon serves, a signal is remembered, and ``run`` stops at the next step (before
  it takes a lock or starts a Codex, or once it has), exit status 0;
- while an event loop runs (:meth:`StopSignals.bind`), the signal also sets the daemon's stop
  event, through the loop's thread-safe call, and a wake-up descriptor wakes the loop even when
  the kernel gave the signal to a worker thread;
- a second signal after the first exits at once with status 1 (as documented for a shutdown).

This also replaces ``loop.add_signal_handler``, which learns of a signal only from the byte the C
handler writes to the loop's self-pipe. That pipe also gets a byte for every thread-safe call (each
finished ``asyncio.to_thread`` job), and 200-300 of them during one long step of the loop (a
loaded machine) fill it: the signal's byte was dropped (``BlockingIOError`` on stderr) and the
SIGTERM lost for good, the daemon running on without a log line (the Codex 0.47 shutdown "hang",
issue 26 item 14). Here the handler itself records the signal, and the wake-up descriptor is a
socket of its own that only signals write to.

What this cannot cover is the interpreter's own start, before any code of coven-codex runs (tens
of milliseconds, more under load): a signal then takes the default action, when nothing of the
daemon exists yet to be left behind.

The phases are :class:`StopPhase`; the handler and the stop event run in the main thread (Python
runs signal handlers there), so no lock is needed.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import signal
import socket
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (asyncio is imported by the daemon anyway; not before the handler is in place)
    import asyncio
    from collections.abc import AsyncIterator

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop ``coven-codex run``."""
SECOND_SIGNAL_EXIT = 1
"""Exit status when a second signal arrives while the daemon stops."""


class StopPhase(enum.Enum):
    """Where the process is as far as stopping goes."""

    UNARMED = "unarmed"
    """No handler installed: the signals have the default action (before :meth:`StopSignals.install`)."""
    ARMED = "armed"
    """The handler is installed and no signal came yet."""
    STOPPING = "stopping"
    """A signal came: the daemon stops (or never starts); a second one exits at once."""


class StopSignals:
    """The process's one handler of SIGINT and SIGTERM for ``coven-codex run`` (see the module docstring)."""

    def __init__(self) -> None:
        self.phase = StopPhase.UNARMED
        self.received: signal.Signals | None = None
        """The signal that asked the daemon to stop, once one did."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._wakeup: tuple[socket.socket, socket.socket] | None = None

    def install(self) -> None:
        """Take over SIGINT and SIGTERM (idempotent; main thread only)."""
        if self.phase is not StopPhase.UNARMED:
            return
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)
        self.phase = StopPhase.ARMED

    @property
    def requested(self) -> bool:
        """A signal asked the daemon to stop."""
        return self.phase is StopPhase.STOPPING

    def describe(self) -> str:
        """The name of the signal received (``"a signal"`` before one came)."""
        return self.received.name if self.received is not None else "a signal"

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.phase is StopPhase.STOPPING:
            # (logging from a signal handler: the main thread may be inside a log call; it re-enters)
            log.error("second %s during shutdown: exiting now", signal.Signals(signum).name)
            os._exit(SECOND_SIGNAL_EXIT)
        self.phase = StopPhase.STOPPING
        self.received = signal.Signals(signum)
        loop, event = self._loop, self._event
        if loop is not None and event is not None:
            loop.call_soon_threadsafe(self._announce, event)

    def _announce(self, event: asyncio.Event) -> None:
        log.info("%s received: shutting down", self.describe())
        event.set()

    def bind(self, stop: asyncio.Event, loop: asyncio.AbstractEventLoop) -> None:
        """From now on a signal sets ``stop`` in ``loop`` (the running loop); set it at once if a
        signal came already. Undo with :meth:`unbind` before the loop closes."""
        self.install()
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._wakeup = (reader, writer)
        loop.add_reader(reader.fileno(), self._drain, reader)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._loop, self._event = loop, stop
        if self.requested:
            self._announce(stop)

    def unbind(self) -> None:
        """Stop setting the loop's event (the signal is still remembered, a second still exits)."""
        if self._loop is None or self._wakeup is None:
            return
        signal.set_wakeup_fd(-1)
        reader, writer = self._wakeup
        self._loop.remove_reader(reader.fileno())
        reader.close()
        writer.close()
        self._loop = self._event = self._wakeup = None

    @staticmethod
    def _drain(reader: socket.socket) -> None:
        """The wake-up bytes (signal numbers) only wake the loop; Python runs the handler itself."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while reader.recv(256):
                pass


STOP = StopSignals()
"""The one instance: signal handlers belong to the process."""


@contextlib.asynccontextmanager
async def signals_cancel(task: asyncio.Task[None]) -> AsyncIterator[None]:
    """While inside, SIGINT and SIGTERM cancel ``task`` (the adapters' clean exit), through
    :data:`STOP`'s own wake-up socket: ``loop.add_signal_handler`` would lose a signal whose byte
    found the loop's self-pipe full (see the module docstring)."""
    import asyncio  # noqa: PLC0415 (not at import: the handler goes in before anything heavy)

    stop = asyncio.Event()
    STOP.bind(stop, asyncio.get_running_loop())

    async def cancel_on_stop() -> None:
        await stop.wait()
        task.cancel()

    watcher = asyncio.create_task(cancel_on_stop(), name="stop signals")
    try:
        yield
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        STOP.unbind()
