"""File journal segments: roll-over by size and age, across processes, old journals, compaction, retention."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import textwrap
from pathlib import Path

import pytest

from coven_codex.entries import ThoughtEntry
from coven_codex.journal import (
    START,
    CursorError,
    CursorMismatch,
    FileJournal,
    JournalError,
    JournalRecord,
    Position,
    SegmentRemoved,
)
from coven_codex.journal.file import fingerprint
from coven_codex.journal.segments import SegmentLayout

SMALL = 1024


def texts(items: list[object]) -> list[str]:
    """The texts of the records among ``items``, in order."""
    return [item.entry.text for item in items if isinstance(item, JournalRecord)]


async def fill(journal: FileJournal, count: int, prefix: str = "e") -> list[JournalRecord]:
    """Append ``count`` thoughts ``<prefix>0``... (each about 200 bytes) and return their records."""
    return [await journal.append(ThoughtEntry(text=f"{prefix}{i}", conversation="c")) for i in range(count)]


async def test_roll_over_by_size_keeps_every_entry_in_order(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    journal = FileJournal(path, segment_bytes=SMALL, durability="never")
    records = await fill(journal, 40)
    layout = SegmentLayout(path)
    sealed = layout.sealed_numbers()
    assert len(sealed) >= 5 and sealed == list(range(len(sealed)))
    assert records[-1].start.major == len(sealed)  # the active segment follows the sealed ones
    starts = [record.start for record in records]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    items = await journal.read()
    assert texts(items) == [f"e{i}" for i in range(40)]
    assert [item.start for item in items] == starts  # the header lines are no items
    for sealed_number in sealed:
        assert layout.sealed_path(sealed_number).stat().st_size <= SMALL + 400
    # read() between two positions lying in different segments
    middle = await journal.read(records[5].start, records[30].end)
    assert texts(middle) == [f"e{i}" for i in range(5, 31)]
    assert await journal.end_position() == records[-1].end
    await journal.aclose()


async def test_a_tail_crosses_roll_overs_without_losing_or_repeating(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    writer = FileJournal(path, segment_bytes=SMALL, durability="never")
    reader = FileJournal(path)
    seen: list[str] = []
    done = asyncio.Event()

    async def follow() -> None:
        async for item in reader.tail(START):
            assert isinstance(item, JournalRecord)
            seen.append(item.entry.text)
            if len(seen) == 300:
                done.set()

    async with asyncio.TaskGroup() as group:
        task = group.create_task(follow())
        for i in range(300):
            await writer.append(ThoughtEntry(text=f"e{i}"))
            if i % 7 == 0:
                await asyncio.sleep(0)
        await asyncio.wait_for(done.wait(), 60)
        task.cancel()
    assert seen == [f"e{i}" for i in range(300)]
    assert len(SegmentLayout(path).sealed_numbers()) > 20
    await writer.aclose()


async def test_a_tail_resumes_from_a_cursor_in_a_sealed_segment(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    journal = FileJournal(path, segment_bytes=SMALL, durability="never")
    records = await fill(journal, 30)
    await journal.save_cursor("r", records[3].end)
    again = FileJournal(path)
    position = await again.load_cursor("r")
    assert position == records[3].end
    got: list[str] = []
    async for item in again.tail(position):
        assert isinstance(item, JournalRecord)
        got.append(item.entry.text)
        if len(got) == 26:
            break
    assert got == [f"e{i}" for i in range(4, 30)]
    # the end of a sealed segment and the start of the next are the same place for a reader
    boundary = next(r for r, n in itertools.pairwise(records) if n.start.major != r.start.major)
    following = await again.read(boundary.end)
    assert texts(following)[0] == texts([records[records.index(boundary) + 1]])[0]
    await journal.aclose()


async def test_roll_over_by_age(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    # an old journal whose first entry is from 2020: older than any age limit
    path.write_text(json.dumps({"kind": "thought", "id": "old", "text": "old", "ts": "2020-01-01T00:00:00Z"}) + "\n")
    journal = FileJournal(path, segment_age=3600, durability="never")
    record = await journal.append(ThoughtEntry(text="new"))
    assert record.start.major == 1  # the append found segment 0 too old and rolled over first
    second = await journal.append(ThoughtEntry(text="newer"))
    assert second.start.major == 1  # segment 1 is young: no roll-over
    assert texts(await journal.read()) == ["old", "new", "newer"]
    await journal.aclose()


async def test_an_old_single_file_journal_and_its_integer_cursor_keep_working(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    lines = [json.dumps({"kind": "thought", "id": f"o{i}", "text": f"o{i}"}) + "\n" for i in range(5)]
    path.write_text("".join(lines))
    cursors = tmp_path / "chat.jsonl.cursors"
    cursors.mkdir()
    offset = len(lines[0]) + len(lines[1])
    head = lines[0].encode()
    (cursors / "old.json").write_text(json.dumps({"name": "old", "position": offset, "file": fingerprint(head)}))
    journal = FileJournal(path, segment_bytes=SMALL, durability="never")
    position = await journal.load_cursor("old")
    assert position == Position(0, offset)
    await fill(journal, 20, prefix="n")  # rolls segment 0 (the old file) into chat.jsonl.d/
    assert SegmentLayout(path).sealed_path(0).exists()
    assert await journal.load_cursor("old") == Position(0, offset)  # still valid after the roll-over
    assert texts(await journal.read(position)) == ["o2", "o3", "o4"] + [f"n{i}" for i in range(20)]
    await journal.aclose()


async def test_appends_from_several_processes_roll_over_safely(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    script = textwrap.dedent(
        """
        import asyncio, sys
        from pathlib import Path
        from coven_codex.entries import ThoughtEntry
        from coven_codex.journal import FileJournal

        async def main() -> None:
            journal = FileJournal(Path(sys.argv[1]), segment_bytes=2048, durability="never")
            for i in range(int(sys.argv[3])):
                await journal.append(ThoughtEntry(text=f"{sys.argv[2]}-{i}"))
            await journal.aclose()

        asyncio.run(main())
        """
    )
    writers = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(path), f"w{n}", "400") for n in range(4)
    ]
    for process in writers:
        assert await process.wait() == 0
    journal = FileJournal(path)
    items = await journal.read()
    assert all(isinstance(item, JournalRecord) for item in items)
    got = texts(items)
    assert sorted(got) == sorted(f"w{n}-{i}" for n in range(4) for i in range(400))
    for n in range(4):  # each writer's entries in its own order
        assert [t for t in got if t.startswith(f"w{n}-")] == [f"w{n}-{i}" for i in range(400)]
    layout = SegmentLayout(path)
    assert len(layout.sealed_numbers()) > 50
    for number in layout.sealed_numbers():  # a roll-over never lost a line to a sealed segment
        assert layout.sealed_path(number).read_bytes().endswith(b"\n")
    await journal.aclose()


async def test_compaction_removes_only_segments_behind_every_cursor(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    journal = FileJournal(path, segment_bytes=SMALL, durability="never")
    records = await fill(journal, 60)
    layout = SegmentLayout(path)
    slow, fast = records[12].end, records[45].end
    await journal.save_cursor("slow", slow)
    await journal.save_cursor("fast", fast)
    report = await journal.compact(action="archive")
    assert report.removed == list(range(slow.major))
    assert report.held_by == "slow"
    archive = tmp_path / "chat.jsonl.archive"
    assert sorted(p.name for p in archive.iterdir()) == [f"chat.jsonl.{n:010d}.jsonl" for n in report.removed]
    assert layout.sealed_numbers()[0] == slow.major
    assert await journal.load_cursor("slow") == slow  # both cursors still read on
    assert texts(await journal.read(slow)) == [f"e{i}" for i in range(13, 60)]
    # from the start now means from the oldest entry kept
    first_kept = next(r for r in records if r.start.major == slow.major)
    assert (await journal.read())[0] == first_kept
    # the slow reader moves on: the next compaction removes what it passed
    await journal.save_cursor("slow", fast)
    second = await journal.compact(action="delete")
    assert second.removed == list(range(slow.major, fast.major))
    assert layout.sealed_numbers()[0] == fast.major
    await journal.aclose()


async def test_a_cursor_into_a_removed_segment_fails_clearly(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    journal = FileJournal(path, segment_bytes=SMALL, durability="never")
    records = await fill(journal, 60)
    await journal.save_cursor("stale", records[2].end)
    await journal.save_cursor("reader", records[50].end)
    # the stale reader's cursor is lost (its owner deleted it), then compaction runs
    (tmp_path / "chat.jsonl.cursors" / "stale.json").rename(tmp_path / "stale.json")
    report = await journal.compact(action="delete")
    assert report.removed
    (tmp_path / "stale.json").rename(tmp_path / "chat.jsonl.cursors" / "stale.json")
    with pytest.raises(SegmentRemoved) as caught:
        await journal.load_cursor("stale")
    message = str(caught.value)
    assert "deleted" in message and str(records[2].end) in message and str(caught.value.oldest) in message
    with pytest.raises(SegmentRemoved):
        await journal.read(records[2].end)
    tail = journal.tail(records[2].end)
    with pytest.raises(SegmentRemoved):
        await anext(tail)
    await tail.aclose()
    await journal.aclose()


async def test_compaction_without_cursors_removes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    journal = FileJournal(path, segment_bytes=SMALL, durability="never")
    await fill(journal, 30)
    report = await journal.compact(action="delete")
    assert report.removed == [] and "no reader has saved a cursor" in report.message
    assert len(SegmentLayout(path).sealed_numbers()) >= 3
    await journal.aclose()


async def test_the_retention_setting_deletes_passed_segments_at_each_roll_over(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    journal = FileJournal(path, segment_bytes=SMALL, durability="never", retention="delete")
    records = await fill(journal, 10)
    await journal.save_cursor("reader", records[-1].end)
    more = await fill(journal, 40, prefix="m")
    layout = SegmentLayout(path)
    assert layout.sealed_numbers()[0] == records[-1].end.major  # everything before the cursor went
    assert texts(await journal.read(records[-1].end)) == [f"m{i}" for i in range(40)]
    assert more[-1].start.major > records[-1].end.major
    await journal.aclose()


async def test_a_hand_rotation_of_a_segmented_journal_is_still_detected(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    journal = FileJournal(path, segment_bytes=SMALL, durability="never")
    records = await fill(journal, 30)
    await journal.save_cursor("daemon", records[-1].end)
    await journal.aclose()
    path.rename(tmp_path / "chat.jsonl.1")  # mv + a new file: what rotating by hand does
    fresh = FileJournal(path, durability="never")
    await fresh.append(ThoughtEntry(text="after"))
    with pytest.raises(CursorMismatch) as caught:
        await fresh.load_cursor("daemon")
    assert caught.value.previous == tmp_path / "chat.jsonl.1"
    old = FileJournal(caught.value.previous)
    assert texts(await old.read(caught.value.position)) == []
    await old.aclose()
    await fresh.aclose()


async def test_a_position_of_a_segment_that_never_existed_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    journal = FileJournal(path, durability="never")
    await fill(journal, 2)
    with pytest.raises(JournalError, match="does not have"):
        await journal.read(Position(7, 0))
    await journal.aclose()


def test_settings_below_the_minimum_are_refused(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="at least 1024"):
        FileJournal(tmp_path / "j", segment_bytes=10)
    with pytest.raises(JournalError, match="above 0"):
        FileJournal(tmp_path / "j", segment_age=0)


async def test_a_cursor_saved_before_the_journal_existed_still_loads(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path / "chat.jsonl", segment_bytes=SMALL)
    await journal.save_cursor("early", Position(0, 1))  # no file yet: nothing to fingerprint
    assert await journal.load_cursor("early") == Position(0, 1)
    await journal.aclose()


async def test_a_long_catch_up_across_small_segments_lets_other_tasks_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    journal = FileJournal(path, segment_bytes=SMALL, durability="never")
    records = await fill(journal, 1000)  # about 200 segments of 5 entries
    ran_meanwhile = asyncio.Event()
    others_ran = False

    async def other() -> None:
        ran_meanwhile.set()

    async def read_all() -> None:
        nonlocal others_ran
        async for item in journal.tail(START):
            if item == records[-1]:
                others_ran = ran_meanwhile.is_set()
                return

    async with asyncio.TaskGroup() as group:
        group.create_task(read_all())
        group.create_task(other())
    assert others_ran, "the tail read every segment without letting another task run"
    await journal.aclose()


@pytest.mark.parametrize("position", [-1, True, 1.5, 7])
async def test_a_position_that_is_no_position_is_refused_as_a_cursor_error(tmp_path: Path, position: object) -> None:
    journal = FileJournal(tmp_path / "chat.jsonl", segment_bytes=SMALL)
    await fill(journal, 3)
    with pytest.raises(CursorError, match="position"):
        await journal.save_cursor("x", position)  # type: ignore[arg-type]  # deliberately wrong type
    await journal.aclose()
