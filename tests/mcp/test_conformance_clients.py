"""Conformance: official MCP clients drive the shim as any MCP host would.

The TypeScript SDK client (``@modelcontextprotocol/sdk``, pinned and installed by
``scripts/install-npm-pinned.sh mcp-sdk-js`` into the ignored ``.mcp-sdk-js/``) runs under Node from
``ts_sdk_client.mjs``; the Python SDK (``mcp``) runs in ``auto`` mode (``server/discover``,
then ``initialize``), in ``legacy`` mode, and pinned to the stateless 2026-07-28 revision, which
this server refuses with a clear error instead of running the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types
import psutil
import pytest
from mcp import Client, ClientSession, stdio_client
from mcp_helpers import shim_parameters
from mcp_sample_spells import lingered

from coven_codex.mcp import SpellRegistry, SpellServer, codex_mcp_entry

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("ts_sdk_client.mjs")
PAGE_SIZE = 4


@pytest.fixture(scope="module")
def ts_sdk() -> Path:
    """The pinned TypeScript SDK (installed on first use, as scripts/setup.sh does)."""
    assert shutil.which("node"), "Node.js is required (scripts/setup.sh checks for it)"
    done = subprocess.run(
        [str(ROOT / "scripts" / "install-npm-pinned.sh"), "mcp-sdk-js"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return Path(done.stdout.strip())


@pytest.fixture
async def paged(registry: SpellRegistry) -> AsyncIterator[SpellServer]:
    async with SpellServer(registry, label="conformance", page_size=PAGE_SIZE) as running:
        yield running


async def run_ts(sdk: Path, server: SpellServer, scenario: str, secret: str | None = None) -> dict[str, Any]:
    entry = codex_mcp_entry(server.socket_path, secret or server.secret, "0.169.0")
    launch = json.dumps({"command": entry["command"], "args": entry["args"], "env": entry["env"]})
    process = await asyncio.create_subprocess_exec(
        "node", str(DRIVER), str(sdk), launch, scenario, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()[-2000:]
    await until_shims_ended(server)
    result: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    assert "unexpected" not in result, result["unexpected"]
    return result


def running_shims(server: SpellServer) -> list[str]:
    """The shims of ``server`` still running (not yet exited; a zombie has)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            command = " ".join(process.cmdline())
            if str(server.socket_path) in command and process.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{process.pid} {command[:120]}")
    return found


async def until_shims_ended(server: SpellServer, within: float = 10.0) -> None:
    """Wait until the shims the client started are gone. A client that exits right after closing
    (the TypeScript SDK's client after a failed ``connect()`` does not wait for the shim it started)
    leaves its shim to read end-of-file and exit a moment later (what left one running at a test's
    end in CI). A process's end sends no event to a non-parent, hence the bounded look every 10 ms."""
    deadline = time.monotonic() + within
    while left := running_shims(server):
        assert time.monotonic() < deadline, f"the shim did not exit {within:g}s after its client: {left}"
        await asyncio.sleep(0.01)


async def wait_lingered(tag: str) -> None:
    for _ in range(100):
        if tag in lingered:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the call tagged {tag!r} was not cancelled")


# -- the TypeScript SDK ---------------------------------------------------------------------------


