"""``/list`` and ``/history`` on every adapter (the console, the web page in Chromium, Slack, Discord and
Telegram through their wire-level fakes, the kit's fake platform): answered from what the adapter read of
the journal, and again after a restart (the index is rebuilt from the journal at start)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from adapters_under_test import AdapterUnderTest
from running import append, running
from test_adapter_contract import ADAPTERS

from coven_codex.entries import ResponseEntry, ThoughtEntry
from coven_codex.journal import FileJournal, JournalRecord


@pytest.fixture(params=list(ADAPTERS))
async def adapter(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AdapterUnderTest]:
    async with running(ADAPTERS[request.param](tmp_path)) as started:
        yield started


async def _thought(adapter: AdapterUnderTest, text: str) -> ThoughtEntry:
    async with asyncio.timeout(30):
        while True:
            journal = FileJournal(adapter.journal)
            try:
                for item in await journal.read():
                    entry = item.entry if isinstance(item, JournalRecord) else None
                    if isinstance(entry, ThoughtEntry) and entry.text == text:
                        return entry
            finally:
                await journal.aclose()
            await asyncio.sleep(0.05)


async def _answer(adapter: AdapterUnderTest, header: str, *lines: str, after: str = "") -> str:
    """The first answer starting with ``header`` after the last message showing ``after``, once it shows
    every one of ``lines`` (a console prints an answer line by line: what follows the header is read
    with it; the web page shows one notice at a time, which replaces the one showing ``after``)."""
    try:
        async with asyncio.timeout(30):
            return await _answered(adapter, header, lines, after)
    except TimeoutError:
        shown = await adapter.messages()
        raise AssertionError(f"no answer {header!r} showing {lines} within 30 s; shown: {shown}") from None


async def _answered(adapter: AdapterUnderTest, header: str, lines: tuple[str, ...], after: str) -> str:
    while True:
        shown = await adapter.messages()
        since = max((index for index, m in enumerate(shown) if after and after in m.text), default=0)
        starts = [index for index, message in enumerate(shown) if index >= since and header in message.text]
        if starts:
            text = "\n".join(message.text for message in shown[starts[0] :])
            if all(line in text for line in lines):
                return text
        await asyncio.sleep(0.05)


async def test_list_and_history_answer_from_the_journal_and_again_after_a_restart(adapter: AdapterUnderTest) -> None:
    conversation = adapter.conversation("general", "ann")
    await adapter.say("general", "ann", "what does the cache hold?")
    thought = await _thought(adapter, "what does the cache hold?")
    assert str(getattr(thought, "sender_id", "")).count(":") >= 1, thought  # <platform>:<the user's id>
    reply = ResponseEntry(text="the cache holds 3 keys", conversation=conversation, in_reply_to=thought.id)
    await append(adapter.journal, reply)
    await _answer(adapter, "the cache holds 3 keys")

    await adapter.say("general", "ann", "/history")
    await _answer(adapter, "the last 1 exchange here", ": what does the cache hold?", "→ codex: the cache holds 3 keys")
    await adapter.say("general", "ann", "/list")
    await _answer(adapter, "your conversations", "(1):", "· codex: the cache holds 3 keys")

    await adapter.stop()
    await adapter.start()
    await adapter.say("general", "ann", "/help")
    await _answer(adapter, "/history [N]")
    await adapter.say("general", "ann", "/list")
    await _answer(adapter, "your conversations", "· codex: the cache holds 3 keys", after="/history [N]")
