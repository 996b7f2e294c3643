"""Attacks on the spell server: hostile spells, starving the spell threads, clients that never read."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, replies
from mcp_helpers import RawClient

from coven_codex.mcp import SpellRegistry, SpellServer
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
