"""File-journal specifics: torn lines from foreign writers, durability, cursor files."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
from pathlib import Path

import pytest

from coven_codex.entries import ThoughtEntry
from coven_codex.journal import (
    START,
    BadLine,
    CursorError,
    CursorMismatch,
    FileJournal,
    JournalError,
    JournalRecord,
    JournalReplaced,
    Position,
    file,
)
from coven_codex.journal.decoding import decode_line
from coven_codex.tailing import TailNotice, TailNoticeKind


async def test_an_unterminated_foreign_line_does_not_swallow_the_next_entry(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"kind": "thought", "text": "ok"}\n{"kind": "thought", "te')  # a writer crashed
    journal = FileJournal(path)
    assert await journal.end_position() == Position(0, 34)  # the torn line is not part of the journal yet
    record = await journal.append(ThoughtEntry(text="next"))
    items = await journal.read()
    assert [type(item) for item in items] == [JournalRecord, BadLine, JournalRecord]
    assert items[1].start == Position(0, 34)
    assert record == items[2]
    assert record.start == items[1].end
    await journal.aclose()


async def test_creates_missing_directories_and_file(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "j.jsonl"
    journal = FileJournal(path, durability="always")
    assert await journal.end_position() == START
    assert await journal.read() == []
    record = await journal.append(ThoughtEntry(text="first"))
    assert record.start == START
    assert path.read_bytes().endswith(b"\n")
    assert path.stat().st_mode & 0o777 == 0o600
    await journal.aclose()


async def test_a_removed_journal_file_is_recreated(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    journal = FileJournal(path)
    await journal.append(ThoughtEntry(text="one"))
    path.unlink()
    record = await journal.append(ThoughtEntry(text="two"))
    assert record.start == START
    assert [item.entry.text for item in await journal.read() if isinstance(item, JournalRecord)] == ["two"]
    await journal.aclose()


def test_unknown_durability_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="always, batched, never"):
        FileJournal(tmp_path / "j", durability="sometimes")  # type: ignore[arg-type]  # deliberately invalid


@pytest.mark.parametrize(("durability", "expected"), [("always", "each"), ("batched", "shared"), ("never", "none")])
async def test_durability_modes_flush_as_documented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str, expected: str
) -> None:
    syncs = 0
    real_sync = file._SYNC

    def counting_sync(fd: int) -> None:
        nonlocal syncs
        syncs += 1
        real_sync(fd)

    monkeypatch.setattr(file, "_SYNC", counting_sync)
    journal = FileJournal(tmp_path / "j.jsonl", durability=durability)  # type: ignore[arg-type]  # parametrised
    await journal.append(ThoughtEntry(text="warm-up"))  # creating the file syncs the directory, not the file
    syncs = 0
    await asyncio.gather(*(journal.append(ThoughtEntry(text=str(i))) for i in range(100)))
    await journal.aclose()
    if expected == "each":
        assert syncs == 100
    elif expected == "shared":
        assert 1 <= syncs < 100
    else:
        assert syncs == 0


async def test_batched_append_returns_only_after_a_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flushed_sizes: list[int] = []
    real_sync = file._SYNC

    def recording_sync(fd: int) -> None:
        real_sync(fd)
        flushed_sizes.append(os.fstat(fd).st_size)

    monkeypatch.setattr(file, "_SYNC", recording_sync)
    journal = FileJournal(tmp_path / "j.jsonl", durability="batched")
    for i in range(5):
        record = await journal.append(ThoughtEntry(text=str(i)))
        assert flushed_sizes and flushed_sizes[-1] >= record.end.minor
    await journal.aclose()


async def test_cursor_files_are_written_atomically(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path / "j.jsonl")
    await journal.save_cursor("ingress/default", Position(0, 123))
    cursor_dir = tmp_path / "j.jsonl.cursors"
    files = sorted(p.name for p in cursor_dir.iterdir())
    assert files == ["ingress%2Fdefault.json"]  # escaped, and no temporary file left behind
    assert json.loads((cursor_dir / files[0]).read_text())["position"] == "123"
    await journal.aclose()


async def test_a_failed_cursor_save_keeps_the_old_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = FileJournal(tmp_path / "j.jsonl")
    await journal.save_cursor("c", Position(0, 1))

    def failing_replace(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(CursorError, match="No space left on device"):
        await journal.save_cursor("c", Position(0, 2))
    monkeypatch.undo()
    assert await journal.load_cursor("c") == Position(0, 1)
    assert [p.name for p in (tmp_path / "j.jsonl.cursors").iterdir()] == ["c.json"]


@pytest.mark.parametrize("content", [b"", b"{", b'{"position": -3}', b'{"position": "twelve"}', b"[]"])
async def test_a_corrupt_cursor_says_what_to_do(tmp_path: Path, content: bytes) -> None:
    journal = FileJournal(tmp_path / "j.jsonl")
    await journal.save_cursor("c", Position(0, 5))
    (tmp_path / "j.jsonl.cursors" / "c.json").write_bytes(content)
    with pytest.raises(CursorError, match=r"corrupt.*delete it"):
        await journal.load_cursor("c")


async def test_tail_reports_a_truncated_journal(tmp_path: Path) -> None:
    notices: list[TailNotice] = []
    path = tmp_path / "j.jsonl"
    journal = FileJournal(path, on_notice=notices.append)
    await journal.append(ThoughtEntry(text="a"))
    items = journal.tail(Position(0, 10_000))
    first = await anext(items)
    assert isinstance(first, JournalRecord) and first.entry.text == "a"
    assert [n.kind for n in notices] == [TailNoticeKind.TRUNCATED]
    await items.aclose()
    await journal.aclose()


async def test_append_after_close_is_refused(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path / "j.jsonl")
    await journal.aclose()
    with pytest.raises(JournalError, match="closed"):
        await journal.append(ThoughtEntry(text="late"))


def test_decoding_never_raises_on_hostile_input() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    item = decode_line(deep, Position(0, 7), Position(0, 200_008), max_line_bytes=10**6)
    assert isinstance(item, BadLine) and item.start == Position(0, 7)
    error = item.to_error_entry("room")
    assert error.id == "bad-line@7" and error.conversation == "room" and "position 7" in error.text


async def test_append_waits_for_a_lock_held_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    journal = FileJournal(path, durability="never")
    await journal.append(ThoughtEntry(text="opened"))
    other = os.open(path, os.O_WRONLY | os.O_APPEND)  # another open file description: another locker
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        pending = asyncio.create_task(journal.append(ThoughtEntry(text="waits")))
        await asyncio.sleep(0.2)
        assert not pending.done()  # neither written nor blocking the event loop
        os.write(other, b'{"kind": "thought", "text": "holder"}\n')
        fcntl.flock(other, fcntl.LOCK_UN)
        record = await asyncio.wait_for(pending, 10)
    finally:
        os.close(other)
    texts = [item.entry.text for item in await journal.read() if isinstance(item, JournalRecord)]
    assert texts == ["opened", "holder", "waits"]
    assert record.end == Position(0, path.stat().st_size)
    await journal.aclose()


async def test_a_directory_in_place_of_the_journal_is_explained(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.mkdir()
    journal = FileJournal(path)
    with pytest.raises(JournalError, match="cannot append"):
        await journal.append(ThoughtEntry(text="x"))
    with pytest.raises(JournalError, match="readable regular file"):
        await journal.read()
    with pytest.raises(JournalError, match="readable regular file"):
        await journal.end_position()
    with pytest.raises(JournalError, match="readable regular file"):
        await anext(journal.tail())


def test_a_nonsense_line_limit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="max_line_bytes"):
        FileJournal(tmp_path / "j", max_line_bytes=0)


@pytest.mark.parametrize("durability", ["always", "batched"])
async def test_a_failed_flush_fails_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    journal = FileJournal(tmp_path / "j.jsonl", durability=durability)  # type: ignore[arg-type]  # parametrised
    await journal.append(ThoughtEntry(text="fine"))

    def broken_disk(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(file, "_SYNC", broken_disk)
    results = await asyncio.gather(
        *(journal.append(ThoughtEntry(text=str(i))) for i in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, JournalError) and "Input/output error" in str(r) for r in results)
    monkeypatch.undo()
    await journal.aclose()


async def test_a_cursor_of_a_rotated_file_is_refused_and_the_file_named(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    journal = FileJournal(path)
    first = await journal.append(ThoughtEntry(text="one"))
    await journal.append(ThoughtEntry(text="two"))
    await journal.save_cursor("reader", first.end)
    assert await journal.load_cursor("reader") == first.end
    path.rename(tmp_path / "j.jsonl.1")
    await journal.append(ThoughtEntry(text="new"))  # a new file at the path, longer than the cursor
    await journal.append(ThoughtEntry(text="newer"))
    with pytest.raises(CursorMismatch, match=r"another file.*j\.jsonl\.1.*delete") as caught:
        await journal.load_cursor("reader")
    assert caught.value.previous == tmp_path / "j.jsonl.1"
    assert caught.value.position == first.end
    (tmp_path / "j.jsonl.1").unlink()
    with pytest.raises(CursorMismatch, match="no longer in") as caught:
        await journal.load_cursor("reader")
    assert caught.value.previous is None
    await journal.aclose()


async def test_a_cursor_of_a_truncated_and_refilled_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    journal = FileJournal(path)
    first = await journal.append(ThoughtEntry(text="one"))
    await journal.save_cursor("reader", first.end)
    path.write_bytes(b"")  # truncated in place (same inode)...
    for text in ("a", "b", "c"):
        await journal.append(ThoughtEntry(text=text))  # ...and refilled past the cursor
    with pytest.raises(CursorMismatch):
        await journal.load_cursor("reader")
    await journal.aclose()


async def test_a_tail_that_does_not_follow_replacement_stops_before_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    writer = FileJournal(path)
    reader = FileJournal(path, follow_replacement=False)
    old = await writer.append(ThoughtEntry(text="old"))
    seen: list[str] = []

    async def read() -> None:
        async for item in reader.tail():
            assert isinstance(item, JournalRecord)
            seen.append(item.entry.text)
            if item.entry.text == "old":
                await reader.save_cursor("r", item.end)

    task = asyncio.create_task(read())
    while not seen:
        await asyncio.sleep(0.01)
    path.rename(tmp_path / "j.jsonl.1")
    await writer.append(ThoughtEntry(text="new"))
    with pytest.raises(JournalReplaced, match="replaced"):
        await asyncio.wait_for(task, 10)
    assert seen == ["old"]
    # A cursor saved after the replacement still belongs to the old file (the tail's).
    await reader.save_cursor("r", old.end)
    with pytest.raises(CursorMismatch) as caught:
        await reader.load_cursor("r")
    assert caught.value.previous == tmp_path / "j.jsonl.1"
    await reader.aclose()
    await writer.aclose()
