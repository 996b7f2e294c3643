"""The JSON-RPC peer: request ids, pending requests with bounded waits, routing of what arrives,
and serving the other side's requests.

The owner keeps the transport and gives the peer two functions: ``write`` (queue one encoded
line) and ``drain`` (wait at most the seconds it is given for room), and feeds it every line it
reads (:meth:`JsonRpcPeer.feed`, awaited in order: it waits while the peer may take no more, which
pushes back on the other side). The peer never reads or owns the transport, so one implementation
serves a child process's pipes as well as a socket. :meth:`JsonRpcPeer.fail_pending` ends every
waiting request when the transport is gone.

Requests of the other side are either routed to the owner (``on_request``: the owner answers later
with :meth:`JsonRpcPeer.respond`, as the app-server client does for approvals) or served by the
peer from a method table (:class:`Serving`: each request in its own task, at most ``max_pending``
at once, ids in flight unique, :meth:`JsonRpcPeer.cancel` ends one without an answer, a
handler's :class:`RpcError` becomes an error answer and any other failure a bare internal error).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from pydantic import JsonValue

from coven_codex.jsonrpc.messages import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    ErrorBody,
    ErrorResponse,
    Incoming,
    Invalid,
    Notification,
    Outgoing,
    Request,
    RequestId,
    Response,
    encode,
    parse,
)
from coven_codex.support.limits import cut

log = logging.getLogger(__name__)

Params = Mapping[str, JsonValue]
Write = Callable[[bytes], None]
"""Queues one line on the owner's transport (without waiting)."""
Drain = Callable[[float], Awaitable[None]]
"""Waits at most the given seconds for room in the owner's transport (then ``TimeoutError``)."""
OnRequest = Callable[[RequestId, str, dict[str, JsonValue]], None]
"""A request of the other side arrived (answer it with :meth:`JsonRpcPeer.respond` or
:meth:`JsonRpcPeer.respond_error`)."""
OnNotification = Callable[[str, dict[str, JsonValue]], None]
"""A notification arrived."""

THREAD_PARSE_BYTES = 1 << 20
"""Lines this long or longer are parsed in a worker thread, so the event loop keeps running."""


