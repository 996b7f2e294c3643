"""End to end: the daemon with the real Codex CLI 0.169.0 and the scripted model, behind the
Telegram adapter process, driven through the fake Bot API: a private message and a forum-topic
message each get the streamed reply once, a spell call, an approval answered with an inline
button, and a stranger refused with nothing in the journal; a turn of thirty spell calls posts at
most three messages in ``quiet`` mode."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness
from chat_script import STREAMED, chat_responder
from telegram_fake import FakeTelegram
from telegram_under_test import GROUP, start_adapter

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.steps import CallTool, Reply, TurnScript

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]
respond = chat_responder()

ALLOWED = 5001
STRANGER = 5009
TOPIC = 11


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as state:
        yield state


async def _until(condition: Callable[[], bool], seconds: float = 60.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.1)


async def test_private_and_topic_messages_get_the_streamed_reply_once_a_spell_and_an_approval_button(
    codex_bin_169: Path,
    harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness],
    fake: FakeTelegram,
    tmp_path: Path,
) -> None:
    async with ScriptedModelServer(responder=respond) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        await h.start("--spells", "coven_codex.demo.spells:spells")
        log = tmp_path / "telegram.log"
        with log.open("ab") as out:
            adapter = await start_adapter(
                h.journal_path, fake.base, stderr=out.fileno(), allow_users=[str(ALLOWED)], edit_interval=0.5
            )
        try:
            await _until(lambda: "connected as" in log.read_text(), 30)
            fake.user_message(STRANGER, "let me in")
            fake.user_message(ALLOWED, "hello codex")
            await _until(lambda: any(STREAMED in m.text for m in fake.in_chat(ALLOWED)), 120)
            fake.user_message(ALLOWED, "hello from the topic", chat_id=GROUP, thread=TOPIC, mention=True)
            await _until(lambda: any(STREAMED in m.text for m in fake.in_chat(GROUP, TOPIC)), 120)
            await asyncio.sleep(1.0)
            for shown in (fake.in_chat(ALLOWED), fake.in_chat(GROUP, TOPIC)):
                assert sum(STREAMED in m.text for m in shown) == 1, [m.text for m in shown]
                reply = next(m for m in shown if STREAMED in m.text)
                assert reply.edits >= 1 and reply.buttons == [], "the reply was not streamed by edits"
            assert any("not allowed" in m.text for m in fake.in_chat(STRANGER))
            assert "let me in" not in h.journal_path.read_text()
            assert (ALLOWED, None) in fake.typing and (GROUP, TOPIC) in fake.typing
            # a spell call and its result
            fake.user_message(ALLOWED, "add 2 and 3")
            await _until(lambda: any("the spell says" in m.text for m in fake.in_chat(ALLOWED)), 120)
            assert any("coven.add" in m.text for m in fake.in_chat(ALLOWED))

            # a command that needs approval, answered with the inline Approve button
            def approval() -> list[object]:
                return [m for m in fake.in_chat(ALLOWED) if m.buttons and "touch" in m.text]

            fake.user_message(ALLOWED, "run the touch command")
            await _until(lambda: bool(approval()), 120)
            request = next(m for m in fake.in_chat(ALLOWED) if m.buttons and "touch" in m.text)
            approve = next(action for _, action in request.buttons if action.startswith("approve"))
            fake.press(ALLOWED, request, approve)
            await _until(lambda: any("the command ran" in m.text for m in fake.in_chat(ALLOWED)), 120)
            assert (h.workspace / "approved.txt").exists()
            assert fake.answered, "the button press was not answered"
            conversations = {e.conversation for e in await h.entries() if e.kind == "thought"}
            assert conversations == {f"telegram:/{ALLOWED}/", f"telegram:/{GROUP}/{TOPIC}"}
        finally:
            adapter.terminate()
            async with asyncio.timeout(20):
                await adapter.wait()
    assert adapter.returncode == 0, log.read_text()


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
    fake: FakeTelegram,
    tmp_path: Path,
) -> None:
    async with ScriptedModelServer(responder=respond_thirty) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        await h.start("--spells", "coven_codex.demo.spells:spells")
        log = tmp_path / "telegram.log"
        with log.open("ab") as out:
            adapter = await start_adapter(
                h.journal_path, fake.base, stderr=out.fileno(), allow_users=[str(ALLOWED)], render="quiet"
            )

        def card() -> str:
            return next((m.text for m in fake.in_chat(ALLOWED) if m.text.startswith("done in")), "")

        try:
            await _until(lambda: "connected as" in log.read_text(), 30)
            fake.user_message(ALLOWED, "thirty additions, please")
            await _until(
                lambda: bool(card()) and any("thirty additions done." in m.text for m in fake.in_chat(ALLOWED)), 120
            )
            messages = [m.text for m in fake.in_chat(ALLOWED)]
            assert 2 <= len(messages) <= 3, messages
            assert f"· {THIRTY} steps" in card().splitlines()[0] and "✓ coven.add(a=29, b=1)" in card()
            assert (ALLOWED, None) in fake.typing
        finally:
            adapter.terminate()
            async with asyncio.timeout(20):
                await adapter.wait()
    assert adapter.returncode == 0, log.read_text()
