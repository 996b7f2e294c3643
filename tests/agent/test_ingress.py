"""Ingress routing and its cursor, on the in-memory journal (no Codex involved)."""

from __future__ import annotations

import asyncio

from coven_codex.agent.ingress import CURSOR_NAME, Backlog, Ingress
from coven_codex.entries import (
    ApprovalEntry,
    CancelEntry,
    ErrorEntry,
    ResponseEntry,
    ThoughtEntry,
)
from coven_codex.journal import START, JournalRecord, MemoryJournal
from coven_codex.support.limits import MAX_CONVERSATION_CHARS, MAX_ID_CHARS, MAX_THOUGHT_CHARS


class Recorder:
    """A router that keeps what it was given; thoughts stay pending until finished."""

    def __init__(self) -> None:
        self.thoughts: list[tuple[str, int]] = []
        self.cancels: list[tuple[str, bool]] = []
        self.approvals: list[tuple[str, bool]] = []
        self.delivered: set[str] = set()
        self.changed = asyncio.Event()

    def route_thought(self, entry: ThoughtEntry, position: int) -> bool:
        assert entry.id is not None
        self.changed.set()
        if entry.id in self.delivered:
            return False
        self.thoughts.append((entry.text, position))
        return True

    def route_cancel(self, entry: CancelEntry, *, live: bool) -> None:
        self.cancels.append((entry.conversation, live))
        self.changed.set()

    def route_approval(self, entry: ApprovalEntry, *, live: bool) -> None:
        self.approvals.append((entry.request_id, live))
        self.changed.set()


async def settle(journal: MemoryJournal, ingress: Ingress) -> None:
    end = await journal.end_position()
    for _ in range(200):
        if ingress.cursor._read_end >= end:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("ingress did not read to the end")


async def test_routes_by_kind_skips_our_own_entries_and_reports_bad_lines() -> None:
    journal = MemoryJournal()
    old_cancel = await journal.append(CancelEntry(conversation="a"))
    live_from = await journal.end_position()
    await journal.append(ThoughtEntry(conversation="a", text="one"))
    await journal.append(ResponseEntry(conversation="a", text="not for codex"))
    await journal.append(ThoughtEntry(conversation="b", text="sent by codex?", sender="codex"))
    await journal.append_raw(b"{not json")
    await journal.append(CancelEntry(conversation="a"))
    await journal.append(ApprovalEntry(conversation="a", request_id="r1", decision="approve"))
    router = Recorder()
    ingress = Ingress(journal, router, start=START, live_from=live_from, known_ids=set())
    task = asyncio.create_task(ingress.run())
    await settle(journal, ingress)
    assert [t for t, _ in router.thoughts] == ["one"]
    assert router.cancels == [("a", False), ("a", True)]
    assert router.approvals == [("r1", True)]
    errors = [i.entry for i in await journal.read() if isinstance(i, JournalRecord) and isinstance(i.entry, ErrorEntry)]
    assert len(errors) == 1 and errors[0].code == "BAD_LINE"
    # The cursor stays on the pending thought until it is finished.
    assert ingress.cursor.position == router.thoughts[0][1]
    ingress.finish(router.thoughts[0][1])
    await settle(journal, ingress)
    for _ in range(100):
        if await journal.load_cursor(CURSOR_NAME) == await journal.end_position():
            break
        await asyncio.sleep(0.005)
    assert await journal.load_cursor(CURSOR_NAME) == await journal.end_position()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert old_cancel.start == START


async def test_restart_does_not_report_a_bad_line_twice() -> None:
    journal = MemoryJournal()
    await journal.append_raw(b"garbage")
    router = Recorder()
    first = Ingress(journal, router, start=START, live_from=START, known_ids=set())
    task = asyncio.create_task(first.run())
    await settle(journal, first)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    known = {i.entry.id for i in await journal.read() if isinstance(i, JournalRecord) and i.entry.id}
    second = Ingress(journal, router, start=START, live_from=START, known_ids=set(known))
    task = asyncio.create_task(second.run())
    await settle(journal, second)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    errors = [i for i in await journal.read() if isinstance(i, JournalRecord) and isinstance(i.entry, ErrorEntry)]
    assert len(errors) == 1


