"""End to end: the daemon with the real Codex CLI 0.169.0 and the scripted model, behind the
Discord adapter process, driven through the fake Discord Gateway and REST API."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness
from aiohttp import web
from discord_fake import CHANNEL_ID, FakeDiscord

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.steps import Reply, TurnScript

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAwMQ.GabcDe.abcdefghijklmnopqrstuvwxyz012345"
ALLOWED = "5000000000000000001"
STRANGER = "5000000000000000009"
STREAMED = "Here is a streamed answer from codex, in several pieces."


def respond(request: RecordedRequest) -> TurnScript:
    return Reply(STREAMED, chunk_size=4, delay=0.04)


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeDiscord, int]]:
    state = FakeDiscord(token=TOKEN)
    runner = web.AppRunner(state.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield state, runner.addresses[0][1]
    await runner.cleanup()


async def _until(condition: Callable[[], bool], seconds: float = 60.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.1)


async def test_a_discord_message_gets_the_streamed_reply_once(
    codex_bin_169: Path,
    harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness],
    served: tuple[FakeDiscord, int],
) -> None:
    fake, port = served
    async with ScriptedModelServer(responder=respond) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config()
        await h.start()
        adapter = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "coven_codex.cli.main",
            "discord",
            "--journal",
            str(h.journal_path),
            "--allow-user",
            ALLOWED,
            "--api-base",
            f"http://127.0.0.1:{port}/api/v10",
            "--gateway-url",
            f"ws://127.0.0.1:{port}/gateway",
            env={**os.environ, "DISCORD_BOT_TOKEN": TOKEN},
        )
        try:
            async with asyncio.timeout(30):
                await fake.identified.wait()
            await fake.dispatch("MESSAGE_CREATE", fake.user_message(STRANGER, "let me in"))
            await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "hello codex"))
            await _until(lambda: any(STREAMED in m.content for m in fake.in_channel(CHANNEL_ID)), 120)
            await asyncio.sleep(1.0)
            shown = [m.content for m in fake.in_channel(CHANNEL_ID)]
            assert sum(STREAMED in text for text in shown) == 1, shown
            reply = next(m for m in fake.in_channel(CHANNEL_ID) if STREAMED in m.content)
            assert reply.edits >= 1, "the reply was not streamed by edits"
            assert "let me in" not in h.journal_path.read_text()
        finally:
            adapter.terminate()
            async with asyncio.timeout(20):
                await adapter.wait()
