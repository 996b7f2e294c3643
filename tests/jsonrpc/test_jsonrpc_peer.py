"""The JSON-RPC peer (:mod:`coven_codex.jsonrpc`): two peers talking over a real Unix socket pair,
each reading its end line by line and feeding the lines to its peer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import JsonValue

from coven_codex.jsonrpc import JsonRpcPeer, RequestId, RequestTimeout, RpcError, ServedRequest, Serving
from coven_codex.jsonrpc.messages import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    ErrorResponse,
    Notification,
    Request,
    Response,
    encode,
)


@dataclass
class Side:
    """One end of the socket pair: its peer, the raw lines it read, what its handlers saw."""

    peer: JsonRpcPeer
    lines: list[bytes] = field(default_factory=list)
    notifications: list[tuple[str, dict[str, JsonValue]]] = field(default_factory=list)
    requests: list[tuple[RequestId, str, dict[str, JsonValue]]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    answering: set[asyncio.Task[None]] = field(default_factory=set)

    def answer(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.answering.add(task)
        task.add_done_callback(self.answering.discard)


async def open_side(
    sock: socket.socket, *, answer: bool, jsonrpc_member: bool = False
) -> tuple[Side, asyncio.Task[None]]:
    reader, writer = await asyncio.open_unix_connection(sock=sock)

    async def drain(within: float) -> None:
        await asyncio.wait_for(writer.drain(), within)

    holder: list[Side] = []

    def on_request(rpc_id: RequestId, method: str, params: dict[str, JsonValue]) -> None:
        side = holder[0]
        side.requests.append((rpc_id, method, params))
        side.arrived.set()
        if not answer:
            return
        if method == "add":
            a, b = params["a"], params["b"]
            assert isinstance(a, int) and isinstance(b, int)
            side.answer(side.peer.respond(rpc_id, {"sum": a + b}, within=5))
        else:
            side.answer(side.peer.respond_error(rpc_id, METHOD_NOT_FOUND, f"no {method}", within=5))

    def on_notification(method: str, params: dict[str, JsonValue]) -> None:
        holder[0].notifications.append((method, params))
        holder[0].arrived.set()

    peer = JsonRpcPeer(
        writer.write, drain, on_request=on_request, on_notification=on_notification, jsonrpc_member=jsonrpc_member
    )
    side = Side(peer)
    holder.append(side)

    async def read() -> None:
        while line := await reader.readline():
            side.lines.append(line)
            await peer.feed(line)
        writer.close()

    return side, asyncio.create_task(read())


@contextlib.asynccontextmanager
async def pair(*, jsonrpc_member: bool = False) -> AsyncIterator[tuple[Side, Side]]:
    left_sock, right_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    left, left_reader = await open_side(left_sock, answer=False, jsonrpc_member=jsonrpc_member)
    right, right_reader = await open_side(right_sock, answer=True, jsonrpc_member=jsonrpc_member)
    try:
        yield left, right
    finally:
        for task in (left_reader, right_reader):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        left_sock.close()
        right_sock.close()


async def test_requests_get_their_own_answers_in_any_order_and_errors_keep_their_code() -> None:
    async with pair() as (left, right):
        results = await asyncio.gather(*(left.peer.request("add", {"a": i, "b": 1}, within=5) for i in range(20)))
        assert results == [{"sum": i + 1} for i in range(20)]
        assert sorted(rpc_id for rpc_id, _, _ in right.requests) == list(range(1, 21))  # one id each
        with pytest.raises(RpcError, match="no nope") as refused:
            await left.peer.request("nope", None, within=5)
        assert refused.value.code == METHOD_NOT_FOUND
        assert left.peer.pending == 0


async def test_notifications_and_the_other_sides_requests_reach_the_handlers() -> None:
    async with pair() as (left, right):
        await right.peer.notify("turn/started", {"threadId": "t", "turn": {"id": "u"}}, within=5)
        await right.peer.notify("initialized", within=5)
        answer = asyncio.create_task(right.peer.request("approve?", {"threadId": "t"}, within=5))
        while len(left.notifications) < 2 or not left.requests:
            left.arrived.clear()
            await asyncio.wait_for(left.arrived.wait(), 5)
        assert left.notifications == [("turn/started", {"threadId": "t", "turn": {"id": "u"}}), ("initialized", {})]
        ((rpc_id, method, params),) = left.requests
        assert (method, params) == ("approve?", {"threadId": "t"})
        await left.peer.respond(rpc_id, {"decision": "accept"}, within=5)
        assert await answer == {"decision": "accept"}
        # The app-server dialect: no "jsonrpc" member, no "params" when there are none.
        assert json.loads(left.lines[1]) == {"method": "initialized"}


async def test_the_jsonrpc_member_is_written_when_asked() -> None:
    async with pair(jsonrpc_member=True) as (left, right):
        assert await left.peer.request("add", {"a": 1, "b": 2}, within=5) == {"sum": 3}
        assert json.loads(right.lines[0]) == {"jsonrpc": "2.0", "id": 1, "method": "add", "params": {"a": 1, "b": 2}}
        assert json.loads(left.lines[0]) == {"jsonrpc": "2.0", "id": 1, "result": {"sum": 3}}


async def test_an_unanswered_request_ends_at_its_bound_and_a_lost_transport_ends_every_wait() -> None:
    async with pair() as (left, right):
        with pytest.raises(RequestTimeout, match=r"did not answer silent within 0\.2s"):
            await right.peer.request("silent", None, within=0.2)  # left never answers
        assert right.peer.pending == 0
        waiting = [asyncio.create_task(right.peer.request("silent", None, within=60)) for _ in range(3)]
        while len(left.requests) < 4:
            left.arrived.clear()
            await asyncio.wait_for(left.arrived.wait(), 5)
        right.peer.fail_pending(ConnectionError("gone"))
        for task in waiting:
            with pytest.raises(ConnectionError, match="gone"):
                await task


async def test_a_line_that_is_not_json_rpc_is_dropped_and_reading_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async with pair() as (left, _right):
        await left.peer.feed(b"not json\n")
        await left.peer.feed(b'{"id": "x", "result": 1}\n')  # an answer to nothing of ours: dropped
        assert await left.peer.request("add", {"a": 2, "b": 2}, within=5) == {"sum": 4}
    assert "not a JSON-RPC message: b'not json\\n'" in caplog.text


def test_encoding_of_each_message_kind() -> None:
    assert encode(Request(id=3, method="m", params={"k": "v"})) == b'{"id":3,"method":"m","params":{"k":"v"}}\n'
    assert encode(Notification(method="n")) == b'{"method":"n"}\n'
    assert encode(Response(id="a", result=None)) == b'{"id":"a","result":null}\n'
    error = ErrorResponse.model_validate({"id": 1, "error": {"code": -32601, "message": "no"}})
    assert encode(error) == b'{"id":1,"error":{"code":-32601,"message":"no"}}\n'
    assert encode(Notification(method="é")) == '{"method":"é"}\n'.encode()


@dataclass
class Served:
    """A peer serving a method table on one end of a socket pair; the test speaks raw lines on the other."""

    peer: JsonRpcPeer
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def send(self, message: object) -> None:
        self.writer.write(message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n")
        await self.writer.drain()

    async def receive(self) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), 10)
        assert line, "the peer closed"
        value: dict[str, Any] = json.loads(line)
        return value


@contextlib.asynccontextmanager
async def served(*, max_pending: int = 1024) -> AsyncIterator[Served]:
    server_sock, client_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server_reader, server_writer = await asyncio.open_unix_connection(sock=server_sock)
    client_reader, client_writer = await asyncio.open_unix_connection(sock=client_sock)
    holder: list[Served] = []

    async def echo(request: ServedRequest) -> JsonValue:
        return {"method": request.method, "params": request.params}

    async def refuse(request: ServedRequest) -> JsonValue:
        raise RpcError("not today", INVALID_PARAMS, {"field": "x"})

    async def crash(request: ServedRequest) -> JsonValue:
        raise RuntimeError("secret internals")

    async def block(request: ServedRequest) -> JsonValue:
        holder[0].started.set()
        await holder[0].release.wait()
        return "released"

    async def drain(within: float) -> None:
        await asyncio.wait_for(server_writer.drain(), within)

    serving = Serving(
        {"echo": echo, "refuse": refuse, "crash": crash, "block": block},
        max_pending=max_pending,
        internal_error="internal error; see the log",
    )
    peer = JsonRpcPeer(
        server_writer.write, drain, on_request=serving, on_notification=lambda m, p: None, jsonrpc_member=True
    )
    side = Served(peer, client_reader, client_writer)
    holder.append(side)

    async def read() -> None:
        while line := await server_reader.readline():
            await peer.feed(line)

    reading = asyncio.create_task(read())
    try:
        yield side
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        await peer.cancel_served()
        server_sock.close()
        client_sock.close()


async def test_a_served_method_table_answers_results_errors_and_unknown_methods() -> None:
    async with served() as side:
        await side.send({"jsonrpc": "2.0", "id": 1.5, "method": "echo", "params": {"a": [1]}})
        assert await side.receive() == {"jsonrpc": "2.0", "id": 1.5, "result": {"method": "echo", "params": {"a": [1]}}}
        await side.send({"jsonrpc": "2.0", "id": "r", "method": "refuse"})
        assert (await side.receive())["error"] == {
            "code": INVALID_PARAMS,
            "message": "not today",
            "data": {"field": "x"},
        }
        await side.send({"jsonrpc": "2.0", "id": 2, "method": "crash"})
        crashed = await side.receive()
        assert crashed["error"] == {"code": INTERNAL_ERROR, "message": "internal error; see the log"}
        await side.send({"jsonrpc": "2.0", "id": 3, "method": "nope"})
        assert (await side.receive())["error"] == {
            "code": METHOD_NOT_FOUND,
            "message": "Method not found",
            "data": "nope",
        }


@pytest.mark.parametrize(
    ("line", "code", "echoed"),
    [
        (b"{nope\n", PARSE_ERROR, None),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "echo", "x": Infinity}\n', PARSE_ERROR, None),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "echo"}]\n', INVALID_REQUEST, None),
        (b'{"id": 4, "method": "echo"}\n', INVALID_REQUEST, 4),
        (b'{"jsonrpc": "2.0", "id": true, "method": "echo"}\n', INVALID_REQUEST, None),
        (b'{"jsonrpc": "2.0", "id": "p", "method": "echo", "params": [1]}\n', INVALID_PARAMS, "p"),
    ],
)
async def test_json_rpc_proper_answers_lines_that_are_no_valid_message(line: bytes, code: int, echoed: object) -> None:
    async with served() as side:
        await side.send(line)
        answer = await side.receive()
        assert answer["id"] == echoed and answer["error"]["code"] == code
        await side.send({"jsonrpc": "2.0", "id": "after", "method": "echo"})
        assert (await side.receive())["id"] == "after"


async def test_serving_refuses_an_id_in_flight_and_cancels_without_an_answer() -> None:
    async with served(max_pending=1) as side:
        await side.send({"jsonrpc": "2.0", "id": 7, "method": "block"})
        await asyncio.wait_for(side.started.wait(), 10)
        await side.send({"jsonrpc": "2.0", "id": 7, "method": "block"})
        refused = await side.receive()  # not under id 7: that is the first request's
        assert refused["id"] is None and refused["error"]["data"] == {"id": 7}
        await side.send({"jsonrpc": "2.0", "id": 8, "method": "echo"})  # read once the pending one is gone
        assert side.peer.cancel(7) and not side.peer.cancel("7")
        assert (await side.receive())["id"] == 8  # the cancelled request got no answer
        assert side.peer.serving == 0


async def test_a_served_answer_that_is_not_json_becomes_an_internal_error(caplog: pytest.LogCaptureFixture) -> None:
    async with served() as side:
        await side.send({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"x": 1}})
        assert "result" in await side.receive()
        await side.peer.respond(2, float("nan"), within=5)
        assert (await side.receive()) == {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {"code": INTERNAL_ERROR, "message": "internal error; see the log"},
        }
    assert "is not JSON" in caplog.text
