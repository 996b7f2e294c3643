"""Property-based tests of the framing, the reading of messages and the dispatch (on the one JSON-RPC peer)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coven_codex.jsonrpc import OVERSIZED, FrameDecoder, Incoming, Invalid, JsonRpcPeer, Serving
from coven_codex.jsonrpc.messages import classify
from coven_codex.mcp.session import McpSession


def encode(message: Any) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@st.composite
def chunkings(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    pieces, last = [], 0
    for cut in cuts:
        pieces.append(data[last:cut])
        last = cut
    pieces.append(data[last:])
    return pieces


@given(st.lists(json_values, max_size=8), st.data())
def test_any_chunking_yields_the_same_messages(messages: list[Any], data: st.DataObject) -> None:
    stream = b"".join(encode(message) for message in messages)
    decoder = FrameDecoder(1 << 20)
    frames = []
    for piece in data.draw(chunkings(stream)):
        frames += decoder.feed(piece)
    assert all(isinstance(frame, bytes) for frame in frames)
    assert [json.loads(frame) for frame in frames if isinstance(frame, bytes)] == messages
    assert decoder.pending_bytes == 0


@given(
    st.lists(st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")), max_size=10), st.integers(1, 40), st.data()
)
def test_oversized_lines_are_reported_once_and_others_pass(lines: list[bytes], limit: int, data: st.DataObject) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    decoder = FrameDecoder(limit)
    frames = []
    for piece in data.draw(chunkings(stream)):
        frames += decoder.feed(piece)
    expected = [OVERSIZED if len(line) > limit else line for line in lines if len(line) > limit or line.strip()]
    assert frames == expected
    assert decoder.pending_bytes <= limit


@given(json_values)
def test_classify_never_raises_and_keeps_valid_ids(value: Any) -> None:
    message = classify(value, jsonrpc_member=True)
    assert isinstance(message, Incoming | Invalid)
    if isinstance(message, Incoming) and message.kind() == "request":
        assert message.id == value["id"] and type(message.id) is type(value["id"])


method_names = st.sampled_from(["initialize", "ping", "tools/list", "tools/call", "server/discover", "x/y"]) | st.text()
request_ids = st.integers() | st.text() | st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    request_ids,
    method_names,
    st.dictionaries(
        st.sampled_from(["name", "arguments", "cursor", "protocolVersion", "_meta", "clientInfo"])
        | st.text(max_size=5),
        json_values | st.sampled_from(["add", "shout", "explode"]),
        max_size=4,
    ),
)
def test_dispatch_always_answers_with_the_request_id(request_id: Any, method: str, params: dict[str, Any]) -> None:
    from mcp_sample_spells import registry

    async def scenario() -> list[dict[str, Any]]:
        written: list[bytes] = []

        async def drain(within: float) -> None:
            return None

        session = McpSession(registry)
        peer = JsonRpcPeer(
            written.append,
            drain,
            on_request=Serving(session.methods(lambda method, params: None), sequential=frozenset({"initialize"})),
            on_notification=session.notification,
            jsonrpc_member=True,
        )
        initialize = {"protocolVersion": "2025-11-25", "capabilities": {}}
        await peer.feed(encode({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize}))
        await peer.feed(encode({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
        assert await peer.settle(30) == 0
        return [json.loads(line) for line in written]

    init, response = asyncio.run(scenario())
    assert "result" in init
    assert response["jsonrpc"] == "2.0"
    assert response["id"] == request_id and type(response["id"]) is type(request_id)
    assert ("result" in response) != ("error" in response)
    if "error" in response:
        if method == "initialize":  # the session is initialised already
            assert response["error"]["code"] == -32600
            return
        assert response["error"]["code"] in (-32601, -32602, -32603)
        assert response["error"]["code"] != -32603, response
    elif method == "tools/call":
        assert isinstance(response["result"]["isError"], bool)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()), min_size=1, max_size=6))
def test_a_live_server_survives_any_byte_stream(lines: list[bytes]) -> None:
    from mcp_helpers import RawClient
    from mcp_sample_spells import registry

    from coven_codex.mcp import SpellServer

    async def scenario() -> None:
        async with SpellServer(registry) as server:
            client = await RawClient.connect(server)
            await client.send(b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
            await client.send({"jsonrpc": "2.0", "id": "probe-id", "method": "ping"})
            while True:
                answer = await client.receive()
                assert answer["jsonrpc"] == "2.0"
                assert "result" in answer or answer["error"]["code"] in (-32700, -32600, -32601, -32602)
                if answer.get("id") == "probe-id" and answer.get("result") == {}:
                    break
            await client.close()

    asyncio.run(scenario())
