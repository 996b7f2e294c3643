"""Attacks on the spell server: hostile spells, starving the spell threads, clients that never read."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, replies
from mcp_helpers import RawClient

from coven_codex.entries import ToolResultEntry
from coven_codex.mcp import ConnectionLimits, SpellRegistry, SpellServer
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.steps import CallTool, Reply

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]

hostile = SpellRegistry(default_timeout=10.0)


@hostile.spell
def exit_sync() -> str:
    """Calls sys.exit() in a worker thread."""
    sys.exit()


@hostile.spell
async def exit_async() -> str:
    """Calls sys.exit(0) on the event loop."""
    sys.exit(0)


@hostile.spell
def interrupt_sync() -> str:
    """Raises KeyboardInterrupt in a worker thread."""
    raise KeyboardInterrupt


@hostile.spell
async def interrupt_async() -> str:
    """Raises KeyboardInterrupt on the event loop."""
    raise KeyboardInterrupt


@hostile.spell
async def cancel_async() -> str:
    """Raises CancelledError though nobody cancelled it."""
    raise asyncio.CancelledError


@hostile.spell
def cancel_sync() -> str:
    """Raises CancelledError in a worker thread."""
    raise asyncio.CancelledError


@hostile.spell
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture
async def hostile_client() -> AsyncIterator[RawClient]:
    async with SpellServer(hostile, label="hostile") as running:
        client = await RawClient.connect(running, initialize=True)
        yield client
        await client.close()


@pytest.mark.parametrize(
    ("name", "raised"),
    [
        ("exit_sync", "SystemExit"),
        ("exit_async", "SystemExit"),
        ("interrupt_sync", "KeyboardInterrupt"),
        ("interrupt_async", "KeyboardInterrupt"),
        ("cancel_async", "CancelledError"),
        ("cancel_sync", "CancelledError"),
    ],
)
async def test_base_exceptions_from_spells_become_tool_errors(
    hostile_client: RawClient, name: str, raised: str
) -> None:
    response = await hostile_client.request("tools/call", {"name": name, "arguments": {}}, request_id=7)
    result = response["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(f"spell {name!r} failed: it raised {raised}")
    after = await hostile_client.request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, request_id=8)
    assert after["result"]["content"][0]["text"] == "3"


stuck = SpellRegistry(default_timeout=5.0)
release = threading.Event()


@stuck.spell(timeout=0.3)
def hang() -> str:
    """Blocks its thread until the test releases it, ignoring its timeout."""
    release.wait(60)
    return "released"


@stuck.spell
def plus(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def _calls(client: RawClient, name: str, count: int, first_id: int, arguments: dict[str, int]) -> list[dict]:
    for offset in range(count):
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": first_id + offset,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
        )
    return [await client.receive(timeout=10) for _ in range(count)]


async def test_hung_sync_spells_do_not_starve_the_others() -> None:
    release.clear()
    try:
        async with SpellServer(stuck, label="stuck") as running:
            client = await RawClient.connect(running, initialize=True)
            hung = await _calls(client, "hang", 8, 100, {})
            assert all("timed out after 0.3 seconds" in r["result"]["content"][0]["text"] for r in hung)
            added = await _calls(client, "plus", 8, 200, {"a": 1, "b": 2})
            assert all(r["result"]["content"][0]["text"] == "3" for r in added), added
            await client.close()
    finally:
        release.set()


async def test_the_thread_cap_refuses_with_the_hung_spells_name(caplog: pytest.LogCaptureFixture) -> None:
    release.clear()
    try:
        async with SpellServer(stuck, label="capped", spell_threads=2, spell_thread_cap=4) as running:
            client = await RawClient.connect(running, initialize=True)
            for first in (100, 110):  # two at a time, so that every one of them gets a thread before timing out
                assert all(
                    "timed out" in r["result"]["content"][0]["text"] for r in await _calls(client, "hang", 2, first, {})
                )
            refused = await _calls(client, "plus", 3, 200, {"a": 1, "b": 2})
            for answer in refused:
                text = answer["result"]["content"][0]["text"]
                assert answer["result"]["isError"] is True
                assert text.startswith("spell 'plus' cannot run now: no thread is free for sync spells"), text
                assert "'hang' ×4" in text
            assert sum("spell threads are stuck" in r.getMessage() for r in caplog.records) == 1
            release.set()
            for _ in range(50):  # the stuck threads return on their own time after the release
                done = await client.request(
                    "tools/call", {"name": "plus", "arguments": {"a": 2, "b": 2}}, request_id=300
                )
                if not done["result"]["isError"]:
                    break
                await asyncio.sleep(0.1)
            assert done["result"]["content"][0]["text"] == "4"
            await client.close()
    finally:
        release.set()


HOSTILE_MODULE = '''
import sys


def quit_now() -> str:
    """Ends the process, if it can."""
    sys.exit(0)


def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper() + "!"
'''


@pytest.mark.codex
@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_daemon_survives_a_spell_calling_sys_exit(codex_bin: Path, harness_factory: Factory) -> None:
    script = [
        CallTool("coven.quit_now", {}),
        Reply("first done"),
        CallTool("coven.shout", {"text": "still here"}),
        Reply("second done"),
    ]
    async with ScriptedModelServer(script, responder=lambda r: Reply("extra")) as model:
        h = harness_factory(codex_bin, model)
        (h.tmp / "hostile_spells.py").write_text(HOSTILE_MODULE)
        daemon = await h.start("--spells", "hostile_spells:quit_now", "hostile_spells:shout")
        await h.think("c", "please quit")
        entries = await h.wait_for(lambda es: "first done" in replies(es, "c"), what="reply after sys.exit")
        assert daemon.process.returncode is None
        results = [e for e in entries if e.kind == "tool_result" and e.conversation == "c"]
        assert results and "raised SystemExit" in results[0].text
        await h.think("c", "shout")
        await h.wait_for(lambda es: "second done" in replies(es, "c"), what="reply to the next thought")
        outputs = [o.output for o in model.requests.function_call_outputs()]
        assert any("STILL HERE!" in o for o in outputs)
        assert "quit_now raised SystemExit" in daemon.log()
        assert await h.stop(daemon) == 0


async def test_a_client_that_never_reads_its_replies_is_dropped(
    registry: SpellRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    limits = ConnectionLimits(max_write_buffer=256 * 1024, write_stall_timeout=1.0)
    async with SpellServer(registry, label="flood", limits=limits) as running:
        flooder = await RawClient.connect(running, initialize=True, limit=2**16)
        sock = flooder.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        garbage = b"{\n" * (2_500_000)  # 5 MB of unparseable lines: each one earns a -32700 reply

        async def flood() -> None:
            with contextlib.suppress(ConnectionError, OSError):
                flooder.writer.write(garbage)
                await flooder.writer.drain()

        sending = asyncio.create_task(flood())
        for _ in range(100):
            if running.connection_count == 0:
                break
            await asyncio.sleep(0.1)
        assert running.connection_count == 0, "the server still serves a client that reads nothing"
        await asyncio.wait_for(sending, 10)
        stalls = [r for r in caplog.records if "read none of its replies" in r.getMessage()]
        assert len(stalls) == 1
        other = await RawClient.connect(running, initialize=True)
        assert (await other.request("ping", request_id="ok"))["result"] == {}
        await other.close()
        flooder.writer.transport.abort()


FAILING_MODULE = '''
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def boom(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)
'''


@pytest.mark.codex
@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_failed_spells_are_errors_in_the_chat_on_every_version(codex_bin: Path, harness_factory: Factory) -> None:
    script = [
        CallTool("coven.add", {"a": 1, "b": 2}, call_id="ok"),
        CallTool("coven.boom", {"reason": "on purpose"}, call_id="raised"),
        CallTool("coven.add", {"a": "one", "b": 2}, call_id="invalid"),
        Reply("all three done"),
    ]
    async with ScriptedModelServer(script, responder=lambda r: Reply("extra")) as model:
        h = harness_factory(codex_bin, model)
        (h.tmp / "failing_spells.py").write_text(FAILING_MODULE)
        daemon = await h.start("--spells", "failing_spells:add", "failing_spells:boom")
        await h.think("c", "cast them")
        entries = await h.wait_for(lambda es: "all three done" in replies(es, "c"), what="the reply after three calls")
        results = {e.call_id: e for e in entries if isinstance(e, ToolResultEntry) and e.conversation == "c"}
        assert set(results) == {"ok", "raised", "invalid"}
        assert results["ok"].text == "3" and results["ok"].is_error is False
        assert "RuntimeError: on purpose" in results["raised"].text and results["raised"].is_error is True
        assert "invalid arguments for spell 'add'" in results["invalid"].text
        assert results["invalid"].is_error is True
        assert await h.stop(daemon) == 0