async def test_ts_sdk_lists_pages_calls_errors_progress(
    ts_sdk: Path, paged: SpellServer, registry: SpellRegistry
) -> None:
    seen = await run_ts(ts_sdk, paged, "basic")
    assert seen["serverName"] == "coven"
    assert seen["names"] == [tool["name"] for tool in registry.tool_definitions()]
    assert seen["pages"] == -(-len(registry) // PAGE_SIZE) > 1
    assert seen["add"] == "42"
    assert seen["explode"] == {"isError": True, "text": "spell 'explode' failed: RuntimeError: kaboom: ts"}
    assert seen["strict"]["isError"] is True
    assert seen["strict"]["text"].startswith("invalid arguments for spell 'add': a: Input should be a valid integer")
    reports = [[1, 3, "step 1"], [2, 3, "step 2"], [3, 3, "step 3"]]
    assert seen["progress"]["text"] == "done"
    assert seen["progress"]["seen"] == [*reports, "answer"]  # every report, in order, before the answer
    delivered = seen["progress"]["delivered"]  # the SDK drops what it read with the answer (ts_sdk_client.mjs)
    assert delivered == reports[: len(delivered)]
    assert seen["structured"] == {"count": 1, "total": 3.0, "points": [{"x": 1.0, "y": 2.0}]}
    assert seen["unknown"]["code"] == -32602 and "Unknown tool: no_such_spell" in seen["unknown"]["message"]
    assert seen["ping"] is True


async def test_ts_sdk_abort_cancels_the_call(ts_sdk: Path, server: SpellServer) -> None:
    seen = await run_ts(ts_sdk, server, "abort")
    assert seen["aborted"] is True
    assert seen["after"] == "2"
    await wait_lingered("ts-abort")


async def test_ts_sdk_closing_the_transport_cancels_the_call(ts_sdk: Path, server: SpellServer) -> None:
    await run_ts(ts_sdk, server, "close")
    await wait_lingered("ts-close")


async def test_ts_sdk_wrong_secret_shows_the_reason(ts_sdk: Path, server: SpellServer) -> None:
    seen = await run_ts(ts_sdk, server, "wrong_secret", secret="wrong-secret-wrong-secret")
    assert "connected" not in seen
    assert "wrong session secret" in seen["error"], seen


# -- the Python SDK -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_python_sdk_lists_pages_calls_errors_progress(
    mode: str, paged: SpellServer, registry: SpellRegistry
) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with Client(shim_parameters(paged), mode=mode) as client:
        names: list[str] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            names += [tool.name for tool in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert names == [tool["name"] for tool in registry.tool_definitions()]
        assert _text(await client.call_tool("add", {"a": 40, "b": 2})) == "42"
        failed = await client.call_tool("explode", {"message": "py"})
        assert failed.is_error and _text(failed) == "spell 'explode' failed: RuntimeError: kaboom: py"
        for loose in ({"a": "2", "b": 3}, {"a": 2, "b": True}):
            refused = await client.call_tool("add", loose)
            assert refused.is_error and _text(refused).startswith("invalid arguments for spell 'add'")
        done = await client.call_tool("progress", {"steps": 2}, progress_callback=on_progress)
        assert _text(done) == "done"
        assert progress == [(1, 2, "step 1"), (2, 2, "step 2")]


async def test_python_sdk_wrong_secret_in_auto_mode_shows_the_reason(server: SpellServer) -> None:
    with pytest.raises(Exception) as caught:  # the SDK's own error type varies by mode
        async with Client(shim_parameters(server, secret="wrong-secret-wrong-secret"), mode="auto"):
            pass
    assert "wrong session secret" in _all_messages(caught.value)


async def test_python_sdk_pinned_to_the_stateless_revision_is_refused_clearly(server: SpellServer) -> None:
    with pytest.raises(Exception) as caught:
        async with Client(shim_parameters(server), mode="2026-07-28") as client:
            await client.call_tool("linger", {"tag": "stateless", "seconds": 0})
    assert "before initialize; send initialize first" in _all_messages(caught.value)
    assert "stateless" not in lingered


async def test_python_sdk_cancel_and_closing_stdin_cancel_the_call(server: SpellServer) -> None:
    async with stdio_client(shim_parameters(server)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        call = asyncio.create_task(session.call_tool("linger", {"tag": "py-cancel"}))
        await asyncio.sleep(0.3)
        call.cancel()  # the SDK sends notifications/cancelled
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_lingered("py-cancel")
        assert _text(await session.call_tool("add", {"a": 1})) == "3"
        closing = asyncio.create_task(session.call_tool("linger", {"tag": "py-close"}))
        await asyncio.sleep(0.3)
    closing.cancel()
    await wait_lingered("py-close")


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))


def _all_messages(error: BaseException) -> str:
    parts = [f"{type(error).__name__}: {error}"]
    for inner in getattr(error, "exceptions", ()):
        parts.append(_all_messages(inner))
    if error.__cause__ is not None:
        parts.append(_all_messages(error.__cause__))
    return "\n".join(parts)
