"""Where the Codex processes live: a small pool of ``codex app-server`` processes for one CODEX_HOME.

Every conversation's thread runs on one of at most ``size`` shared processes (the
``app_servers`` setting, default 1): :meth:`AppServerPool.connect` hands out the least used live
connection, starting a process only when none runs or when every running one already serves
threads and the pool may grow. Processes start one at a time (two app-servers starting at the
same moment on one CODEX_HOME can fail on some versions: "failed to initialize sqlite state
runtime"). A conversation costs no process and no file descriptor: its thread is attached to a
connection while its session has it open, and when the last thread is let go (every
conversation idle-reaped or evicted) the process is ended too.

A process that died (or was killed because it stopped answering) is replaced lazily, by the
next :meth:`connect`, after the restart backoff (:func:`~coven_codex.agent.backoff.backoff` of
``restart_backoff``, doubling for each failure in a row; a process that completed a turn, or
ran longer than the backoff limit, starts the count over).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from coven_codex.agent.backoff import MAX_BACKOFF, backoff
from coven_codex.codex.appserver.connection import AppServerConnection
from coven_codex.codex.drivers.base import DriverError, DriverSettings

log = logging.getLogger(__name__)


class AppServerPool:
    """Up to ``size`` shared ``codex app-server`` processes (module docstring)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        settings: DriverSettings,
        size: int = 1,
        restart_backoff: float = 1.0,
    ) -> None:
        if size < 1:
            raise ValueError("an app-server pool needs at least one process")
        self.command = tuple(command)
        self.env = dict(env)
        self.cwd = cwd
        self.settings = settings
        self.size = size
        self.restart_backoff = restart_backoff
        self._connections: list[AppServerConnection] = []
        self._lock = asyncio.Lock()
        self._failures = 0
        self._failed_at = 0.0
        self._closed = False
        self._closing: set[asyncio.Future[None]] = set()

    @property
    def pids(self) -> list[int]:
        """The live processes (group leaders)."""
        return [pid for c in self._connections if c.alive and (pid := c.pid) is not None]

    @property
    def connections(self) -> list[AppServerConnection]:
        """The live connections."""
        return [c for c in self._connections if c.alive]

    async def connect(self) -> AppServerConnection:
        """A live connection for one more thread (call :meth:`release` when the thread is closed);
        raises :class:`DriverError` when no process can be started."""
        async with self._lock:
            if self._closed:
                raise DriverError("the Codex app-server pool is closed")
            live = self.connections
            self._connections = live
            unused = [c for c in live if c.users == 0]
            if live and (unused or len(live) >= self.size):
                chosen = min(live, key=lambda c: c.users)
            else:
                await self._wait_backoff()
                chosen = AppServerConnection(
                    self.command, env=self.env, cwd=self.cwd, settings=self.settings, on_lost=self._lost
                )
                try:
                    await chosen.start()
                except DriverError:
                    if chosen.lost is None:  # (a process that died was counted when it was lost)
                        self._note_failure(None)
                    raise
                self._connections.append(chosen)
                log.info("started a shared Codex app-server (pid %s; %d running)", chosen.pid, len(self._connections))
            chosen.users += 1
            return chosen

    async def release(self, connection: AppServerConnection) -> None:
        """A thread that :meth:`connect` placed on ``connection`` is closed. The last one ends the
        process (and returns once it is gone): when every conversation is idle (reaped,
        evicted) no Codex process runs."""
        connection.users = max(0, connection.users - 1)
        if connection.users == 0 and not self._closed:
            connection.retire()  # at once: connect() never hands it out again
            self._connections = [c for c in self._connections if c is not connection]
            if connection.lost is None:
                log.info(
                    "no conversation uses the shared Codex app-server (pid %s) any more; ending it", connection.pid
                )
            closing = asyncio.ensure_future(connection.aclose())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
            await asyncio.shield(closing)  # (a cancelled caller leaves it to finish; aclose() waits for it)

    async def aclose(self) -> None:
        """End every process (politely first: see :meth:`AppServerConnection.aclose`), and wait
        for those being ended already."""
        self._closed = True
        connections, self._connections = self._connections, []
        await asyncio.gather(*(c.aclose() for c in connections), *self._closing)

    def _lost(self, connection: AppServerConnection) -> None:
        self._note_failure(connection)

    def _note_failure(self, connection: AppServerConnection | None) -> None:
        now = asyncio.get_running_loop().time()
        lived_well = connection is not None and (connection.served or now - connection.started_at > MAX_BACKOFF)
        self._failures = 1 if lived_well else self._failures + 1
        self._failed_at = now

    async def _wait_backoff(self) -> None:
        if self._failures == 0:
            return
        loop = asyncio.get_running_loop()
        delay = backoff(self.restart_backoff, self._failures) - (loop.time() - self._failed_at)
        if delay > 0:
            log.info("restarting the shared Codex app-server in %.1fs (failure %d in a row)", delay, self._failures)
            await asyncio.sleep(delay)
