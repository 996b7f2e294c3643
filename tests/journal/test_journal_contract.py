"""The journal contract, written once and run against every backend (see journal_backends.py)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import pytest
from journal_backends import LINE_LIMIT, Backend, FileBackend, SharedBackend

from coven_codex.entries import (
    ApprovalEntry,
    BaseEntry,
    CancelEntry,
    GenericEntry,
    ThoughtEntry,
    ToolCallEntry,
    parse_entry,
)
from coven_codex.journal import (
    BAD_LINE_CODE,
    START,
    BadLine,
    CursorError,
    Journal,
    JournalError,
    JournalItem,
    JournalRecord,
    Position,
)


def thought(text: str, **fields: object) -> ThoughtEntry:
    return ThoughtEntry(text=text, **fields)  # type: ignore[arg-type]  # extra fields are allowed on entries


def texts(items: list[JournalItem]) -> list[str]:
    return [item.entry.text for item in items if isinstance(item, JournalRecord)]


class Reader:
    """Consumes ``journal.tail(start)`` in a task, keeping every item."""

    def __init__(self, journal: Journal, start: Position = START) -> None:
        self.items: list[JournalItem] = []
        self._grew = asyncio.Event()
        self.task = asyncio.create_task(self._run(journal.tail(start)))

    async def _run(self, items: AsyncIterator[JournalItem]) -> None:
        async for item in items:
            self.items.append(item)
            self._grew.set()

    async def wait(self, count: int) -> list[JournalItem]:
        async with asyncio.timeout(120):
            while len(self.items) < count:
                if self.task.done():
                    raise AssertionError(f"the tail ended by itself: {self.task!r}")
                self._grew.clear()
                await self._grew.wait()
        return self.items

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@pytest.fixture
async def journal(backend: Backend) -> AsyncIterator[Journal]:
    opened = await backend.open()
    yield opened
    await opened.aclose()


async def test_append_assigns_ids_and_ordered_positions(journal: Journal) -> None:
    records = [await journal.append(thought(f"m{i}")) for i in range(5)]
    ids = [record.entry.id for record in records]
    assert all(ids) and len(set(ids)) == 5
    assert all(a.end <= b.start for a, b in itertools.pairwise(records))
    assert all(record.start < record.end for record in records)
    assert await journal.end_position() == records[-1].end
    read = await journal.read()
    assert read == records


async def test_append_keeps_a_given_id_and_every_field(journal: Journal) -> None:
    call = ToolCallEntry(
        id="call-1", tool="search", arguments={"q": "x", "n": [1, 2]}, call_id="c1", conversation="room-7"
    )
    record = await journal.append(call)
    assert record.entry.id == "call-1"
    [item] = await journal.read()
    assert isinstance(item, JournalRecord)
    assert item.entry == call


async def test_every_kind_round_trips(journal: Journal) -> None:
    entries: list[BaseEntry] = [
        thought("hi", custom_field={"kept": True}),
        CancelEntry(id="c"),
        ApprovalEntry(id="a", request_id="r1", decision="deny"),
        parse_entry({"id": "g", "kind": "from_the_future", "text": "?", "payload": [1]}),
    ]
    for entry in entries:
        await journal.append(entry)
    read = [item.entry for item in await journal.read() if isinstance(item, JournalRecord)]
    assert read[1:] == entries[1:]
    assert read[0].model_dump(exclude={"id"}) == entries[0].model_dump(exclude={"id"})
    assert isinstance(read[3], GenericEntry)
    assert read[3].model_dump()["payload"] == [1]


async def test_tail_delivers_old_and_new_entries_in_order(journal: Journal) -> None:
    await journal.append(thought("before"))
    reader = Reader(journal)
    await reader.wait(1)
    for i in range(50):
        await journal.append(thought(f"live {i}"))
    items = await reader.wait(51)
    assert texts(items) == ["before"] + [f"live {i}" for i in range(50)]
    assert items == await journal.read()
    await reader.stop()


async def test_several_readers_see_the_same_sequence(journal: Journal, backend: Backend) -> None:
    other = await backend.open()
    readers = [Reader(journal), Reader(journal), Reader(other)]
    for i in range(30):
        await journal.append(thought(f"n{i}"))
    results = [await reader.wait(30) for reader in readers]
    assert results[0] == results[1] == results[2]
    assert texts(results[0]) == [f"n{i}" for i in range(30)]
    for reader in readers:
        await reader.stop()
    if other is not journal:
        await other.aclose()


async def test_tail_resumes_after_a_record(journal: Journal) -> None:
    records = [await journal.append(thought(f"r{i}")) for i in range(6)]
    reader = Reader(journal, records[2].end)
    assert texts(await reader.wait(3)) == ["r3", "r4", "r5"]
    await reader.stop()


async def test_read_a_range(journal: Journal) -> None:
    records = [await journal.append(thought(f"r{i}")) for i in range(6)]
    assert texts(await journal.read(records[1].start, records[3].end)) == ["r1", "r2", "r3"]
    assert texts(await journal.read(records[4].start)) == ["r4", "r5"]
    assert await journal.read(records[5].end) == []
    with pytest.raises(JournalError):
        await journal.read(records[3].start, records[1].start)


async def test_resume_from_a_saved_cursor_after_a_restart(journal: Journal, backend: Backend) -> None:
    assert await journal.load_cursor("ingress") is None
    reader = Reader(journal)
    for i in range(4):
        await journal.append(thought(f"t{i}"))
    consumed = (await reader.wait(2))[1]
    await journal.save_cursor("ingress", consumed.end)
    await reader.stop()
    await journal.aclose()

    restarted = await backend.open()
    position = await restarted.load_cursor("ingress")
    assert position == consumed.end
    assert position is not None
    await restarted.append(thought("t4"))
    resumed = Reader(restarted, position)
    assert texts(await resumed.wait(3)) == ["t2", "t3", "t4"]
    await resumed.stop()
    await restarted.aclose()


async def test_cursors_are_independent_and_overwritable(journal: Journal) -> None:
    first, second, third = [await journal.append(thought(f"t{n}")) for n in range(3)]
    await journal.save_cursor("a", first.end)
    await journal.save_cursor("conversation #general/eu", second.end)
    await journal.save_cursor("a", third.end)
    assert await journal.load_cursor("a") == third.end
    assert await journal.load_cursor("conversation #general/eu") == second.end
    assert await journal.load_cursor("b") is None


@pytest.mark.parametrize("name", ["", "x" * 81, "line\nbreak"])
async def test_invalid_cursor_names_are_refused(journal: Journal, name: str) -> None:
    with pytest.raises(CursorError, match="cursor name"):
        await journal.save_cursor(name, START)


@pytest.mark.parametrize("position", [-1, True, 1.5, "12"])
async def test_invalid_cursor_positions_are_refused(journal: Journal, position: object) -> None:
    with pytest.raises(CursorError, match="position"):
        await journal.save_cursor("x", position)  # type: ignore[arg-type]  # deliberately wrong type


async def test_concurrent_appends_in_one_process(journal: Journal) -> None:
    records = await asyncio.gather(*(journal.append(thought(f"c{i}")) for i in range(300)))
    assert len({record.start for record in records}) == 300
    read = await journal.read()
    assert sorted(records, key=lambda record: record.start) == read


ROLL_OVER_RICH = 1500
"""Up to this many appends a writer, segmented journals keep the fixture's 1 KiB segments."""