class RpcError(Exception):
    """An error answer: the other side's to a request of ours, or a handler's to serve (``code``:
    the JSON-RPC error code, ``data``: the error's ``data`` member)."""

    def __init__(self, message: str, code: int | None = None, data: JsonValue = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class RequestTimeout(TimeoutError):
    """No answer (or no room to write the request) within the request's bound."""


@dataclass(frozen=True, slots=True)
class ServedRequest:
    """A request of the other side that a :class:`Serving` handler answers."""

    id: RequestId
    method: str
    params: dict[str, JsonValue]


Handler = Callable[[ServedRequest], Awaitable[JsonValue]]
"""Answers a request with its result, or raises :class:`RpcError` for an error answer."""


@dataclass(frozen=True, slots=True)
class Serving:
    """How a peer serves the other side's requests itself (module docstring).

    ``sequential``: methods whose request is answered before the next line is read (requests
    sent right behind ``initialize`` must see its effect). ``internal_error``: the message of the
    answer to a handler that failed unexpectedly (the traceback goes to the log only).
    """

    methods: Mapping[str, Handler]
    max_pending: int = 1024
    sequential: frozenset[str] = field(default_factory=frozenset)
    internal_error: str = "internal error; see the log"


def _id_key(value: RequestId) -> tuple[bool, RequestId]:
    """A dict key for an id that keeps ``"1"`` and ``1`` apart."""
    return (isinstance(value, str), value)


def _shown(value: RequestId) -> str:
    return cut(repr(value))


class JsonRpcPeer:
    """One side of a JSON-RPC conversation over newline-delimited JSON (module docstring)."""

    def __init__(
        self,
        write: Write,
        drain: Drain,
        *,
        on_request: OnRequest | Serving,
        on_notification: OnNotification,
        jsonrpc_member: bool = False,
        answer_within: float = 30.0,
        label: str = "the other side",
    ) -> None:
        """``jsonrpc_member``: JSON-RPC 2.0 proper: ``"jsonrpc": "2.0"`` in every message both ways,
        and a line that is no valid message is answered with an error (else it is logged and
        dropped); ``answer_within``: the bound on writing an answer; ``label`` names the other
        side in log lines."""
        self._write = write
        self._drain = drain
        self._on_request = on_request
        self._on_notification = on_notification
        self._jsonrpc_member = jsonrpc_member
        self._answer_within = answer_within
        self._label = label
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[JsonValue]] = {}
        self._served: dict[tuple[bool, RequestId], asyncio.Task[None]] = {}
        self._room = asyncio.Event()

    @property
    def pending(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)

    @property
    def serving(self) -> int:
        """Requests of the other side being served now."""
        return len(self._served)

    # -- sending -------------------------------------------------------------------------------
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

    def notify_nowait(self, method: str, params: Params | None = None) -> None:
        """Queue a notification without waiting for room (progress while a request is served)."""
        self._write(self._encode(Notification(method=method, params=None if params is None else dict(params))))

    async def respond(self, rpc_id: RequestId, result: JsonValue, *, within: float) -> None:
        """Answer the other side's request ``rpc_id``."""
        await self._send(Response(id=rpc_id, result=result), within)

    async def respond_error(
        self, rpc_id: RequestId | None, code: int, message: str, data: JsonValue = None, *, within: float
    ) -> None:
        """Refuse the other side's request ``rpc_id`` (``None``: a request whose id is unknown)."""
        await self._send(ErrorResponse(id=rpc_id, error=ErrorBody(code=code, message=message, data=data)), within)

    def _encode(self, message: Outgoing) -> bytes:
        return encode(message, jsonrpc_member=self._jsonrpc_member)

    async def _send(self, message: Outgoing, within: float) -> None:
        try:
            data = self._encode(message)
        except ValueError:
            if not isinstance(message, Response):
                raise
            log.exception("an answer to %s is not JSON; it is answered with an internal error", self._label)
            data = self._encode(
                ErrorResponse(id=message.id, error=ErrorBody(code=INTERNAL_ERROR, message=self._internal))
            )
        self._write(data)
        try:
            await self._drain(within)
        except TimeoutError:
            raise RequestTimeout(f"{self._label} read none of its input for {within:g}s") from None

    @property
    def _internal(self) -> str:
        return self._on_request.internal_error if isinstance(self._on_request, Serving) else "internal error"

    # -- receiving -----------------------------------------------------------------------------
    async def feed(self, line: bytes) -> None:
        """Take one line that arrived: a response goes to its request, a request and a notification
        to the owner's handler or the method table. Waits while ``max_pending`` requests are
        served (and, for a ``sequential`` method, until it is answered); raises what writing an
        error answer raises."""
        if len(line) >= THREAD_PARSE_BYTES:
            message = await asyncio.to_thread(parse, line, jsonrpc_member=self._jsonrpc_member)
        else:
            message = parse(line, jsonrpc_member=self._jsonrpc_member)
        if isinstance(message, Invalid):
            await self._refuse(message, line)
            return
        kind = message.kind()
        if kind == "response":
            self._on_response(message)
            return
        assert message.method is not None
        params = message.params or {}
        if kind == "notification":
            self._on_notification(message.method, params)
            return
        assert message.id is not None
        if isinstance(self._on_request, Serving):
            await self._serve(self._on_request, ServedRequest(message.id, message.method, params))
        else:
            self._on_request(message.id, message.method, params)

    async def _refuse(self, invalid: Invalid, line: bytes) -> None:
        if not self._jsonrpc_member:
            log.warning("%s wrote a line that is not a JSON-RPC message: %r", self._label, line[:200])
            return
        log.debug("%s sent an invalid message: %s", self._label, invalid.message)
        await self.respond_error(invalid.id, invalid.code, invalid.message, within=self._answer_within)

    def _on_response(self, message: Incoming) -> None:
        future = self._pending.get(message.id) if isinstance(message.id, int) else None
        if future is None or future.done():
            log.debug("%s answered no request of ours (id %r)", self._label, message.id)
            return
        if message.error is not None:
            error = message.error
            future.set_exception(RpcError(error.message or f"error {error.code}", error.code, error.data))
        else:
            future.set_result(message.result)

    def fail_pending(self, error: BaseException) -> None:
        """Every waiting request raises ``error`` (the transport is gone)."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)

    # -- serving -------------------------------------------------------------------------------
    async def _serve(self, serving: Serving, request: ServedRequest) -> None:
        handler = serving.methods.get(request.method)
        if handler is None:
            await self.respond_error(
                request.id, METHOD_NOT_FOUND, "Method not found", request.method, within=self._answer_within
            )
            return
        key = _id_key(request.id)
        if key in self._served:
            # Not under the same id: the other side would take it for the first request's answer.
            await self.respond_error(
                None,
                INVALID_REQUEST,
                f"Invalid request: id {_shown(request.id)} is already in use by a request in flight",
                {"id": request.id},
                within=self._answer_within,
            )
            return
        while len(self._served) >= serving.max_pending:
            self._room.clear()
            await self._room.wait()
        task = asyncio.create_task(self._answer(handler, request), name=f"rpc-{request.method}-{_shown(request.id)}")
        self._served[key] = task
        if request.method in serving.sequential:
            await asyncio.wait([task])

    async def _answer(self, handler: Handler, request: ServedRequest) -> None:
        try:
            try:
                result = await handler(request)
            except RpcError as exc:
                code = INTERNAL_ERROR if exc.code is None else exc.code
                await self.respond_error(request.id, code, str(exc), exc.data, within=self._answer_within)
            except (asyncio.CancelledError, ConnectionError, OSError, RequestTimeout):
                raise
            except Exception:
                log.exception("serving %s for %s failed", request.method, self._label)
                await self.respond_error(request.id, INTERNAL_ERROR, self._internal, within=self._answer_within)
            else:
                await self.respond(request.id, result, within=self._answer_within)
        except asyncio.CancelledError:
            log.debug("request %s (%s) of %s cancelled", _shown(request.id), request.method, self._label)
        except (ConnectionError, OSError, RequestTimeout) as exc:
            log.info("could not answer request %s of %s: %s", _shown(request.id), self._label, exc)
        finally:
            self._served.pop(_id_key(request.id), None)
            self._room.set()

    def cancel(self, request_id: RequestId) -> bool:
        """End the request ``request_id`` being served; it gets no answer. False when there is none."""
        task = self._served.get(_id_key(request_id))
        if task is None:
            return False
        task.cancel()
        return True

    async def settle(self, within: float) -> int:
        """Wait at most ``within`` seconds for the requests being served; how many still run."""
        tasks = list(self._served.values())
        if not tasks:
            return 0
        _, running = await asyncio.wait(tasks, timeout=within)
        return len(running)

    async def cancel_served(self) -> None:
        """Cancel every request being served and wait until each has ended."""
        tasks = list(self._served.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
