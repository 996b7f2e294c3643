"""A journal's identity survives what the docs allow, and a new journal has a new one (issue 35).

docs/configuration.md, "What identifies a journal": an id recorded with the journal (a file's
``<journal>.cursors/journal-id``, a Redis stream's ``<key>:journal-id``), never its location.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path

import pytest

from coven_codex.entries import ThoughtEntry
from coven_codex.journal import FileJournal, JournalError, MemoryJournal
from coven_codex.journal.identity import find_identity, journal_identity
from coven_codex.journal.redis import RedisJournal
from coven_codex.testing.redis_server import RedisServer


async def identity_of(path: Path, **options: int) -> str:
    journal = FileJournal(path, durability="never", **options)  # type: ignore[arg-type]
    try:
        return (await journal_identity(journal)).value
    finally:
        await journal.aclose()


async def test_a_file_journal_keeps_its_identity_across_reopening_and_a_rotation_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never")
    await journal.append(ThoughtEntry(conversation="c", text="hello"))
    first = await journal_identity(journal)
    assert first.made_now
    assert (path.parent / "journal.jsonl.cursors" / "journal-id").read_text().strip() == first.value
    await journal.aclose()
    assert await identity_of(path) == first.value
    # docs/operations.md, "Rotating the journal": mv journal.jsonl journal.jsonl.1 and a new empty file.
    path.rename(tmp_path / "journal.jsonl.1")
    path.touch()
    again = FileJournal(path, durability="never")
    found = await find_identity(again)
    await again.aclose()
    assert found is not None and found.value == first.value and not found.made_now


async def test_a_segmented_file_journal_has_one_identity_across_roll_overs(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never", segment_bytes=1024)
    identity = (await journal_identity(journal)).value
    for n in range(40):
        await journal.append(ThoughtEntry(conversation="c", text=f"thought {n} " + "x" * 100))
    assert len(list(tmp_path.glob("journal.jsonl*"))) > 2  # rolled over (segments beside the journal)
    assert (await journal_identity(journal)).value == identity
    await journal.aclose()
    assert await identity_of(path, segment_bytes=1024) == identity


async def test_a_journal_moved_with_its_cursors_is_the_same_journal_and_a_new_one_at_its_old_place_is_not(
    tmp_path: Path,
) -> None:
    old = tmp_path / "a" / "journal.jsonl"
    old.parent.mkdir()
    old.touch()
    identity = await identity_of(old)
    moved = tmp_path / "b" / "chat.jsonl"
    moved.parent.mkdir()
    old.rename(moved)
    (old.parent / "journal.jsonl.cursors").rename(moved.parent / "chat.jsonl.cursors")
    assert await identity_of(moved) == identity
    # A new journal where the old one was (its folder reused, /tmp paths, a re-created chat).
    old.touch()
    assert await identity_of(old) != identity


async def test_a_journal_deleted_and_created_again_with_its_cursors_gone_is_a_new_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.touch()
    identity = await identity_of(path)
    path.unlink()
    shutil.rmtree(tmp_path / "journal.jsonl.cursors")
    path.touch()
    assert await identity_of(path) != identity


async def test_handles_that_record_an_identity_at_once_agree_on_one(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journals = [FileJournal(path, durability="never") for _ in range(8)]
    found = await asyncio.gather(*(journal_identity(journal) for journal in journals))
    assert len({identity.value for identity in found}) == 1
    assert sum(identity.made_now for identity in found) == 1
    assert not [p for p in (tmp_path / "journal.jsonl.cursors").iterdir() if p.name != "journal-id"]
    for journal in journals:
        await journal.aclose()


async def test_a_corrupt_identity_is_refused_naming_its_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    (tmp_path / "journal.jsonl.cursors").mkdir()
    (tmp_path / "journal.jsonl.cursors" / "journal-id").write_text("not an id\n")
    journal = FileJournal(path, durability="never")
    with pytest.raises(JournalError, match=r"journal\.jsonl\.cursors/journal-id is corrupt.*delete it"):
        await journal_identity(journal)
    await journal.aclose()


async def test_a_memory_journal_keeps_its_identity_for_its_reopened_handles() -> None:
    journal = MemoryJournal()
    identity = (await journal_identity(journal)).value
    assert (await journal_identity(journal.reopen())).value == identity
    assert (await journal_identity(MemoryJournal())).value != identity


async def test_a_redis_journal_is_its_stream_whatever_url_reaches_it(redis_server: RedisServer) -> None:
    key = f"chat-{uuid.uuid4().hex}"
    by_address = RedisJournal.from_url(redis_server.url(key=key))
    by_name = RedisJournal.from_url(f"redis://localhost:{redis_server.port}/0?key={key}")
    other_key = RedisJournal.from_url(redis_server.url(key=f"{key}-2"))
    other_db = RedisJournal.from_url(redis_server.url(db=1, key=key))
    try:
        identity = await journal_identity(by_address)
        assert identity.made_now and identity.location.startswith(f"{key}:journal-id on redis://127.0.0.1")
        assert (await journal_identity(by_name)).value == identity.value
        assert (await journal_identity(other_key)).value != identity.value
        assert (await journal_identity(other_db)).value != identity.value
        # The stream is written, trimmed, read: the identity stays.
        await by_name.append(ThoughtEntry(conversation="c", text="hi"))
        found = await find_identity(by_address)
        assert found is not None and found.value == identity.value and not found.made_now
    finally:
        for journal in (by_address, by_name, other_key, other_db):
            await journal.aclose()
