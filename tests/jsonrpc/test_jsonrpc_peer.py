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

from coven_codex.jsonrpc import JsonRpcPeer, RequestId, RequestTimeout, RpcError
from coven_codex.jsonrpc.messages import METHOD_NOT_FOUND, ErrorResponse, Notification, Request, Response, encode


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
