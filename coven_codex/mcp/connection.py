"""One shim connection: the secret handshake, then MCP over newline-delimited JSON.

The transport's side of the MCP server: the handshake, reading and framing
(:class:`coven_codex.jsonrpc.FrameDecoder`), back-pressure and the end of the connection. The
JSON-RPC side is the one peer of :mod:`coven_codex.jsonrpc` serving :meth:`McpSession.methods`.

Requests run concurrently, each in its own task; at most ``max_in_flight`` ``tools/call`` run at
once, the rest wait their turn (pings and lists never wait behind spells). Past ``max_pending``
unanswered requests, or past ``max_write_buffer`` bytes of replies the client has not read, the
connection stops reading, which pushes back on the client; a client that reads none of its
replies for ``write_stall_timeout`` is dropped.
``notifications/cancelled`` cancels the matching task, which then sends no response; so does the
client's end of input, after a short grace. Nothing a
client sends can end the daemon: unparseable or oversized messages get a JSON-RPC error, and any
failure ends only this connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import select
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import JsonValue, ValidationError

from coven_codex.jsonrpc import (
    INVALID_REQUEST,
    OVERSIZED,
    FrameDecoder,
    JsonRpcPeer,
    ServedRequest,
    Serving,
)
from coven_codex.mcp.messages import CancelledParams
from coven_codex.mcp.session import McpSession
from coven_codex.support.limits import cut
from mcp_shim import wire

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20
INTERNAL_ERROR_MESSAGE = "internal error in the coven MCP server; see the daemon log"


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds one connection works within (message size, concurrency, back-pressure, timeouts)."""

    max_message_bytes: int = 32 * 2**20
    max_in_flight: int = 64  # tools/call running at once; more wait (and can be cancelled)
    max_pending: int = 1024  # requests accepted but unanswered; past this the connection stops reading
    handshake_timeout: float = 5.0
    eof_grace: float = 1.5  # after the client's EOF, calls still running this long are cancelled
    max_write_buffer: int = 1 << 20  # replies queued for a client that does not read; past this we wait
    write_stall_timeout: float = 30.0  # a client that reads none of its replies this long is dropped
    close_timeout: float = 5.0


@dataclass(frozen=True, slots=True)
class Peer:
    """The process at the other end of the socket, from ``SO_PEERCRED`` (``None`` where unknown)."""

    pid: int | None
    uid: int | None

    def __str__(self) -> str:
        return f"pid {self.pid}" if self.pid is not None else "an unknown process"


def peer_of(writer: asyncio.StreamWriter) -> Peer:
    """The pid and uid of the process connected through ``writer``'s Unix socket, when the OS tells."""
    sock = writer.get_extra_info("socket")
    option = getattr(socket, "SO_PEERCRED", None)
    if sock is None or option is None:
        return Peer(None, None)
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    except OSError:
        return Peer(None, None)
    pid, uid, _gid = struct.unpack("3i", raw)
    return Peer(pid, uid)


def _peer_gone(writer: asyncio.StreamWriter) -> bool:
    """True when the peer closed both directions, not just its sending side: a socket's POLLHUP,
    or POLLERR on a pipe (stdio: stdin ended, and nobody reads stdout any more either). A regular
    file never reports either."""
    channel = writer.get_extra_info("socket") or writer.get_extra_info("pipe")
    if channel is None:
        return True
    poller = select.poll()
    try:
        poller.register(channel.fileno(), select.POLLHUP | select.POLLERR)
        return any(event & (select.POLLHUP | select.POLLERR) for _, event in poller.poll(0))
    except (OSError, ValueError):
        return True


