"""End to end: the daemon with the real Codex CLI 0.169.0 and the scripted model, behind the
Discord adapter process, driven through the fake Discord Gateway and REST API: a streamed reply
shown once, a stranger refused, a spell call, and an approval answered with the Approve button."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, user_prompts
from discord_fake import CHANNEL_ID, TEST_TOKEN, FakeDiscord, serve, start_adapter, stop

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.responders import pending_tool_output
from coven_codex.testing.steps import CallTool, Reply, TurnScript

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

ALLOWED = "5000000000000000001"
STRANGER = "5000000000000000009"
STREAMED = "Here is a streamed answer from codex, in several pieces."


ESCALATED = {
    "cmd": "touch approved.txt",
    "sandbox_permissions": "require_escalated",
    "login": False,
    "tty": False,
    "yield_time_ms": 5000,
    "justification": "create approved.txt",
}


def respond(request: RecordedRequest) -> TurnScript:
    prompts = user_prompts(request)
    last = prompts[-1] if prompts else ""
    output = pending_tool_output(request)
    if output is not None:
        return Reply("the command ran") if last.startswith("run") else Reply(f"the spell says {output.output}")
    if last.startswith("add"):
        return CallTool("coven.add", {"a": 2, "b": 3})
    if last.startswith("run"):
        return CallTool("exec_command", ESCALATED)
    return Reply(STREAMED, chunk_size=4, delay=0.04)


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeDiscord, int]]:
    state = FakeDiscord(token=TEST_TOKEN)
    async with serve(state) as port:
        yield state, port


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
        h.write_base_config(approval_policy="on-request")
        await h.start("--spells", "coven_codex.demo.spells:spells")
        adapter = await start_adapter(h.journal_path, port, allow_users=[ALLOWED])
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
            # a spell call and its result
            await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "add 2 and 3"))
            await _until(lambda: any("the spell says" in m.content for m in fake.in_channel(CHANNEL_ID)), 120)
            assert any("coven.add" in m.content for m in fake.in_channel(CHANNEL_ID))
            # a command that needs approval, answered with the Approve button

            def approval() -> bool:
                return any(m.components for m in fake.in_channel(CHANNEL_ID) if "touch" in m.content)

            await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "run the touch command"))
            await _until(approval, 120)
            request = next(m for m in fake.in_channel(CHANNEL_ID) if m.components and "touch" in m.content)
            actions = [c["custom_id"] for row in request.components for c in row["components"]]
            approve = next(a for a in actions if a.startswith("approve"))
            await fake.dispatch("INTERACTION_CREATE", fake.button_press(ALLOWED, request.id, approve))
            await _until(lambda: any("the command ran" in m.content for m in fake.in_channel(CHANNEL_ID)), 120)
            assert (h.workspace / "approved.txt").exists()
        finally:
            await stop(adapter)
