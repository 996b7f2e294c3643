"""End to end: the daemon with the real Codex CLI 0.169.0 and the scripted model, behind the ``coven-codex
slack`` process, driven through the fake Slack (Socket Mode envelopes in, Web API calls out): a mention in
a thread gets the streamed reply once (one message, edited), a stranger is refused and nothing of theirs
reaches the journal, a spell call is shown with its result, and an approval is answered with the
Approve button (then the command runs)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness
from chat_script import STREAMED, chat_responder
from slack_fake import BOT_ID, actions_of, text_of
from slack_under_test import SlackAdapter

from coven_codex.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]
respond = chat_responder(delay=0.08)


async def _until(condition: Callable[[], bool], seconds: float = 120.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.1)


async def test_a_slack_mention_gets_the_streamed_reply_once_and_approvals_go_through_buttons(
    codex_bin_169: Path, harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness]
) -> None:
    async with ScriptedModelServer(responder=respond) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        await h.start("--spells", "coven_codex.demo.spells:spells")
        slack = SlackAdapter(h.journal_path.parent)
        assert slack.journal == h.journal_path
        fake = slack.fake
        await slack.start()
        root = slack.roots["general"]

        def shown(text: str) -> list[dict[str, object]]:
            return [m for m in fake.bot_messages("CGENERAL") if text in text_of(m)]

        try:
            await fake.mention("CGENERAL", "USTRANGER", "let me in", root)
            await fake.mention("CGENERAL", "UANN", "hello codex", root)
            await _until(lambda: bool(shown(STREAMED)))
            await asyncio.sleep(1.0)
            replies = shown(STREAMED)
            assert len(replies) == 1, [text_of(m) for m in fake.bot_messages()]
            reply = replies[0]
            assert reply["thread_ts"] == root and reply["bot_id"] == BOT_ID
            edits = [op for op in fake.operations if op["op"] == "update" and op["ts"] == reply["ts"]]
            assert edits, "the reply was not streamed by chat.update"
            assert actions_of(reply) == ()  # the final reply has no Cancel button
            assert shown("not allowed"), "the stranger was not told"
            assert "let me in" not in h.journal_path.read_text()
            # a spell call and its result
            await fake.mention("CGENERAL", "UANN", "add 2 and 3", root)
            await _until(lambda: bool(shown("the spell says")))
            assert shown("coven.add") and shown("← ")
            # a command that needs approval, answered with the Approve button

            def request() -> list[dict[str, object]]:
                return [m for m in shown("touch") if any(a.startswith("approve") for a in actions_of(m))]

            await fake.mention("CGENERAL", "UANN", "run the touch command", root)
            await _until(lambda: bool(request()))
            message = request()[0]
            approve = next(a for a in actions_of(message) if a.startswith("approve"))
            await fake.acked(await fake.press("CGENERAL", "UANN", approve, str(message["ts"]), root))
            await _until(lambda: bool(shown("the command ran")))
            assert (h.workspace / "approved.txt").exists()
            assert not [m for m in fake.bot_messages() if m.get("thread_ts") != root]
        finally:
            await slack.close()
