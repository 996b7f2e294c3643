"""The JSON-RPC peer: request ids, pending requests with bounded waits, routing of what arrives.

The owner gives the peer a ``write`` coroutine (one encoded line, waiting at most the seconds it
is given for room in the transport) and two handlers, and feeds it every line it reads
(:meth:`JsonRpcPeer.feed`). The peer never reads or owns the transport, so one implementation
serves a child process's pipes as well as a socket. :meth:`JsonRpcPeer.fail_pending` ends every
waiting request when the transport is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from pydantic import JsonValue, ValidationError

from coven_codex.jsonrpc.messages import (
    ErrorBody,
    ErrorResponse,
    Incoming,
    Notification,
    Outgoing,
    Request,
    RequestId,
    Response,
    encode,
)

log = logging.getLogger(__name__)

Params = Mapping[str, JsonValue]
Write = Callable[[bytes, float], Awaitable[None]]
"""Writes one line, waiting at most the given seconds for room (the owner's transport)."""
OnRequest = Callable[[RequestId, str, dict[str, JsonValue]], None]
"""A request of the other side arrived (answer it with :meth:`JsonRpcPeer.respond` or
:meth:`JsonRpcPeer.respond_error`)."""
OnNotification = Callable[[str, dict[str, JsonValue]], None]
"""A notification arrived."""


class RpcError(Exception):
    """The other side answered a request with an error (``code``: the JSON-RPC error code)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class RequestTimeout(TimeoutError):
    """No answer (or no room to write the request) within the request's bound."""


class JsonRpcPeer:
    """One side of a JSON-RPC conversation over newline-delimited JSON (module docstring)."""

    def __init__(
        self,
        write: Write,
        *,
        on_request: OnRequest,
        on_notification: OnNotification,
        jsonrpc_member: bool = False,
        label: str = "the other side",
    ) -> None:
        """``jsonrpc_member``: write ``"jsonrpc": "2.0"`` in every message; ``label`` names the
        other side in log lines."""
        self._write = write
        self._on_request = on_request
        self._on_notification = on_notification
        self._jsonrpc_member = jsonrpc_member
        self._label = label
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[JsonValue]] = {}

    @property
    def pending(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)

    async def request(self, method: str, params: Params | None, *, within: float) -> JsonValue:
        """Send a request and return its result, waiting at most ``within`` seconds in all.
        Raises :class:`RpcError` for an error answer, :class:`RequestTimeout` without one, and
        whatever ``write`` or :meth:`fail_pending` raise."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        self._next_id += 1
        rpc_id = self._next_id
        future: asyncio.Future[JsonValue] = loop.create_future()
        self._pending[rpc_id] = future
        try:
            await self._send(Request(id=rpc_id, method=method, params=None if params is None else dict(params)), within)
            async with asyncio.timeout_at(deadline):
                return await future
        except TimeoutError:
            raise RequestTimeout(f"{self._label} did not answer {method} within {within:g}s") from None
        finally:
            self._pending.pop(rpc_id, None)

    async def notify(self, method: str, params: Params | None = None, *, within: float) -> None:
        """Send a notification (no answer comes)."""
        await self._send(Notification(method=method, params=None if params is None else dict(params)), within)

    async def respond(self, rpc_id: RequestId, result: JsonValue, *, within: float) -> None:
        """Answer the other side's request ``rpc_id``."""
        await self._send(Response(id=rpc_id, result=result), within)

    async def respond_error(self, rpc_id: RequestId | None, code: int, message: str, *, within: float) -> None:
        """Refuse the other side's request ``rpc_id``."""
        await self._send(ErrorResponse(id=rpc_id, error=ErrorBody(code=code, message=message)), within)

    async def _send(self, message: Outgoing, within: float) -> None:
        try:
            await self._write(encode(message, jsonrpc_member=self._jsonrpc_member), within)
        except TimeoutError:
            raise RequestTimeout(f"{self._label} read none of its input for {within:g}s") from None

    def feed(self, line: bytes) -> None:
        """Route one line that arrived: a response to its request, a request or a notification
        to the owner's handler; a line that is no JSON-RPC message is logged (its start) and dropped."""
        try:
            message = Incoming.model_validate_json(line)
        except ValidationError:
            log.warning("%s wrote a line that is not a JSON-RPC message: %r", self._label, line[:200])
            return
        kind = message.kind()
        if kind == "response":
            self._on_response(message)
            return
        assert message.method is not None
        params = message.params or {}
        if kind == "request":
            assert message.id is not None
            self._on_request(message.id, message.method, params)
        else:
            self._on_notification(message.method, params)

    def _on_response(self, message: Incoming) -> None:
        future = self._pending.get(message.id) if isinstance(message.id, int) else None
        if future is None or future.done():
            return
        if message.error is not None:
            error = message.error
            future.set_exception(RpcError(error.message or f"error {error.code}", error.code))
        else:
            future.set_result(message.result)

    def fail_pending(self, error: BaseException) -> None:
        """Every waiting request raises ``error`` (the transport is gone)."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
