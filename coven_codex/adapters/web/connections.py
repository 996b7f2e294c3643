"""Bounds on the page server's connections, below the web framework: header time, per client, in total.

uvicorn has no limit on how long a client may take to send its request headers, and none on
how many connections it holds: 1,100 connections that each send half a request kept the page
unreachable (and ran the process out of file descriptors). :func:`guarded_protocol` makes
uvicorn's HTTP protocol class enforce three bounds, every one on the event loop, with no polling:

- **header time**: a connection must finish its request's headers within :data:`HEADER_TIMEOUT`
  seconds of connecting (or of its previous response, on a kept-alive connection); otherwise it
  is closed.
- **per client** (by IP address) and **in total**: when a new connection would pass
  :attr:`ConnectionLimits.per_client` or :attr:`ConnectionLimits.total`, the oldest connection
  that is only *waiting* (for its request's headers, or idle between requests) of that client (or
  of anyone, for the total) is closed to make room. A slow client can therefore not keep a
  legitimate one out: the newcomer evicts the oldest idler, and a real browser sends its
  headers at once. Only when every connection is busy (a request being served, a live channel)
  is the newcomer refused, with ``503`` and a message.

The total is also kept below half the process's open-file limit, so the process never runs out
of descriptors.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import resource
from dataclasses import dataclass, field

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

log = logging.getLogger(__name__)

HEADER_TIMEOUT = 10.0
"""Seconds a connection has to send its request headers."""
PER_CLIENT = 256
"""Connections one IP address may hold (a tab holds one live channel and a few requests)."""
TOTAL = 512
"""Connections the server holds at most (lowered to half the open-file limit when that is smaller)."""
_REFUSAL_BODY = b"too many connections are busy; close some tabs and try again.\n"
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    + f"content-length: {len(_REFUSAL_BODY)}\r\n\r\n".encode()
    + _REFUSAL_BODY
)


class Phase(enum.Enum):
    """Where one connection is."""

    WAITING = "waiting"
    """For a request's headers (new, or idle between requests): may be evicted."""
    BUSY = "busy"
    """A request is being served."""
    UPGRADED = "upgraded"
    """A live channel (WebSocket); the connection is the WebSocket protocol's now."""


@dataclass(eq=False)
class Tracked:
    """One accepted connection."""

    transport: asyncio.Transport
    client: str
    phase: Phase = Phase.WAITING

    def closed(self) -> bool:
        """Whether the connection is closed or closing (it no longer counts against a bound)."""
        return self.transport.is_closing()


@dataclass
class ConnectionLimits:
    """The bounds and the connections they apply to (oldest first)."""

    per_client: int = PER_CLIENT
    total: int = TOTAL
    header_timeout: float = HEADER_TIMEOUT
    connections: list[Tracked] = field(default_factory=list)
    evicted: int = 0
    refused: int = 0
    timed_out: int = 0

    @classmethod
    def for_this_process(cls) -> ConnectionLimits:
        """The defaults, with the total kept below half the soft open-file limit."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        total = TOTAL if soft == resource.RLIM_INFINITY else max(16, min(TOTAL, soft // 2))
        return cls(per_client=min(PER_CLIENT, total), total=total)

    def admit(self, transport: asyncio.Transport, client: str) -> Tracked | None:
        """Track a new connection, evicting the oldest waiting ones over a bound; None: refused."""
        self.connections = [tracked for tracked in self.connections if not tracked.closed()]
        mine = [tracked for tracked in self.connections if tracked.client == client]
        if len(mine) >= self.per_client and not self._evict(mine):
            return None
        if len(self.connections) >= self.total and not self._evict(self.connections):
            return None
        tracked = Tracked(transport, client)
        self.connections.append(tracked)
        return tracked

    def _evict(self, among: list[Tracked]) -> bool:
        for tracked in among:  # oldest first
            if tracked.phase is Phase.WAITING and not tracked.closed():
                tracked.transport.abort()
                self.evicted += 1
                if self.evicted == 1 or self.evicted % 1000 == 0:
                    log.warning(
                        "too many connections waiting for their request (%d evicted so far): "
                        "a client is opening connections and not using them",
                        self.evicted,
                    )
                return True
        return False


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol class, bounded by ``limits`` (pass it as ``Config(http=...)``)."""

    class GuardedH11Protocol(H11Protocol):
        def __init__(
            self,
            config: Config,
            server_state: ServerState,
            app_state: dict[str, object],
            _loop: asyncio.AbstractEventLoop | None = None,
        ) -> None:
            super().__init__(config, server_state, app_state, _loop)
            self._tracked: Tracked | None = None
            self._header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            peer = transport.get_extra_info("peername")
            client = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
            tracked = limits.admit(transport, client)
            if tracked is None:
                limits.refused += 1
                transport.write(REFUSED)
                transport.close()
                return
            self._tracked = tracked
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._tracked is None:
                return  # refused: the base class never saw it
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._tracked is None:
                return
            super().data_received(data)
            if (
                self._tracked.phase is Phase.WAITING
                and self.conn.their_state is not h11.IDLE
                and not self.transport.is_closing()
            ):
                self._tracked.phase = Phase.BUSY  # the request's headers are in
                self._disarm()

        def handle_websocket_upgrade(self, event: h11.Request) -> None:
            if self._tracked is not None:
                self._tracked.phase = Phase.UPGRADED
            self._disarm()
            super().handle_websocket_upgrade(event)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            idle = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
            if self._tracked is not None and idle:
                self._tracked.phase = Phase.WAITING  # kept alive: the next request's headers are timed too
                self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(limits.header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if self._tracked is not None and self._tracked.phase is Phase.WAITING and not self.transport.is_closing():
                limits.timed_out += 1
                self.transport.abort()

    return GuardedH11Protocol
