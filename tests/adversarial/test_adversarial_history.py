"""``/list`` and ``/history`` give nobody another user's conversations: a sender is known by their platform id,
not by the display name they chose, and ``/history`` answers for the conversation it is typed in only.

The kit's runner in its own process against the recording fake platform (``tests/adapters/fake_platform.py``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adapters"))

from adapters_under_test import FakeAdapter
from running import append, running

from coven_codex.entries import ResponseEntry, ThoughtEntry
from coven_codex.journal import FileJournal, JournalRecord

SECRET = "the launch code is 1234"


async def _texts(adapter: FakeAdapter) -> list[str]:
    return [message.text for message in await adapter.messages()]


async def _shown(adapter: FakeAdapter, text: str, count: int = 1) -> list[str]:
    async with asyncio.timeout(30):
        while len(found := [t for t in await _texts(adapter) if text in t]) < count:
            await asyncio.sleep(0.05)
    return found


async def _thought_id(adapter: FakeAdapter, text: str) -> str:
    async with asyncio.timeout(30):
        while True:
            journal = FileJournal(adapter.journal)
            try:
                items = await journal.read()
            finally:
                await journal.aclose()
            for item in items:
                entry = item.entry if isinstance(item, JournalRecord) else None
                if isinstance(entry, ThoughtEntry) and entry.text == text and entry.id:
                    return entry.id
            await asyncio.sleep(0.05)


async def test_a_user_named_like_another_lists_none_of_their_conversations(tmp_path: Path) -> None:
    async with running(FakeAdapter(tmp_path, limit=2000)) as adapter:
        await adapter.say("secret", "ann", SECRET)
        thought = await _thought_id(adapter, SECRET)
        await append(
            adapter.journal,
            ResponseEntry(
                text="noted, the code", conversation=adapter.conversation("secret", "ann"), in_reply_to=thought
            ),
        )
        await _shown(adapter, "noted, the code")
        await adapter.say("secret", "ann", "/list")
        assert "secret" in (await _shown(adapter, "your conversations"))[0]  # ann's own /list shows it

        # bob calls himself "ann": his /list shows nothing, in any channel
        adapter.send_event({"type": "message", "channel": "general", "user": "bob", "name": "ann", "text": "/list"})
        (nothing,) = await _shown(adapter, "you have not written in any conversation here yet")
        # he writes somewhere (as "ann"): his /list is that conversation alone
        adapter.send_event({"type": "message", "channel": "general", "user": "bob", "name": "ann", "text": "hello"})
        await _thought_id(adapter, "hello")
        adapter.send_event({"type": "message", "channel": "general", "user": "bob", "name": "ann", "text": "/list"})
        bobs = (await _shown(adapter, "your conversations", 2))[-1]
        assert "(1):" in bobs and "general" in bobs, bobs
        # /history answers for the conversation it is typed in: general's, never secret's
        adapter.send_event(
            {"type": "message", "channel": "general", "user": "bob", "name": "ann", "text": "/history 20"}
        )
        (history,) = await _shown(adapter, "the oldest first:")
        assert "hello" in history, history
        in_general = [m.text for m in await adapter.messages() if m.channel == "general"]
        assert nothing in in_general and bobs in in_general and history in in_general
        assert not [text for text in in_general if SECRET in text or "noted, the code" in text or "secret" in text]


async def test_a_history_count_out_of_bounds_is_capped_or_explained(tmp_path: Path) -> None:
    async with running(FakeAdapter(tmp_path, limit=2000)) as adapter:
        for number in range(25):
            await adapter.say("general", "ann", f"question {number}")
        await _thought_id(adapter, "question 24")
        adapter.send_event(
            {"type": "message", "channel": "general", "user": "ann", "text": "/history 99999999999999999999"}
        )
        (capped,) = await _shown(adapter, "the oldest first:")
        assert capped.startswith("the last 20 exchanges here, the oldest first:"), capped
        asked = [line.rsplit(": ", 1)[1] for line in capped.splitlines() if ": question " in line]
        assert asked == [f"question {number}" for number in range(5, 25)], capped
        for bad in ("-1", "0", "1e9", "five"):
            await adapter.say("general", "ann", f"/history {bad}")
        await _shown(adapter, "/history takes a number of exchanges from 1 to 20", 4)