async def test_delivered_thoughts_are_not_pending() -> None:
    journal = MemoryJournal()
    record = await journal.append(ThoughtEntry(conversation="a", text="done before"))
    router = Recorder()
    assert record.entry.id is not None
    router.delivered.add(record.entry.id)
    ingress = Ingress(journal, router, start=START, live_from=START, known_ids=set())
    task = asyncio.create_task(ingress.run())
    await settle(journal, ingress)
    assert router.thoughts == [] and ingress.cursor.position == record.end
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_thoughts_that_can_never_be_answered_are_refused_once() -> None:
    journal = MemoryJournal()
    long_name = "n" * (MAX_CONVERSATION_CHARS + 1)
    refused = [
        await journal.append(ThoughtEntry(conversation=long_name, text="hi")),
        await journal.append(ThoughtEntry(id="i" * (MAX_ID_CHARS + 1), conversation="a", text="hi")),
        await journal.append(ThoughtEntry(conversation="a", text="x" * (MAX_THOUGHT_CHARS + 1))),
    ]
    await journal.append(ThoughtEntry(conversation="a", text="x" * MAX_THOUGHT_CHARS))
    for _ in range(2):  # and once more, as a restarted daemon reads it again
        known = {i.entry.id for i in await journal.read() if isinstance(i, JournalRecord) and i.entry.id}
        router = Recorder()
        ingress = Ingress(journal, router, start=START, live_from=START, known_ids=known)
        task = asyncio.create_task(ingress.run())
        await settle(journal, ingress)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert [len(t) for t, _ in router.thoughts] == [MAX_THOUGHT_CHARS]
    errors = [i.entry for i in await journal.read() if isinstance(i, JournalRecord) and isinstance(i.entry, ErrorEntry)]
    assert [e.id for e in errors] == [f"refused@{r.start}" for r in refused]
    assert {e.code for e in errors} == {"REFUSED"}
    assert errors[0].conversation == long_name[: MAX_CONVERSATION_CHARS - 1] + "…"
    assert [e.conversation for e in errors[1:]] == ["a", "a"]
    assert "conversation name" in errors[0].text and "id" in errors[1].text and "Shorten" in errors[2].hint


async def test_a_replay_ahead_of_the_reader_does_not_move_it_past_items_it_has_not_read() -> None:
    """A cluster daemon that adopts a conversation routes its items from its floor up to the
    journal's end, ahead of the reader, which has not read the other conversations' items in that
    range yet. Where the reader is (the floor of every conversation with nothing pending, and the
    saved cursor) must stay before them: past them, their thoughts were passed over and lost (the
    chaos test's unanswered final thought)."""
    journal = MemoryJournal()
    await journal.append(ThoughtEntry(conversation="other", text="not read yet"))
    adopted = await journal.append(ThoughtEntry(conversation="adopted", text="replayed"))
    router = Recorder()
    ingress = Ingress(journal, router, start=START, live_from=START, known_ids=set())
    await ingress.replay([adopted])
    assert router.thoughts == [("replayed", adopted.start)]
    assert ingress.cursor.read_end == START and ingress.cursor.position == START
    ingress.finish(adopted.start)
    assert ingress.cursor.position == START


async def test_a_backlog_is_routed_first_then_the_tail_starts_at_its_end() -> None:
    """What start-up read is routed (as written before this run), and only what follows its end is
    read by the tail: an item between the backlog's items that start-up passed over is never read."""
    journal = MemoryJournal()
    first = await journal.append(ThoughtEntry(conversation="a", text="in the backlog"))
    passed_over = await journal.append(ThoughtEntry(conversation="a", text="start-up passed it over"))
    cancel = await journal.append(CancelEntry(conversation="a"))
    end = await journal.end_position()
    await journal.append(ThoughtEntry(conversation="b", text="after the start"))
    router = Recorder()
    backlog = Backlog(items=[first, cancel], end=end)
    ingress = Ingress(journal, router, start=START, live_from=end, known_ids=set(), backlog=backlog)
    task = asyncio.create_task(ingress.run())
    await settle(journal, ingress)
    assert [t for t, _ in router.thoughts] == ["in the backlog", "after the start"]
    assert router.cancels == [("a", False)]
    assert passed_over.start < end
    for _text, position in list(router.thoughts):
        ingress.finish(position)
    for _ in range(100):
        if await journal.load_cursor(CURSOR_NAME) == await journal.end_position():
            break
        await asyncio.sleep(0.005)
    assert await journal.load_cursor(CURSOR_NAME) == await journal.end_position()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
