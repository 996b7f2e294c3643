"""JSON-RPC / MCP protocol details over the raw socket (after the handshake)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import pytest
from mcp_helpers import RawClient

from coven_codex.mcp import ConnectionLimits, SpellContext, SpellRegistry, SpellServer


@pytest.fixture
async def fresh(server: SpellServer) -> AsyncIterator[RawClient]:
    raw = await RawClient.connect(server)
    yield raw
    await raw.close()


@pytest.fixture
async def client(server: SpellServer) -> AsyncIterator[RawClient]:
    raw = await RawClient.connect(server, initialize=True)
    yield raw
    await raw.close()


@pytest.mark.parametrize(
    ("offered", "answered"),
    [
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2024-11-05", "2024-11-05"),
        ("2099-01-01", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
    ],
)
async def test_initialize_negotiates_the_protocol_version(fresh: RawClient, offered: str, answered: str) -> None:
    response = await fresh.initialize(offered)
    assert response["id"] == 0
    result = response["result"]
    assert result["protocolVersion"] == answered
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "coven"


async def test_server_discover_fails_cleanly_with_method_not_found(fresh: RawClient) -> None:
    response = await fresh.request("server/discover", {"_meta": {}}, request_id="probe")
    assert response == {
        "jsonrpc": "2.0",
        "id": "probe",
        "error": {"code": -32601, "message": "Method not found", "data": "server/discover"},
    }
    assert (await fresh.initialize())["result"]["protocolVersion"] == "2025-06-18"


async def test_ids_are_echoed_with_their_original_type(client: RawClient) -> None:
    for request_id in (7, "7", 7.5, "", -3, "a-long-id-" * 20):
        response = await client.request("ping", request_id=request_id)
        assert response == {"jsonrpc": "2.0", "id": request_id, "result": {}}
        assert type(response["id"]) is type(request_id)


@pytest.mark.parametrize(
    ("raw", "code", "echoed_id"),
    [
        (b"{not json\n", -32700, None),
        (b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}\n', -32700, None),
        (b'"just a string"\n', -32600, None),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]\n', -32600, None),
        (b'{"jsonrpc": "1.0", "id": 4, "method": "ping"}\n', -32600, 4),
        (b'{"jsonrpc": "2.0", "id": 5, "method": 12}\n', -32600, 5),
        (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}\n', -32600, None),
        (b'{"jsonrpc": "2.0", "id": 6, "method": "ping", "params": "x"}\n', -32600, 6),
        (b'{"jsonrpc": "2.0", "id": 8, "method": "resources/list"}\n', -32601, 8),
        (b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "nope"}}\n', -32602, 9),
        (b'{"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"arguments": {}}}\n', -32602, 10),
        (
            b'{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "add", "arguments": [1]}}\n',
            -32602,
            11,
        ),
        (b'{"jsonrpc": "2.0", "id": 12, "method": "tools/list", "params": {"cursor": "bogus"}}\n', -32602, 12),
        (b'{"jsonrpc": "2.0", "id": 13, "method": "tools/list", "params": [1, 2]}\n', -32602, 13),
    ],
)
async def test_errors_have_the_right_codes(client: RawClient, raw: bytes, code: int, echoed_id: object) -> None:
    await client.send(raw)
    response = await client.receive()
    assert response["jsonrpc"] == "2.0"
    assert response["id"] == echoed_id
    assert response["error"]["code"] == code
    assert "Traceback" not in str(response)
    assert (await client.request("ping", request_id=99))["result"] == {}


async def test_unknown_tool_error_names_it(client: RawClient) -> None:
    response = await client.request("tools/call", {"name": "nope", "arguments": {}})
    assert response["error"] == {"code": -32602, "message": "Unknown tool: nope"}


async def test_notifications_and_client_responses_get_no_answer(client: RawClient) -> None:
    await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    await client.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {"x": 1}})
    await client.send({"jsonrpc": "2.0", "id": 77, "result": {}})
    await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 404}})
    assert await client.request("ping", request_id="after") == {"jsonrpc": "2.0", "id": "after", "result": {}}


async def test_several_calls_in_flight_finish_out_of_order(client: RawClient) -> None:
    await client.send(
        {
            "jsonrpc": "2.0",
            "id": "slow",
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 1.0}},
        }
    )
    for index in range(5):
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": index,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": index}},
            }
        )
    order = [(await client.receive())["id"] for _ in range(6)]
    assert order[-1] == "slow"
    assert sorted(order[:-1]) == [0, 1, 2, 3, 4]


async def test_duplicate_in_flight_id_is_refused(client: RawClient) -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"seconds": 0.5}},
    }
    await client.send(call)
    await client.send(call)
    first = await client.receive()
    assert first["error"]["code"] == -32600 and first["id"] is None  # not 3: that is the first call's
    assert first["error"]["data"] == {"id": 3} and "already in use" in first["error"]["message"]
    second = await client.receive()
    assert second["result"]["content"][0]["text"] == "slept 0.5"


async def test_cancelled_request_gets_no_response_and_stops_the_spell(client: RawClient) -> None:
    await client.send(
        {
            "jsonrpc": "2.0",
            "id": "long",
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 30}},
        }
    )
    await asyncio.sleep(0.2)
    await client.send(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "long", "reason": "user pressed stop"},
        }
    )
    response = await client.request("ping", request_id="next")
    assert response["id"] == "next"
    with pytest.raises(TimeoutError):
        await client.receive(timeout=0.5)


async def test_progress_notifications_only_with_a_progress_token(client: RawClient) -> None:
    await client.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "progress_sync", "arguments": {"steps": 2}, "_meta": {"progressToken": "t"}},
        }
    )
    messages = [await client.receive() for _ in range(3)]
    assert [m.get("method") for m in messages] == ["notifications/progress"] * 2 + [None]
    assert [m["params"]["progress"] for m in messages[:2]] == [1, 2]
    assert all(m["params"]["progressToken"] == "t" for m in messages[:2])
    assert messages[2]["result"]["content"] == [{"type": "text", "text": "done"}]
    plain = await client.request("tools/call", {"name": "progress", "arguments": {"steps": 2}}, request_id=2)
    assert plain["result"]["content"][0]["text"] == "done"


async def test_timeouts_and_spell_errors_are_tool_errors(client: RawClient) -> None:
    slow = await client.request("tools/call", {"name": "too_slow", "arguments": {}})
    assert slow["result"] == {
        "content": [{"type": "text", "text": "spell 'too_slow' timed out after 0.5 seconds"}],
        "isError": True,
    }
    slow_sync = await client.request("tools/call", {"name": "too_slow_sync", "arguments": {}})
    assert slow_sync["result"]["isError"] is True
    refused = await client.request("tools/call", {"name": "refuse", "arguments": {"reason": "no way"}})
    assert refused["result"] == {"content": [{"type": "text", "text": "no way"}], "isError": True}
    none = await client.request("tools/call", {"name": "nothing"})
    assert none["result"] == {"content": [], "isError": False}


async def test_non_finite_results_become_tool_errors(client: RawClient) -> None:
    response = await client.request("tools/call", {"name": "ratio", "arguments": {"a": 1.0, "b": 0.0}})
    assert response["result"]["isError"] is True
    assert "cannot be turned into JSON" in response["result"]["content"][0]["text"]


async def test_calls_past_the_limit_wait_and_stay_cancellable(registry: SpellRegistry) -> None:
    async with SpellServer(registry, limits=ConnectionLimits(max_in_flight=1)) as server:
        client = await RawClient.connect(server, initialize=True)
        for request_id, seconds in (("A", 30), ("B", 0.1)):
            await client.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "tools/call",
                    "params": {"name": "sleep", "arguments": {"seconds": seconds}},
                }
            )
        assert (await client.request("ping", request_id="P"))["id"] == "P"  # not stuck behind A
        await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "A"}})
        answer = await client.receive()
        assert answer["id"] == "B" and answer["result"]["content"][0]["text"] == "slept 0.1"
        await client.close()


async def test_requests_before_initialize_are_refused(fresh: RawClient) -> None:
    assert (await fresh.request("ping", request_id="p"))["result"] == {}
    for method, params in (("tools/call", {"name": "add", "arguments": {"a": 1}}), ("tools/list", {})):
        response = await fresh.request(method, params, request_id=method)
        assert response["id"] == method and response["error"]["code"] == -32600
        assert f"{method} before initialize; send initialize first" in response["error"]["message"]
    assert (await fresh.initialize())["result"]["protocolVersion"] == "2025-06-18"
    answer = await fresh.request("tools/call", {"name": "add", "arguments": {"a": 1}}, request_id=1)
    assert answer["result"]["content"][0]["text"] == "3"


async def test_a_second_initialize_is_refused(client: RawClient) -> None:
    again = await client.request(
        "initialize",
        {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "again", "version": "1"}},
        request_id="again",
    )
    assert again["error"]["code"] == -32600
    assert "already initialised (protocol 2025-06-18)" in again["error"]["message"]


async def test_a_number_progress_token_gets_progress(client: RawClient) -> None:
    await client.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "progress", "arguments": {"steps": 2}, "_meta": {"progressToken": 2.5}},
        }
    )
    messages = [await client.receive() for _ in range(3)]
    assert [m.get("method") for m in messages] == ["notifications/progress"] * 2 + [None]
    assert all(m["params"]["progressToken"] == 2.5 for m in messages[:2])


async def test_requests_pipelined_behind_initialize_are_served(fresh: RawClient) -> None:
    await fresh.send(
        b"".join(
            json.dumps(message).encode() + b"\n"
            for message in (
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "p", "version": "1"},
                    },
                },
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "shout", "arguments": {"text": "a"}},
                },
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            )
        )
    )
    answers = {answer["id"]: answer for answer in [await fresh.receive() for _ in range(3)]}
    assert answers[1]["result"]["content"][0]["text"] == "A!"
    assert "tools" in answers[2]["result"]


async def test_client_data_in_log_lines_is_cut(fresh: RawClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="coven_codex")
    long = "n" * 100_000
    info = {"name": long, "version": long}
    answer = await fresh.request(
        "initialize", {"protocolVersion": long, "capabilities": {}, "clientInfo": info}, request_id=0
    )
    assert answer["result"]["protocolVersion"] == "2025-11-25"
    await fresh.send({"jsonrpc": "2.0", "method": "notifications/" + long})
    call = {"name": "sleep", "arguments": {"seconds": 30}}
    await fresh.send({"jsonrpc": "2.0", "id": long, "method": "tools/call", "params": call})
    await fresh.send(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": long, "reason": long}}
    )
    assert (await fresh.request("ping", request_id="sync"))["result"] == {}
    messages = [record.getMessage() for record in caplog.records]
    assert any("cancelled request" in message for message in messages)
    assert any("MCP client nnn" in message for message in messages)
    assert max(len(message) for message in messages) < 1000


async def test_progress_json_cannot_carry_is_dropped_once_and_the_call_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = SpellRegistry()

    @registry.spell
    async def odd_progress(ctx: SpellContext) -> str:
        """Reports NaN progress twice, then a real one."""
        ctx.report_progress(float("nan"))
        ctx.report_progress(float("nan"))
        ctx.report_progress(1.0)
        return "finished"

    async with SpellServer(registry) as running:
        client = await RawClient.connect(running, initialize=True)
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "odd_progress", "arguments": {}, "_meta": {"progressToken": "t"}},
            }
        )
        progress, answer = await client.receive(), await client.receive()
        assert progress["method"] == "notifications/progress" and progress["params"]["progress"] == 1
        assert answer["result"] == {"content": [{"type": "text", "text": "finished"}], "isError": False}
        await client.close()
    assert sum("JSON cannot carry" in record.getMessage() for record in caplog.records) == 1
