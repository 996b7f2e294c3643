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
from chat_script import STREAMED, chat_responder, last_prompt
from slack_fake import BOT_ID, actions_of, text_of
from slack_under_test import SlackAdapter

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.responders import pending_tool_output
from coven_codex.testing.steps import CallTool, Reply, TurnScript, escalated_command

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


THIRTY = 30


def respond_thirty(request: RecordedRequest) -> TurnScript:
    """``thirty ...``: 30 spell calls in one turn, one after another, then a reply."""
    done = len(request.function_call_outputs())
    if done < THIRTY:
        return CallTool("coven.add", {"a": done, "b": 1})
    return Reply("thirty additions done.")


async def test_a_turn_of_thirty_spell_calls_posts_at_most_three_messages_in_quiet_mode(
    codex_bin_169: Path, harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness]
) -> None:
    async with ScriptedModelServer(responder=respond_thirty) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        await h.start("--spells", "coven_codex.demo.spells:spells")
        slack = SlackAdapter(h.journal_path.parent, render="quiet")
        fake = slack.fake
        await slack.start()
        root = slack.roots["general"]

        def card() -> dict[str, object] | None:
            return next((m for m in fake.bot_messages("CGENERAL") if text_of(m).startswith("done in")), None)

        try:
            await fake.mention("CGENERAL", "UANN", "thirty additions, please", root)
            await _until(
                lambda: card() is not None and any("thirty additions done." in text_of(m) for m in fake.bot_messages())
            )
            messages = fake.bot_messages("CGENERAL")
            assert 2 <= len(messages) <= 3, [text_of(m) for m in messages]
            shown = card()
            assert shown is not None and shown["thread_ts"] == root
            assert f"· {THIRTY} steps" in text_of(shown).splitlines()[0]
            assert "✓ coven.add(a=29, b=1)" in text_of(shown)
            updates = [op for op in fake.operations if op["op"] == "update" and op["ts"] == shown["ts"]]
            assert updates, "the card was not edited in place"
            assert any(op["op"] == "status" and op["status"] == "is working…" for op in fake.operations)
        finally:
            await slack.close()


def respond_run(request: RecordedRequest) -> TurnScript:
    """Every prompt: the same escalated command, then "ran N" (N: the commands' outputs so far)."""
    if pending_tool_output(request) is not None:
        return Reply(f"ran {len(request.function_call_outputs())}")
    return escalated_command("touch approved.txt", "create approved.txt")


async def test_approve_for_the_session_lets_the_same_command_run_again_without_asking(
    codex_bin_169: Path, harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness]
) -> None:
    async with ScriptedModelServer(responder=respond_run) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        await h.start()
        slack = SlackAdapter(h.journal_path.parent, render="quiet")
        fake = slack.fake
        await slack.start()
        root = slack.roots["general"]

        def requests() -> list[dict[str, object]]:
            return [m for m in fake.bot_messages("CGENERAL") if "approval needed" in text_of(m)]

        def shown(text: str) -> bool:
            return any(text in text_of(m) for m in fake.bot_messages("CGENERAL"))

        try:
            await fake.mention("CGENERAL", "UANN", "run the touch command", root)
            await _until(lambda: bool(requests()))
            (message,) = requests()
            assert [a.split()[0] for a in actions_of(message)] == ["approve", "approve-session", "deny"]
            session = next(a for a in actions_of(message) if a.startswith("approve-session"))
            await fake.acked(await fake.press("CGENERAL", "UANN", session, str(message["ts"]), root))
            await _until(lambda: shown("ran 1"))
            (message,) = requests()  # updated in place: who decided, no buttons left
            assert "approved for the session by ann (UANN)" in text_of(message) and actions_of(message) == ()
            (h.workspace / "approved.txt").unlink()
            await fake.mention("CGENERAL", "UANN", "run it again", root)
            await _until(lambda: shown("ran 2"))
            assert (h.workspace / "approved.txt").exists()
            assert len(requests()) == 1  # the same command ran again without asking
            assert h.journal_path.read_text().count('"kind":"approval_request"') == 1
        finally:
            await slack.close()


def respond_echo(request: RecordedRequest) -> TurnScript:
    """Answers ``answered: <the prompt's last line>`` (the user's words after any context)."""
    return Reply(f"answered: {last_prompt(request).splitlines()[-1]}")


async def test_a_mention_then_a_follow_up_without_a_mention_are_both_answered_in_the_thread(
    codex_bin_169: Path, harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness]
) -> None:
    async with ScriptedModelServer(responder=respond_echo) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        await h.start()
        slack = SlackAdapter(h.journal_path.parent, context_messages=5)
        fake = slack.fake
        await slack.start()
        root = str(fake.user_message("CGENERAL", "UBOB", "the deploy failed at step 3")["ts"])

        def shown(text: str) -> list[dict[str, object]]:
            return [m for m in fake.bot_messages("CGENERAL") if text in text_of(m)]

        try:
            await fake.mention("CGENERAL", "UANN", "why did it fail?", root)
            await _until(lambda: bool(shown("answered: why did it fail?")))
            await fake.say("CGENERAL", "UANN", "and how do we fix it?", root)
            await _until(lambda: bool(shown("answered: and how do we fix it?")))
            replies = [m for m in fake.bot_messages("CGENERAL") if "answered:" in text_of(m)]
            assert [m["thread_ts"] for m in replies] == [root, root], [text_of(m) for m in replies]
            prompts = server.requests.turn_prompts()
            first = next(p for p in prompts if p.endswith("why did it fail?"))
            assert "[bob (UBOB)] the deploy failed at step 3" in first  # the thread's context reached Codex
            assert any(p == "and how do we fix it?" for p in prompts)  # the follow-up: its own words only
        finally:
            await slack.close()
