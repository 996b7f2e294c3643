"""``/status``: the last turn's typed ``usage`` shown readably; a ``session_reset`` forgets the thread."""

from __future__ import annotations

import asyncio
from pathlib import Path

from adapters_under_test import FakeAdapter

from coven_codex.adapters.kit.commands import ConversationState, format_usage
from coven_codex.entries import ResponseEntry, StatusEntry, TokenUsage
from coven_codex.journal import FileJournal


def test_usage_is_formatted_for_people() -> None:
    usage = TokenUsage(
        input_tokens=12000, cached_input_tokens=3000, output_tokens=345, reasoning_output_tokens=64, total_tokens=12345
    )
    assert format_usage(usage) == "12,345 tokens (12,000 in, 3,000 of them cached; 345 out, 64 of them reasoning)"
    # exec's turn.completed gives no total and no reasoning count: the total is the sum, nothing is invented
    assert (
        format_usage(TokenUsage(input_tokens=10, cached_input_tokens=0, output_tokens=5)) == "15 tokens (10 in; 5 out)"
    )
    assert format_usage(TokenUsage(total_tokens=7)) == "7 tokens"
    assert format_usage(TokenUsage(output_tokens=9)) == "9 out"
    assert format_usage(TokenUsage()) == "not reported"
    assert ConversationState().describe().endswith("last turn's token usage: not reported")
    assert ConversationState(usage=TokenUsage(total_tokens=1500)).describe().endswith("usage: 1,500 tokens")


async def _shown(adapter: FakeAdapter, text: str) -> None:
    """Entries are tracked in journal order: once ``text`` (appended last) is shown, the ones before are in."""
    async with asyncio.timeout(30):
        while not any(text in m.text for m in await adapter.messages()):
            await asyncio.sleep(0.05)


async def _status_reply(adapter: FakeAdapter, count: int) -> str:
    async with asyncio.timeout(30):
        while True:
            replies = [m.text for m in await adapter.messages() if "queued messages" in m.text]
            if len(replies) >= count:
                return replies[count - 1]
            await asyncio.sleep(0.05)


async def test_status_shows_the_last_turn_s_usage_and_forgets_a_reset_thread(tmp_path: Path) -> None:
    adapter = FakeAdapter(tmp_path, limit=2000)
    await adapter.start()
    journal = FileJournal(adapter.journal, durability="never")
    try:
        conversation = adapter.conversation("general", "ann")
        usage = TokenUsage(input_tokens=2048, cached_input_tokens=1024, output_tokens=100, total_tokens=2148)
        await journal.append(StatusEntry(state="turn_started", thread_id="th-1", conversation=conversation))
        await journal.append(
            StatusEntry(state="turn_completed", thread_id="th-1", usage=usage, conversation=conversation)
        )
        await journal.append(ResponseEntry(text="first turn over.", conversation=conversation))
        await _shown(adapter, "first turn over.")
        await adapter.say("general", "ann", "/status")
        first = await _status_reply(adapter, 1)
        assert "thread: th-1" in first, first
        assert first.endswith("last turn's token usage: 2,148 tokens (2,048 in, 1,024 of them cached; 100 out)"), first
        await journal.append(
            StatusEntry(
                state="session_reset", thread_id="th-1", text="Codex thread th-1 ended", conversation=conversation
            )
        )
        await journal.append(ResponseEntry(text="reset seen.", conversation=conversation))
        await _shown(adapter, "reset seen.")
        await adapter.say("general", "ann", "/status")
        second = await _status_reply(adapter, 2)
        assert "thread: none yet" in second, second
    finally:
        await journal.aclose()
        await adapter.stop()
