"""The runner against the recording fake platform: the edit rate and 429s (waited out, reported once)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from adapters_under_test import FakeAdapter

from coven_codex.entries import DeltaEntry, ResponseEntry
from coven_codex.journal import FileJournal, JournalRecord


async def _wait_shown(adapter: FakeAdapter, text: str, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not any(text in m.text and m.final for m in await adapter.messages()):
            await asyncio.sleep(0.05)


async def test_streamed_edits_keep_the_platform_s_edit_rate(tmp_path: Path) -> None:
    adapter = FakeAdapter(tmp_path, limit=2000, edit_interval=0.5)
    await adapter.start()
    journal = FileJournal(adapter.journal, durability="never")
    try:
        conversation = adapter.conversation("general", "ann")
        for n in range(60):
            await journal.append(DeltaEntry(text=f"w{n} ", item_id="i1", conversation=conversation))
            await asyncio.sleep(0.03)
        await journal.append(
            ResponseEntry(text="".join(f"w{n} " for n in range(60)) + "end", conversation=conversation)
        )
        await _wait_shown(adapter, "w59 end")
    finally:
        await journal.aclose()
        await adapter.stop()
    operations = adapter.operations()
    posts = [op for op in operations if op["op"] == "post"]
    edits = [op for op in operations if op["op"] == "edit"]
    assert len(posts) == 1 and 2 <= len(edits) <= 8, (len(posts), len(edits))
    times = [float(op["t"]) for op in (posts + edits)]  # type: ignore[arg-type]
    assert all(later - earlier >= 0.49 for earlier, later in itertools.pairwise(times)), times
    assert edits[-1]["final"] is True and str(edits[-1]["text"]).endswith("w59 end")
    assert posts[0]["buttons"] == [["Cancel", "cancel"]] and all(op["buttons"] for op in edits[:-1])
    assert edits[-1]["buttons"] == []  # the final reply has no cancel button


async def test_rate_limits_are_waited_out_and_reported_once(tmp_path: Path) -> None:
    adapter = FakeAdapter(tmp_path, rate_limit_every=2)
    await adapter.start()
    journal = FileJournal(adapter.journal, durability="never")
    try:
        conversation = adapter.conversation("general", "ann")
        for n in range(30):
            await journal.append(ResponseEntry(text=f"reply {n:02}.", conversation=conversation))
        await _wait_shown(adapter, "reply 29.")
    finally:
        await journal.aclose()
        await adapter.stop()
    screen = "\n".join(m.text for m in await adapter.messages())
    assert all(screen.count(f"reply {n:02}.") == 1 for n in range(30))
    assert adapter.stderr.read_text().count("rate-limits us") == 1


async def test_a_long_streamed_reply_keeps_the_limit_while_streaming(tmp_path: Path) -> None:
    adapter = FakeAdapter(tmp_path, limit=300, edit_interval=0.1)
    await adapter.start()
    journal = FileJournal(adapter.journal, durability="never")
    words = [f"word{n:03}" for n in range(120)]
    try:
        conversation = adapter.conversation("general", "ann")
        for n in range(0, 120, 10):
            await journal.append(
                DeltaEntry(text=" ".join(words[n : n + 10]) + " ", item_id="i", conversation=conversation)
            )
            await asyncio.sleep(0.05)
        await journal.append(ResponseEntry(text=" ".join(words) + " done", conversation=conversation))
        await _wait_shown(adapter, "done")
    finally:
        await journal.aclose()
        await adapter.stop()
    assert all(len(str(op.get("text", ""))) <= 300 for op in adapter.operations())
    screen = "\n".join(m.text for m in await adapter.messages())
    assert all(screen.count(word) == 1 for word in words)


async def test_a_message_the_platform_refuses_is_replaced_by_one_notice_and_the_next_goes_on(tmp_path: Path) -> None:
    adapter = FakeAdapter(tmp_path)
    await adapter.start()
    journal = FileJournal(adapter.journal, durability="never")
    try:
        conversation = adapter.conversation("general", "ann")
        await journal.append(ResponseEntry(text="a FORBIDDEN reply", conversation=conversation))
        await journal.append(ResponseEntry(text="the next reply", conversation=conversation))
        await _wait_shown(adapter, "the next reply")
        await adapter.stop()
        await adapter.start()  # a restart shows neither the refused reply nor its notice again
        await journal.append(ResponseEntry(text="after the restart", conversation=conversation))
        await _wait_shown(adapter, "after the restart")
    finally:
        await journal.aclose()
        await adapter.stop()
    texts = [m.text for m in await adapter.messages()]
    notices = [text for text in texts if "refused to show a message here" in text]
    assert len(notices) == 1 and "forbidden word" in notices[0]
    assert texts.index(notices[0]) < texts.index(next(t for t in texts if "the next reply" in t))
    assert not [text for text in texts if "FORBIDDEN" in text]


async def test_a_message_the_platform_delivers_twice_becomes_one_thought(tmp_path: Path) -> None:
    adapter = FakeAdapter(tmp_path)
    await adapter.start()
    try:
        for _ in range(2):  # the platform redelivers message m-1 (a reconnect, or after an adapter crash)
            adapter.send_event(
                {"type": "message", "channel": "general", "user": "ann", "text": "only once", "id": "m-1"}
            )
        adapter.send_event({"type": "message", "channel": "general", "user": "ann", "text": "marker", "id": "m-2"})
        journal = FileJournal(adapter.journal)
        try:
            async with asyncio.timeout(20):
                while not [
                    i for i in await journal.read() if isinstance(i, JournalRecord) and i.entry.text == "marker"
                ]:
                    await asyncio.sleep(0.05)
            thoughts = [i.entry for i in await journal.read() if isinstance(i, JournalRecord)]
        finally:
            await journal.aclose()
    finally:
        await adapter.stop()
    assert [t.text for t in thoughts] == ["only once", "marker"]
    assert thoughts[0].id and thoughts[0].id.startswith("fake-")
