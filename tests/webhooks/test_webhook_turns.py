"""What the sender remembers between turn ends, and how long it waits before trying again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from coven_codex.entries import BaseEntry, ErrorEntry, ResponseEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import JournalRecord, Position
from coven_codex.journal.memory import MemoryJournal
from coven_codex.webhooks.payload import TurnCompletePayload
from coven_codex.webhooks.sender import retry_after, retry_wait
from coven_codex.webhooks.turns import MAX_CONVERSATIONS, MAX_INPUT_MESSAGES, MAX_MESSAGE_CHARS, TurnTracker


class Feed:
    """Entries appended to a memory journal and given to a tracker, as the sender reads them."""

    def __init__(self) -> None:
        self.journal = MemoryJournal()
        self.tracker = TurnTracker("/ws")
        self.payloads: list[TurnCompletePayload] = []
        self.last: JournalRecord | None = None

    async def add(self, entry: BaseEntry) -> str:
        record = await self.journal.append(entry)
        self.last = record
        payload = self.tracker.absorb(record)
        if payload is not None:
            self.payloads.append(payload)
        assert record.entry.id is not None
        return record.entry.id

    async def thought(self, conversation: str, text: str, **extra: object) -> str:
        return await self.add(ThoughtEntry(conversation=conversation, text=text, **extra))

    async def status(self, conversation: str, state: str, thought: str | None, **extra: object) -> str:
        return await self.add(StatusEntry(conversation=conversation, state=state, in_reply_to=thought, **extra))

    async def reply(self, conversation: str, thought: str, text: str) -> None:
        await self.add(ResponseEntry(conversation=conversation, text=text, in_reply_to=thought))

    def low_water(self) -> Position:
        assert self.last is not None
        return self.tracker.low_water(self.last.end)


async def test_queued_thoughts_belong_to_their_own_turns() -> None:
    feed = Feed()
    first = await feed.thought("c", "first")
    await feed.status("c", "turn_started", first)
    second = await feed.thought("c", "second (queued)")
    await feed.reply("c", first, "answer 1")
    await feed.status("c", "turn_completed", first)
    await feed.status("c", "turn_started", second)
    await feed.reply("c", second, "answer 2")
    await feed.status("c", "turn_completed", second)
    assert [(p.input_messages, p.last_assistant_message) for p in feed.payloads] == [
        (["first"], "answer 1"),
        (["second (queued)"], "answer 2"),
    ]


async def test_a_steered_thought_is_an_input_of_the_turn_it_joined() -> None:
    feed = Feed()
    first = await feed.thought("c", "first")
    await feed.status("c", "turn_started", first)
    steered = await feed.thought("c", "and also this")
    await feed.reply("c", steered, "both done")
    await feed.status("c", "turn_completed", steered)
    assert feed.payloads[0].input_messages == ["first", "and also this"]
    assert feed.payloads[0].last_assistant_message == "both done"


async def test_refused_and_unanswered_thoughts_are_not_inputs_of_a_later_turn() -> None:
    feed = Feed()
    lost = await feed.thought("c", "its turn never ended (daemon killed)")
    await feed.status("c", "turn_started", lost)
    refused = await feed.thought("c", "x" * 10)
    await feed.add(ErrorEntry(conversation="c", code="REFUSED", text="too long", in_reply_to=refused))
    cancelled = await feed.thought("c", "dropped by cancel --queued")
    await feed.status("c", "thought_cancelled", cancelled)
    answered = await feed.thought("c", "answered")
    await feed.status("c", "turn_started", answered)
    await feed.status("c", "turn_aborted", answered)
    assert feed.payloads[0].input_messages == ["answered"]
    assert feed.payloads[0].status == "aborted"


async def test_memory_is_bounded_and_what_was_cut_is_flagged() -> None:
    feed = Feed()
    ids = [await feed.thought("c", f"m{n}" + "y" * (MAX_MESSAGE_CHARS if n == 0 else 0)) for n in range(12)]
    await feed.status("c", "turn_started", ids[0])  # (the daemon starts a turn per thought; here one takes all)
    await feed.reply("c", ids[-1], "z" * (MAX_MESSAGE_CHARS + 10))
    await feed.status("c", "turn_completed", ids[-1])
    payload = feed.payloads[0]
    assert len(payload.input_messages) == MAX_INPUT_MESSAGES
    assert payload.input_messages[-1] == "m11"
    assert payload.last_assistant_message is not None and len(payload.last_assistant_message) == MAX_MESSAGE_CHARS
    assert payload.truncated
    for n in range(MAX_CONVERSATIONS + 5):
        await feed.thought(f"conversation {n}", "hello")
    assert len(feed.tracker) == MAX_CONVERSATIONS
    await feed.status("conversation 0", "turn_completed", None)  # forgotten (the least recently active)
    assert feed.payloads[-1].truncated and feed.payloads[-1].input_messages == []


async def test_low_water_is_the_oldest_open_entry_and_moves_on_when_turns_end() -> None:
    feed = Feed()
    blue = await feed.thought("blue", "open")
    blue_start = feed.last.start if feed.last else None
    red = await feed.thought("red", "closed")
    await feed.status("red", "turn_completed", red)
    assert feed.low_water() == blue_start
    await feed.status("blue", "turn_completed", blue)
    assert feed.last is not None and feed.low_water() == feed.last.end
    for state in ("thought_cancelled", "REFUSED"):  # a thought that never runs holds nothing back
        never = await feed.thought("grey", "never runs")
        if state == "REFUSED":
            await feed.add(ErrorEntry(conversation="grey", code="REFUSED", text="too long", in_reply_to=never))
        else:
            await feed.status("grey", state, never)
        assert feed.last is not None and feed.low_water() == feed.last.end
    stale = await feed.add(
        ThoughtEntry(conversation="old", text="never answered", ts=datetime.now(UTC) - timedelta(days=2))
    )
    assert stale
    await feed.thought("new", "now")
    newest_start = feed.last.start
    assert feed.low_water() == newest_start  # the stale conversation is forgotten


async def test_cwd_comes_from_the_turn_or_its_thought_else_the_default() -> None:
    feed = Feed()
    thought = await feed.thought("job:1", "build it", cwd="/srv/jobs/1")
    await feed.status("job:1", "turn_completed", thought)
    other = await feed.thought("c", "plain")
    await feed.status("c", "turn_completed", other)
    assert [p.cwd for p in feed.payloads] == ["/srv/jobs/1", "/ws"]


async def test_only_the_daemons_turn_ends_count() -> None:
    feed = Feed()
    thought = await feed.thought("c", "hi")
    await feed.add(StatusEntry(conversation="c", state="turn_completed", in_reply_to=thought, sender="someone"))
    assert feed.payloads == []


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    now = datetime(2026, 11, 23, 19, 0, 0, tzinfo=UTC)
    assert retry_after("7", now=now) == 7.0
    assert retry_after("Mon, 23 Nov 2026 19:00:30 GMT", now=now) == 30.0
    assert retry_after("Mon, 23 Nov 2026 18:00:00 GMT", now=now) == 0.0
    assert retry_after("soon", now=now) is None
    assert retry_after(None, now=now) is None


def test_the_wait_is_jittered_below_the_backoff_at_least_what_retry_after_asks_and_bounded() -> None:
    waits = [retry_wait(3, None, 300.0) for _ in range(200)]
    assert all(0.0 <= wait <= 4.0 for wait in waits) and len(set(waits)) > 100
    assert all(retry_wait(1, 30.0, 300.0) >= 30.0 for _ in range(50))
    assert all(retry_wait(1, 5000.0, 120.0) == 120.0 for _ in range(50))
    assert all(retry_wait(40, None, 60.0) <= 60.0 for _ in range(50))
