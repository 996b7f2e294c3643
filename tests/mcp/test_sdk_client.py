"""The official `mcp` SDK client launches the shim (as Codex would) and uses the spells."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import mcp_types
from mcp import Client, ClientSession, stdio_client
from mcp_helpers import shim_parameters

from coven_codex.mcp import SpellRegistry, SpellServer


async def test_sdk_client_initializes_lists_and_calls(server: SpellServer) -> None:
    async with stdio_client(shim_parameters(server)) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.server_info.name == "coven"
        assert init.protocol_version == "2025-11-25"
        assert init.capabilities.tools is not None

        listed = await session.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        assert {"add", "shout", "stats", "explode"} <= set(tools)
        add_schema = tools["add"].input_schema
        assert add_schema["additionalProperties"] is False
        assert add_schema["required"] == ["a"]
        assert tools["add"].description == "Add two integers."
        assert tools["stats"].output_schema is not None
        assert tools["add"].output_schema is None

        sync_result = await session.call_tool("add", {"a": 40, "b": 2})
        assert isinstance(sync_result, mcp_types.CallToolResult)
        assert not sync_result.is_error
        assert [block.text for block in sync_result.content if isinstance(block, mcp_types.TextContent)] == ["42"]

        async_result = await session.call_tool("shout", {"text": "hi"})
        assert isinstance(async_result, mcp_types.CallToolResult)
        assert _text(async_result) == "HI!"

        structured = await session.call_tool("stats", {"points": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]})
        assert isinstance(structured, mcp_types.CallToolResult)
        assert not structured.is_error
        assert structured.structured_content == {
            "count": 2,
            "total": 10.0,
            "points": [{"x": 1.0, "y": 2.0}, {"x": 3.0, "y": 4.0}],
        }
        assert json.loads(_text(structured)) == structured.structured_content

        failing = await session.call_tool("explode", {"message": "the fuse"})
        assert isinstance(failing, mcp_types.CallToolResult)
        assert failing.is_error
        assert _text(failing) == "spell 'explode' failed: RuntimeError: kaboom: the fuse"
        assert "Traceback" not in _text(failing)

        bad = await session.call_tool("add", {"a": "forty"})
        assert isinstance(bad, mcp_types.CallToolResult)
        assert bad.is_error
        assert _text(bad).startswith("invalid arguments for spell 'add': a: Input should be a valid integer")

        extra = await session.call_tool("add", {"a": 1, "c": 3})
        assert isinstance(extra, mcp_types.CallToolResult)
        assert extra.is_error
        assert "c: Extra inputs are not permitted" in _text(extra)

        await session.send_ping()


async def test_sdk_client_progress_and_concurrent_calls(server: SpellServer) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with stdio_client(shim_parameters(server)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
        assert isinstance(result, mcp_types.CallToolResult)
        assert _text(result) == "done"
        assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]

        results = await asyncio.gather(*(session.call_tool("add", {"a": i, "b": i}) for i in range(20)))
        assert [_text(r) for r in results] == [str(2 * i) for i in range(20)]


async def test_sdk_client_paginates_tools_list(registry: SpellRegistry) -> None:
    async with (
        SpellServer(registry, page_size=4) as small_pages,
        stdio_client(shim_parameters(small_pages)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        names: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            pages += 1
            names += [tool.name for tool in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert names == [tool["name"] for tool in registry.tool_definitions()]
        assert pages == -(-len(registry) // 4)


async def test_sdk_client_in_auto_mode_falls_back_from_server_discover(server: SpellServer) -> None:
    async with Client(shim_parameters(server)) as client:
        assert client.session.initialize_result is not None
        result = await client.call_tool("add", {"a": 1})
        assert _text(result) == "3"


async def test_ten_megabyte_messages_both_ways(server: SpellServer) -> None:
    size = 10 * 2**20
    async with stdio_client(shim_parameters(server)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        sent = await session.call_tool("echo_size", {"blob": "y" * size})
        assert _text(sent) == str(size)
        received = await session.call_tool("make_blob", {"size": size})
        assert len(_text(received)) == size


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))
