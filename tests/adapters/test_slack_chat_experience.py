"""Slack as a chat that feels native (issue 30): the progress card, signs of life, rendering, approvals.

The real ``coven-codex slack`` process against the fake Slack (``slack_fake.py``), with the
adapter's default ``render = "quiet"``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from running import append
from slack_fake import BOT_USER, actions_of, text_of
from slack_under_test import SlackAdapter
from turns import tool_turn

from coven_codex.entries import ApprovalEntry, ApprovalRequestEntry, ResponseEntry, StatusEntry
from coven_codex.journal import FileJournal, JournalRecord


@pytest.fixture
async def slack(tmp_path: Path) -> AsyncIterator[SlackAdapter]:
    adapter = SlackAdapter(tmp_path, render="quiet")
    await adapter.start()
    try:
        yield adapter
    finally:
        await adapter.close()


def _card(adapter: SlackAdapter) -> dict[str, Any] | None:
    return next((m for m in adapter.fake.bot_messages() if text_of(m).startswith(("working", "done"))), None)


def _ops(adapter: SlackAdapter, kind: str) -> list[dict[str, Any]]:
    return [op for op in adapter.fake.operations if op["op"] == kind]


async def _until(adapter: SlackAdapter, check: Callable[[], bool], timeout: float = 30) -> None:
    await adapter.fake.wait_for(check, timeout)


async def test_a_turn_of_thirty_commands_is_one_card_edited_in_place_and_the_reply(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    await append(slack.journal, *tool_turn(conversation, 30, "thirty commands ran."))
    await _until(
        slack,
        lambda: (
            (c := _card(slack)) is not None
            and text_of(c).startswith("done")
            and any("thirty commands ran." in text_of(m) for m in slack.fake.bot_messages())
        ),
    )
    messages = slack.fake.bot_messages("CGENERAL")
    assert len(messages) == 2, [text_of(m) for m in messages]  # the card, then the reply: the thread notifies once
    card = _card(slack)
    assert card is not None and card["thread_ts"] == slack.roots["general"]
    assert "· 31 steps" in text_of(card) and "✗ $ false (exit 1)" not in text_of(card)  # scrolled out
    assert "✓ $ echo step 29" in text_of(card) and "… 23 earlier steps" in text_of(card)
    assert actions_of(card)[0].startswith("details ")
    posts, updates = _ops(slack, "post"), _ops(slack, "update")
    assert posts[0]["ts"] == card["ts"] and actions_of(posts[0]["message"]) == ("cancel",)
    assert updates and all(op["ts"] == card["ts"] for op in updates) and len(updates) <= 20


async def test_details_answer_with_the_turn_s_tool_output_in_the_thread(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    await append(slack.journal, *tool_turn(conversation, 3, "three ran."))
    await _until(slack, lambda: (c := _card(slack)) is not None and text_of(c).startswith("done"))
    card = _card(slack)
    assert card is not None
    root = slack.roots["general"]
    await slack.fake.acked(await slack.fake.press("CGENERAL", "UANN", actions_of(card)[0], str(card["ts"]), root))
    await _until(slack, lambda: any("output of step 02" in text_of(m) for m in slack.fake.bot_messages()))
    details = next(m for m in slack.fake.bot_messages() if "output of step 02" in text_of(m))
    assert details["thread_ts"] == root and "output of step 00" in text_of(details)


async def test_the_thread_shows_a_working_status_until_the_turn_ends(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    root = slack.roots["general"]
    await append(slack.journal, StatusEntry(state="turn_started", conversation=conversation))
    await _until(slack, lambda: bool(_ops(slack, "status")))
    assert _ops(slack, "status")[0] == {"op": "status", "channel": "CGENERAL", "thread": root, "status": "is working…"}
    await append(slack.journal, StatusEntry(state="turn_completed", conversation=conversation))
    await _until(slack, lambda: _ops(slack, "status")[-1]["status"] == "")


async def test_without_thread_status_a_reaction_on_the_user_s_message_shows_the_work(tmp_path: Path) -> None:
    adapter = SlackAdapter(tmp_path, render="quiet")
    adapter.fake.thread_status = False  # a workspace where the app may not set thread status
    await adapter.start()
    try:
        root = adapter.roots["general"]
        asked = await adapter.fake.mention("CGENERAL", "UANN", "count the files", root)
        conversation = adapter.conversation("general", "ann")
        # A turn starts after its thought reached the journal (the daemon's order): until the adapter
        # has taken the mention, the user's last message it knows is the thread's first.
        async with asyncio.timeout(30):
            while not adapter.journal.exists() or "count the files" not in adapter.journal.read_text():
                await asyncio.sleep(0.05)
        await append(adapter.journal, StatusEntry(state="turn_started", conversation=conversation))
        await _until(adapter, lambda: bool(_ops(adapter, "react")))
        assert _ops(adapter, "react") == [
            {"op": "react", "channel": "CGENERAL", "ts": asked, "name": "hourglass_flowing_sand"}
        ]
        message = adapter.fake.messages["CGENERAL"][asked]
        assert message["reactions"] == [{"name": "hourglass_flowing_sand", "users": [BOT_USER], "count": 1}]
        await append(adapter.journal, StatusEntry(state="turn_completed", conversation=conversation))
        await _until(adapter, lambda: bool(_ops(adapter, "unreact")))
        assert not adapter.fake.messages["CGENERAL"][asked]["reactions"]
        assert "a reaction shows that Codex works instead" in adapter.stderr.read_text()
    finally:
        await adapter.close()


TABLE_REPLY = "Done: *italic* stays italic.\n\n| file | lines |\n|---|---|\n| a.py | 12 |"


async def test_a_reply_goes_out_in_a_markdown_block_as_the_model_wrote_it(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    await append(slack.journal, ResponseEntry(text=TABLE_REPLY, conversation=conversation))
    await _until(slack, lambda: any("a.py" in text_of(m) for m in slack.fake.bot_messages()))
    (reply,) = slack.fake.bot_messages("CGENERAL")
    assert reply["blocks"] == [{"type": "markdown", "text": f"codex: {TABLE_REPLY}"}]
    assert reply["text"] == f"codex: {TABLE_REPLY}"  # the plain-text fallback for notifications


async def test_where_markdown_blocks_are_refused_the_reply_comes_in_sections_once(tmp_path: Path) -> None:
    adapter = SlackAdapter(tmp_path, render="quiet")
    adapter.fake.markdown_blocks = False
    await adapter.start()
    try:
        conversation = adapter.conversation("general", "ann")
        await append(adapter.journal, ResponseEntry(text=TABLE_REPLY, conversation=conversation))
        await _until(adapter, lambda: any("a.py" in text_of(m) for m in adapter.fake.bot_messages()))
        (reply,) = adapter.fake.bot_messages("CGENERAL")
        assert [block["type"] for block in reply["blocks"]] == ["section"]
        assert text_of(reply) == f"codex: {TABLE_REPLY}"
    finally:
        await adapter.close()


async def test_an_answered_approval_shows_who_decided_and_loses_its_buttons(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    root = slack.roots["general"]
    await append(
        slack.journal, *[ApprovalRequestEntry(request_id="r1", action="rm -rf build", conversation=conversation)]
    )
    await _until(slack, lambda: any("rm -rf build" in text_of(m) for m in slack.fake.bot_messages()))
    (request,) = slack.fake.bot_messages("CGENERAL")
    assert actions_of(request) == ("approve r1", "approve-session r1", "deny r1")
    await slack.fake.acked(await slack.fake.press("CGENERAL", "UANN", "approve-session r1", str(request["ts"]), root))
    await _until(slack, lambda: "approved for the session" in text_of(slack.fake.bot_messages("CGENERAL")[0]))
    request = slack.fake.bot_messages("CGENERAL")[0]
    assert text_of(request).endswith("approved for the session by ann (UANN)") and actions_of(request) == ()
    assert [op["op"] for op in slack.fake.operations if op.get("ts") == request["ts"]] == ["post", "update"]
    journal = FileJournal(slack.journal)
    try:
        entries = [item.entry for item in await journal.read() if isinstance(item, JournalRecord)]
    finally:
        await journal.aclose()
    answers = [(e.request_id, e.decision) for e in entries if isinstance(e, ApprovalEntry)]
    assert answers == [("r1", "approve_for_session")]