BAD_LINES = [
    (b"not json at all", "not JSON"),
    (b'\xff\xfe{"kind": "thought"}', "invalid UTF-8"),
    (b"[1, 2, 3]", "JSON object"),
    (b'{"text": "no kind"}', "kind"),
    (b'{"kind": "tool_call", "text": "missing tool"}', "tool"),
    (b"", "empty"),
]


async def test_bad_lines_are_reported_with_their_position_and_skipped(journal: Journal, backend: Backend) -> None:
    reader = Reader(journal)
    first = await journal.append(thought("good 1"))
    for raw, _reason in BAD_LINES:
        await backend.inject_raw(raw)
    last = await journal.append(thought("good 2"))
    items = await reader.wait(len(BAD_LINES) + 2)
    assert items == await journal.read()
    bad = items[1:-1]
    assert all(isinstance(item, BadLine) for item in bad)
    assert isinstance(bad[0], BadLine) and bad[0].start == first.end
    for item, (_raw, reason) in zip(bad, BAD_LINES, strict=True):
        assert isinstance(item, BadLine)
        assert reason in item.reason
    assert all(a.end == b.start for a, b in itertools.pairwise(items))
    assert items[-1] == last
    assert isinstance(bad[0], BadLine)
    error = bad[0].to_error_entry()
    assert error.code == BAD_LINE_CODE
    assert str(bad[0].start) in error.text
    await reader.stop()