class Connection:
    """One shim connection; see the module docstring. :meth:`run` serves it."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: McpSession,
        secret: str | None,
        limits: ConnectionLimits,
    ) -> None:
        """``secret=None``: no handshake (stdio, where the client is the process that started the server)."""
        self._reader = reader
        self._writer = writer
        self._session = session
        self._secret = secret.encode() if secret is not None else None
        self._limits = limits
        self._slots = asyncio.Semaphore(limits.max_in_flight)
        self._stalled = False
        self.peer = peer_of(writer)
        methods = session.methods(self._notify)
        call = methods["tools/call"]

        async def tools_call(request: ServedRequest) -> JsonValue:
            async with self._slots:
                return await call(request)

        methods["tools/call"] = tools_call
        serving = Serving(
            methods,
            max_pending=limits.max_pending,
            # Requests sent right behind it (clients pipeline tools/list) must see the session initialised.
            sequential=frozenset({"initialize"}),
            internal_error=INTERNAL_ERROR_MESSAGE,
        )
        self._rpc = JsonRpcPeer(
            self._write,
            self._drain,
            on_request=serving,
            on_notification=self._on_notification,
            jsonrpc_member=True,
            answer_within=limits.write_stall_timeout,
            label=f"MCP client {self.peer}",
        )

    async def run(self) -> None:
        """Serve until the client closes; never raises (except cancellation)."""
        try:
            leftover = await self._handshake() if self._secret is not None else b""
            if leftover is not None:
                await self._serve(leftover)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("MCP connection from %s failed; closing it", self.peer)
        finally:
            await self._rpc.cancel_served()  # normally none are left; never leave a call unowned
            self._writer.close()
            try:
                async with asyncio.timeout(self._limits.close_timeout):
                    with contextlib.suppress(ConnectionError, OSError):
                        await self._writer.wait_closed()
            except TimeoutError:  # replies still queued for a client that does not read them
                self._writer.transport.abort()

    async def _handshake(self) -> bytes | None:
        """Check the hello line; return bytes read past it, or None after refusing."""
        if self.peer.uid is not None and self.peer.uid != os.getuid():
            return await self._refused(f"connection from another user (uid {self.peer.uid})")
        data = b""
        try:
            async with asyncio.timeout(self._limits.handshake_timeout):
                while b"\n" not in data:
                    chunk = await self._reader.read(wire.HANDSHAKE_MAX_BYTES)
                    if not chunk:
                        log.info("MCP connection from %s closed before the handshake", self.peer)
                        return None
                    data += chunk
                    if len(data) > wire.HANDSHAKE_MAX_BYTES and b"\n" not in data:
                        return await self._refused("handshake line too long")
        except TimeoutError:
            return await self._refused(f"no handshake within {self._limits.handshake_timeout:g}s")
        line, _, leftover = data.partition(b"\n")
        hello = wire.parse_line(line)
        if hello is None or hello.get("coven") != "hello":
            return await self._refused("the first line was not a coven handshake")
        if hello.get("version") != wire.WIRE_VERSION:
            return await self._refused(f"unsupported handshake version {hello.get('version')!r}")
        offered = hello.get("secret")
        assert self._secret is not None
        if not isinstance(offered, str) or not hmac.compare_digest(offered.encode(), self._secret):
            return await self._refused("wrong session secret")
        self._writer.write(wire.welcome())
        await self._writer.drain()
        log.debug("MCP shim from %s authenticated", self.peer)
        return leftover

    async def _refused(self, reason: str) -> bytes | None:
        """Log and tell the client why it is refused; None, for the handshake's caller."""
        log.warning("refused an MCP connection from %s: %s", self.peer, reason)
        with contextlib.suppress(ConnectionError, OSError):
            self._writer.write(wire.refused(reason))
            await self._writer.drain()
        return None

    async def _serve(self, leftover: bytes) -> None:
        decoder = FrameDecoder(self._limits.max_message_bytes)
        try:
            data = leftover
            while not self._stalled:
                for frame in decoder.feed(data):
                    if frame is OVERSIZED:
                        await self._oversized()
                    else:
                        assert isinstance(frame, bytes)
                        await self._rpc.feed(frame)
                    await self._drain(self._limits.write_stall_timeout)
                    if self._stalled:
                        break
                else:
                    data = await self._reader.read(READ_CHUNK)
                    if not data:
                        break
        except (ConnectionError, OSError) as exc:
            if not self._stalled:
                log.info("MCP connection from %s broke: %s", self.peer, exc)
            await self._rpc.cancel_served()
            return
        except asyncio.CancelledError:
            await self._rpc.cancel_served()
            raise
        if self._stalled or _peer_gone(self._writer):
            log.debug("MCP client %s closed the connection; cancelling its calls", self.peer)
            await self._rpc.cancel_served()
            return
        # The client only half-closed (the shim does when its stdin closes): answer what finishes
        # within the grace (the shim still relays for a while), then cancel the rest.
        running = await self._rpc.settle(self._limits.eof_grace)
        if running:
            log.info("MCP client %s closed its side; cancelling its %d running call(s)", self.peer, running)
            await self._rpc.cancel_served()

    async def _oversized(self) -> None:
        limit = self._limits.max_message_bytes
        log.warning("MCP client %s sent a message over %d bytes; dropped", self.peer, limit)
        await self._rpc.respond_error(
            None, INVALID_REQUEST, f"message too large (limit {limit} bytes)", within=self._limits.write_stall_timeout
        )

    def _write(self, data: bytes) -> None:
        """Queue one line for the client (dropped once the connection is closing)."""
        if self._writer.is_closing():
            return
        try:
            self._writer.write(data)
        except (ConnectionError, OSError, RuntimeError):
            log.debug("dropping a message to a closed MCP connection")

    async def _drain(self, within: float) -> None:
        """Wait while too many replies are queued for the client; drop a client that stopped reading.

        Past ``max_write_buffer`` queued bytes nothing more is read from the client (so it cannot
        make the daemon queue more) until it reads; after ``within`` seconds of that (the
        ``write_stall_timeout``), the connection is aborted, with one log line.
        """
        transport = self._writer.transport
        if self._stalled or transport.get_write_buffer_size() <= self._limits.max_write_buffer:
            return
        try:
            async with asyncio.timeout(within):
                await self._writer.drain()
        except TimeoutError:
            if self._stalled:  # another waiter timed out at the same moment and said it
                return
            self._stalled = True
            log.warning(
                "MCP client %s read none of its replies for %gs (%d bytes queued); closing its connection",
                self.peer,
                within,
                transport.get_write_buffer_size(),
            )
            transport.abort()

    def _notify(self, method: str, params: Mapping[str, JsonValue]) -> None:
        self._rpc.notify_nowait(method, params)

    def _on_notification(self, method: str, params: dict[str, JsonValue]) -> None:
        if method != "notifications/cancelled":
            self._session.notification(method, params)
            return
        try:
            cancelled = CancelledParams.model_validate(params)
        except ValidationError:
            return
        if self._rpc.cancel(cancelled.requestId):
            reason = f" ({cut(cancelled.reason)})" if cancelled.reason else ""
            log.info("MCP client %s cancelled request %s%s", self.peer, cut(repr(cancelled.requestId)), reason)
