"""Streamed replies on the page, in real headless Chromium, over a journal written by the test: the
page folds deltas, replies and turn ends with the adapter kit's stream logic, so a "writing…"
bubble never outlives its reply or its turn, whatever order the entries reach the journal in."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Page
from web_helpers import WebServer, chromium, message_texts, open_page

from coven_codex.entries import BaseEntry, DeltaEntry, ResponseEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import FileJournal

pytestmark = pytest.mark.timeout(180)

SHOWN_ALL = "() => [...document.querySelectorAll('#messages .msg.status')].some(n => n.textContent.includes('{}'))"


async def streamed_bubbles(page: Page) -> list[str]:
    """The text of every bubble still marked as being written."""
    texts: list[str] = await page.eval_on_selector_all(
        "#messages .msg.stream", "nodes => nodes.map(n => n.textContent)"
    )
    return texts


def reply_then_all_its_deltas(conversation: str) -> list[BaseEntry]:
    """A turn whose every delta reaches the journal after its complete reply (a late echo)."""
    return [
        ThoughtEntry(conversation=conversation, sender="ada", text="and the question?"),
        StatusEntry(conversation=conversation, state="turn_started"),
        ResponseEntry(conversation=conversation, text="Six by nine."),
        DeltaEntry(conversation=conversation, item_id="msg_2", text="Six "),
        DeltaEntry(conversation=conversation, item_id="msg_2", text="by "),
        DeltaEntry(conversation=conversation, item_id="msg_2", text="nine."),
        StatusEntry(conversation=conversation, state="turn_completed"),
    ]


def reply_with_late_deltas(conversation: str) -> list[BaseEntry]:
    """A turn whose last deltas reach the journal after its complete reply (Codex's live
    notifications and its rollout are read separately, so this happens)."""
    return [
        ThoughtEntry(conversation=conversation, sender="ada", text="what is the answer?"),
        StatusEntry(conversation=conversation, state="turn_started"),
        DeltaEntry(conversation=conversation, item_id="msg_1", text="The answer "),
        ResponseEntry(conversation=conversation, text="The answer is 42."),
        DeltaEntry(conversation=conversation, item_id="msg_1", text="is "),
        DeltaEntry(conversation=conversation, item_id="msg_1", text="42."),
        StatusEntry(conversation=conversation, state="turn_completed"),
    ]


async def test_deltas_that_reach_the_journal_after_their_reply_leave_no_writing_bubble(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    for entry in reply_with_late_deltas("before"):
        await journal.append(entry)  # already in the journal when the page opens
    for entry in reply_then_all_its_deltas("echo"):
        await journal.append(entry)
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=live", errors)
        for entry in reply_with_late_deltas("live"):
            await journal.append(entry)  # reaching the open page one by one
        await page.wait_for_function(SHOWN_ALL.format("turn completed"))
        assert await streamed_bubbles(page) == []
        assert await message_texts(page, "response") == ["The answer is 42."]
        for shown in ("before", "live"):
            await page.click(f"#conversations button[data-conversation='{shown}']")
            await page.wait_for_function(SHOWN_ALL.format("turn completed"))
            assert await streamed_bubbles(page) == [], shown
            assert await message_texts(page, "response") == ["The answer is 42."], shown
        await page.reload()
        await page.wait_for_function(SHOWN_ALL.format("turn completed"))
        assert await streamed_bubbles(page) == []
        assert await message_texts(page, "response") == ["The answer is 42."]
        # every delta after the reply: a late echo, never shown (not even as an unfinished bubble)
        await page.click("#conversations button[data-conversation='echo']")
        await page.wait_for_function(SHOWN_ALL.format("turn completed"))
        assert await page.locator("#messages .msg.stream, #messages .msg.ended").count() == 0
        assert await message_texts(page, "response") == ["Six by nine."]
        assert errors == []
    await journal.aclose()


async def test_a_stream_whose_turn_ends_without_a_reply_stops_saying_writing(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=room", errors)
        await journal.append(StatusEntry(conversation="room", state="turn_started"))
        await journal.append(DeltaEntry(conversation="room", item_id="msg_1", text="I was about to"))
        await page.wait_for_selector("#messages .msg.stream")
        await journal.append(StatusEntry(conversation="room", state="turn_aborted"))
        await page.wait_for_function(SHOWN_ALL.format("turn aborted"))
        assert await streamed_bubbles(page) == []
        ended = await page.eval_on_selector_all("#messages .msg.ended", "nodes => nodes.map(n => n.textContent)")
        assert len(ended) == 1 and "I was about to" in ended[0] and "writing" not in ended[0]
        await journal.append(DeltaEntry(conversation="room", item_id="msg_1", text=" say more"))
        await journal.append(StatusEntry(conversation="room", state="turn_completed"))
        await page.wait_for_function(SHOWN_ALL.format("turn completed"))
        assert await streamed_bubbles(page) == []  # a delta of a closed stream is not shown again
        await page.reload()
        await page.wait_for_function(SHOWN_ALL.format("turn completed"))
        assert await streamed_bubbles(page) == []
        assert await page.locator("#messages .msg.ended").count() == 1
        assert errors == []
    await journal.aclose()
