"""End to end: the daemon with the real Codex CLI 0.169.0 and the scripted model, behind the
Discord adapter process, driven through the fake Discord Gateway and REST API: a streamed reply
shown once, a stranger refused, a spell call, and an approval answered with the Approve button."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness
from chat_script import STREAMED, chat_responder
from discord_fake import CHANNEL_ID, GUILD_ID, TEST_TOKEN, FakeDiscord, serve, start_adapter, stop

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.steps import CallTool, Reply, TurnScript

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]
respond = chat_responder()

ALLOWED = "5000000000000000001"
STRANGER = "5000000000000000009"


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


async def test_codex_slash_command_in_a_thread_channel_gets_its_reply_in_the_thread(
    codex_bin_169: Path,
    harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness],
    served: tuple[FakeDiscord, int],
) -> None:
    fake, port = served
    async with ScriptedModelServer(responder=respond) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        await h.start()
        adapter = await start_adapter(h.journal_path, port, allow_users=[ALLOWED], thread_channels=[CHANNEL_ID])
        try:
            async with asyncio.timeout(30):
                await fake.identified.wait()
            command = fake.slash_command(ALLOWED, "codex", {"prompt": "hello from a slash command"})
            await fake.dispatch("INTERACTION_CREATE", command)
            await _until(lambda: len(fake.threads) == 1)
            thread = next(iter(fake.threads))

            def replies() -> list[str]:
                return [m.content for m in fake.in_channel(thread) if STREAMED in m.content]

            await _until(lambda: len(replies()) == 1, 120)
            # a follow-up in the thread, without a mention, continues the same conversation
            await fake.dispatch(
                "MESSAGE_CREATE", fake.user_message(ALLOWED, "and again", mention=False, channel=thread)
            )
            await _until(lambda: len(replies()) == 2, 120)
            assert not [m for m in fake.in_channel(CHANNEL_ID) if STREAMED in m.content]
            prompts = server.requests.turn_prompts()
            assert any("hello from a slash command" in p for p in prompts), prompts
            assert any("and again" in p for p in prompts), prompts
            # ... and the same Codex session: the second turn's request carries the first prompt
            second = next(
                r for r in server.requests.responses_requests() if r.starts_turn() and "and again" in r.user_texts()[-1]
            )
            assert any("hello from a slash command" in text for text in second.user_texts())
            conversation = f"discord:{GUILD_ID}/{CHANNEL_ID}/{thread}"
            thoughts = [e for e in await h.entries() if e.kind == "thought"]
            assert len(thoughts) == 2 and {e.conversation for e in thoughts} == {conversation}
        finally:
            await stop(adapter)


THIRTY = 30


def respond_thirty(request: RecordedRequest) -> TurnScript:
    """30 spell calls in one turn, one after another, then a reply."""
    done = len(request.function_call_outputs())
    if done < THIRTY:
        return CallTool("coven.add", {"a": done, "b": 1})
    return Reply("thirty additions done.")


async def test_a_turn_of_thirty_spell_calls_posts_at_most_three_messages_in_quiet_mode(
    codex_bin_169: Path,
    harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness],
    served: tuple[FakeDiscord, int],
) -> None:
    fake, port = served
    async with ScriptedModelServer(responder=respond_thirty) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        await h.start("--spells", "coven_codex.demo.spells:spells")
        adapter = await start_adapter(h.journal_path, port, allow_users=[ALLOWED], render="quiet")

        def card() -> str:
            return next((m.content for m in fake.in_channel(CHANNEL_ID) if m.content.startswith("done in")), "")

        try:
            async with asyncio.timeout(30):
                await fake.identified.wait()
            await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "thirty additions, please"))
            await _until(
                lambda: (
                    bool(card()) and any("thirty additions done." in m.content for m in fake.in_channel(CHANNEL_ID))
                ),
                120,
            )
            messages = [m.content for m in fake.in_channel(CHANNEL_ID)]
            assert 2 <= len(messages) <= 3, messages
            assert f"· {THIRTY} steps" in card().splitlines()[0] and "✓ coven.add(a=29, b=1)" in card()
            assert len(fake.typing) >= 1
        finally:
            await stop(adapter)
