"""A bounded TCP listener for the package's small HTTP servers (the metrics port, the OTLP receiver).

:class:`BoundedListener` listens on ``host:port`` (0: any free port) as ``async with``, keeps every
open connection with the task serving it, refuses one over ``max_connections`` (closed at once,
unanswered), and on leaving closes every connection, waits :data:`CLOSE_WAIT` seconds for their
tasks, and cancels those still running. A subclass answers a connection in :meth:`_converse`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from types import TracebackType
from typing import ClassVar, Self

log = logging.getLogger(__name__)

CLOSE_WAIT = 2.0
"""Seconds the connections' tasks get to end once closed, before they are cancelled."""


class BoundedListener(ABC):
    """Listen on ``host:port`` and serve each connection in its own task, tracked until it ends."""

    name: ClassVar[str]
    """What listens, for messages (``the metrics server``)."""
    purpose: ClassVar[str]
    """What it listens for, after ``cannot`` (``serve metrics``)."""
    remedy: ClassVar[str]
    """What to do when the port cannot be listened on (``pick another metrics_port``)."""
    max_connections: ClassVar[int | None] = None
    """Connections served at once; another is closed unanswered (``None``: no bound)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self._requested_port = port
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    @property
    def port(self) -> int:
        """The port listened on (known once started)."""
        if self._server is None:
            raise RuntimeError(f"{self.name} is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def __aenter__(self) -> Self:
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self._requested_port)
        except OSError as exc:
            raise OSError(
                f"cannot {self.purpose} on {self.host}:{self._requested_port} ({exc.strerror}); {self.remedy}"
            ) from None
        self._started()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop listening and end every connection (bounded by :data:`CLOSE_WAIT`)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for stream in self._connections.values():
            stream.close()
        tasks = list(self._connections)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=CLOSE_WAIT)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        if server is not None:
            await server.wait_closed()

    def _started(self) -> None:
        """Called once listening (e.g. to log where)."""
        log.debug("%s listens on %s:%d", self.name, self.host, self.port)

    def _refuse_busy(self) -> None:
        """Called for a connection over :attr:`max_connections`, before it is closed."""
        log.debug("%s closed a connection over the %s served at once", self.name, self.max_connections)

    @abstractmethod
    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection; it is closed when this returns or raises."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            if self.max_connections is not None and len(self._connections) >= self.max_connections:
                self._refuse_busy()
                return
            self._connections[task] = writer
            await self._converse(reader, writer)
        except (ConnectionError, OSError):
            return
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