async def test_a_line_without_id_gets_one_from_its_position(journal: Journal, backend: Backend) -> None:
    await journal.append(thought("first"))
    position = await journal.end_position()
    await backend.inject_raw(b'{"kind": "thought", "text": "from an adapter"}')
    items = await journal.read(position)
    assert isinstance(items[0], JournalRecord)
    assert items[0].entry.id == f"@{position}"
    assert items[0].entry.text == "from an adapter"


async def test_huge_lines(journal: Journal, backend: Backend) -> None:
    reader = Reader(journal)
    fits = await journal.append(thought("x" * (LINE_LIMIT - 200)))
    with pytest.raises(JournalError, match="line limit"):
        await journal.append(thought("y" * LINE_LIMIT))
    await backend.inject_raw(b'{"kind": "thought", "text": "' + b"z" * LINE_LIMIT + b'"}')
    after = await journal.append(thought("after"))
    items = await reader.wait(3)
    assert items[0] == fits
    assert isinstance(items[1], BadLine) and "limit" in items[1].reason
    assert items[2] == after
    await reader.stop()


async def test_a_tail_never_ends_by_itself_and_cancels_at_once(journal: Journal) -> None:
    await journal.append(thought("only"))
    items = journal.tail()
    first = await anext(items)
    assert isinstance(first, JournalRecord)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(items), 0.3)
    reader = Reader(journal)
    await reader.wait(1)
    reader.task.cancel()
    done, _ = await asyncio.wait({reader.task}, timeout=2)
    assert done == {reader.task} and reader.task.cancelled()


@pytest.mark.parametrize(
    ("writers", "count"),
    [pytest.param(4, 1500, id="4x1500"), pytest.param(8, 5_000, marks=pytest.mark.slow, id="8x5000")],
)
async def test_appends_from_several_processes(shared_backend: SharedBackend, writers: int, count: int) -> None:
    if isinstance(shared_backend, FileBackend) and shared_backend.segment_bytes is not None and count > ROLL_OVER_RICH:
        # 1 KiB segments make every fifth append a roll-over (three fsyncs): 8,000 of them at 8x5000,
        # which measures the disk, not the journal. 64 KiB still rolls over about 125 times under 8 writers.
        shared_backend.segment_bytes = 64 * 1024
    journal = await shared_backend.open()
    reader = Reader(journal)
    processes = [
        await asyncio.create_subprocess_exec(
            *shared_backend.writer_command(f"w{i}", count), stderr=asyncio.subprocess.PIPE
        )
        for i in range(writers)
    ]
    try:
        # One bound for all writers together (they run at once), inside the test's own timeout.
        results = await asyncio.wait_for(asyncio.gather(*(process.communicate() for process in processes)), 240)
        for process, (_out, err) in zip(processes, results, strict=True):
            assert process.returncode == 0, err.decode()
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    items = await reader.wait(writers * count)
    assert all(isinstance(item, JournalRecord) for item in items)  # every line intact
    seen: dict[str, list[int]] = {}
    for item in items:
        assert isinstance(item, JournalRecord)
        writer, number = item.entry.text.split()
        seen.setdefault(writer, []).append(int(number))
    assert seen == {f"w{i}": list(range(count)) for i in range(writers)}  # each writer's order kept
    assert items == await journal.read()
    assert len({item.entry.id for item in items if isinstance(item, JournalRecord)}) == writers * count
    await reader.stop()
    await journal.aclose()
