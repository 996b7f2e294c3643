"""What only the Redis Streams journal has: restarts and outages of Redis, compaction, fencing, idempotent appends.

Every test runs a real ``redis-server`` (``coven_codex.testing.redis_server``); the ones that stop
or kill it start their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from coven_codex.agent.ingress import STARTUP_INTEREST
from coven_codex.entries import GenericEntry, ThoughtEntry
from coven_codex.journal import BadLine, JournalError, JournalItem, JournalRecord
from coven_codex.journal.protocol import START
from coven_codex.journal.redis import (
    Fence,
    FencedOut,
    JournalUnavailable,
    PositionTrimmed,
    RedisJournal,
    parse_redis_name,
    scripts,
)
from coven_codex.journal.redis.journal import BATCH
from coven_codex.testing.redis_server import RedisServer


def thought(text: str, **fields: str) -> ThoughtEntry:
    return ThoughtEntry(text=text, **fields)  # type: ignore[arg-type]  # id and conversation are fields


def texts(items: list[JournalItem]) -> list[str]:
    return [item.entry.text for item in items if isinstance(item, JournalRecord)]


class Collector:
    """Consumes a tail in a task, keeping every item."""

    def __init__(self, items: AsyncIterator[JournalItem]) -> None:
        self.items: list[JournalItem] = []
        self.error: BaseException | None = None
        self._grew = asyncio.Event()
        self.task = asyncio.create_task(self._run(items))

    async def _run(self, items: AsyncIterator[JournalItem]) -> None:
        try:
            async for item in items:
                self.items.append(item)
                self._grew.set()
        except JournalError as exc:
            self.error = exc
            self._grew.set()

    async def wait(self, count: int) -> list[JournalItem]:
        async with asyncio.timeout(120):
            while len(self.items) < count:
                assert self.error is None, self.error
                assert not self.task.done(), "the tail ended by itself"
                self._grew.clear()
                await self._grew.wait()
        return self.items

    async def wait_error(self) -> BaseException:
        async with asyncio.timeout(60):
            while self.error is None:
                assert not self.task.done(), "the tail ended without an error"
                self._grew.clear()
                await self._grew.wait()
        return self.error

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (AOF, fsync on every write), to stop, kill and restart."""
    server = RedisServer(tmp_path / "redis", extra_args=("--appendfsync", "always"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def name(redis_server: RedisServer) -> str:
    return redis_server.url(key=f"t-{uuid.uuid4().hex}")


def test_journal_names() -> None:
    location = parse_redis_name("redis://:secret@example.org:6380/2?key=team:chat")
    assert location.key == "team:chat"
    assert location.stream == "team:chat" and location.cursors == "team:chat:cursors"
    assert location.url == "redis://:secret@example.org:6380/2"
    assert "secret" not in location.display()
    assert parse_redis_name("redis://localhost").key == "coven-codex"
    for bad, why in [
        ("redis://localhost/0?key=a&db=1", "unknown option"),
        ("redis://localhost/0?key=a&key=b", "more than once"),
        ("redis://localhost/x?key=a", "database"),
        ("redis://localhost/0?key=", "key"),
        ("redis:///0?key=a", "no host"),
    ]:
        with pytest.raises(JournalError, match=why):
            parse_redis_name(bad)


async def test_a_retried_append_returns_the_first_record(name: str) -> None:
    journal = RedisJournal.from_url(name)
    first = await journal.append(thought("once", id="t-1"))
    again = await journal.append(thought("once, retried", id="t-1"))
    assert again == first
    assert again.entry.text == "once"
    assert texts(await journal.read()) == ["once"]
    await journal.aclose()


async def test_an_append_whose_reply_was_lost_is_not_appended_twice(name: str) -> None:
    """The script ran (the entry is in the stream) but the writer never heard back: its retry finds it."""
    journal = RedisJournal.from_url(name)
    location = parse_redis_name(name)
    entry = thought("sent before the connection broke", id="lost-reply")
    entry_id, payload = (entry.id or "").encode(), entry.to_json().encode()
    batch = b"%d %d 0 \n%s%s" % (len(entry_id), len(payload), entry_id, payload)  # (scripts.APPEND's format)
    client = Redis.from_url(location.url)
    await client.register_script(scripts.APPEND)(keys=[location.stream, location.ids, location.trimmed], args=[batch])
    await client.aclose()
    record = await journal.append(entry)
    items = await journal.read()
    assert items == [record]
    await journal.aclose()


async def test_fenced_appends(name: str) -> None:
    journal = RedisJournal.from_url(name)
    location = parse_redis_name(name)
    client = Redis.from_url(location.url)
    lease = f"{location.key}:lease:room"
    await client.set(lease, 7)
    record = await journal.append(thought("by the owner"), fence=Fence(lease, 7))
    await client.set(lease, 8)  # another daemon took the conversation over
    with pytest.raises(FencedOut, match="another writer took over") as refused:
        await journal.append(thought("by the old owner"), fence=Fence(lease, 7))
    assert refused.value.held == "8" and refused.value.token == 7
    await client.delete(lease)
    with pytest.raises(FencedOut):
        await journal.append(thought("no lease at all"), fence=Fence(lease, 7))
    assert await journal.read() == [record]
    # A retry of an append that got through before the fence moved returns it (it is in the journal).
    assert await journal.append(record.entry, fence=Fence(lease, 7)) == record
    await client.aclose()
    await journal.aclose()


async def test_a_foreign_stream_entry_is_reported_and_skipped(name: str) -> None:
    journal = RedisJournal.from_url(name)
    first = await journal.append(thought("before"))
    foreign = await journal.append_raw({"msg": b"written by another tool"})
    last = await journal.append(thought("after"))
    items = await journal.read()
    assert items[0] == first and items[2] == last
    bad = items[1]
    assert isinstance(bad, BadLine)
    assert bad.start == first.end and bad.end == foreign == last.start
    assert "no 'entry' field" in bad.reason and "msg" in bad.reason
    await journal.aclose()


async def test_compaction_trims_only_behind_every_cursor_and_bounds_the_index(name: str) -> None:
    journal = RedisJournal.from_url(name)
    location = parse_redis_name(name)
    records = [await journal.append(thought(f"e{i}", id=f"id-{i}")) for i in range(10)]
    nothing = await journal.compact()
    assert nothing.removed == 0 and "no cursor" in nothing.reason
    await journal.save_cursor("ingress", records[6].end)
    await journal.save_cursor("web", records[3].end)
    bounded = await journal.compact(through=records[1].end)
    assert bounded.removed == 2 and bounded.through == records[1].end
    compaction = await journal.compact()
    assert compaction.removed == 2 and compaction.through == records[3].end
    assert texts(await journal.read()) == [f"e{i}" for i in range(4, 10)]
    assert texts(await journal.read(records[3].end)) == [f"e{i}" for i in range(4, 10)]
    client = Redis.from_url(location.url)
    assert sorted(await client.hkeys(location.ids)) == [f"id-{i}".encode() for i in range(4, 10)]
    await client.aclose()
    # the first record kept starts where the removed ones ended, whoever reads it
    [first, *_] = await journal.read()
    assert first == records[4]
    await journal.aclose()


async def test_a_reader_behind_the_trim_point_gets_a_clear_error(name: str) -> None:
    journal = RedisJournal.from_url(name)
    records = [await journal.append(thought(f"e{i}")) for i in range(6)]
    slow = Collector(journal.tail(records[0].end))
    await slow.wait(5)
    await slow.stop()
    await journal.save_cursor("only", records[3].end)
    await journal.compact()
    with pytest.raises(PositionTrimmed, match="removed by compaction") as trimmed:
        await journal.read(records[1].end)
    assert trimmed.value.position == records[1].end and trimmed.value.trimmed == records[3].end
    lagging = Collector(journal.tail(records[1].end))
    error = await lagging.wait_error()
    assert isinstance(error, PositionTrimmed)
    await lagging.stop()
    from_start = Collector(journal.tail(START))
    assert texts(await from_start.wait(2)) == ["e4", "e5"]
    await from_start.stop()
    await journal.aclose()


async def test_a_stream_trimmed_under_a_live_reader(name: str) -> None:
    """A tail busy with one entry while compaction removes entries it has not read: it fails, never skips."""
    journal = RedisJournal.from_url(name)
    records = [await journal.append(thought(f"e{i}")) for i in range(2)]
    items = journal.tail()
    assert [await anext(items), await anext(items)] == records  # busy with e1 now; the tail holds its place
    more = [await journal.append(thought(f"m{i}")) for i in range(3)]
    await journal.save_cursor("faster reader", more[1].end)
    await journal.compact()
    with pytest.raises(PositionTrimmed, match=f"after position {records[1].end}"):
        await anext(items)
    await items.aclose()
    await journal.aclose()


async def test_tails_and_appends_ride_out_a_redis_restart(
    own_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coven_codex.journal.redis")
    name = own_server.url(key="chat")
    journal = RedisJournal.from_url(name, block_seconds=0.5)
    reader = Collector(journal.tail())
    for i in range(5):
        await journal.append(thought(f"before {i}"))
    await reader.wait(5)
    own_server.kill()
    waiting = asyncio.create_task(journal.append(thought("while down", id="during")))
    await asyncio.sleep(1.5)  # several retries happen meanwhile; they must be reported once
    assert not waiting.done()
    own_server.start()
    record = await asyncio.wait_for(waiting, 60)
    for i in range(5):
        await journal.append(thought(f"after {i}"))
    items = await reader.wait(11)
    assert texts(items) == [f"before {i}" for i in range(5)] + ["while down"] + [f"after {i}" for i in range(5)]
    assert items[5] == record
    assert items == await journal.read()
    down = [r for r in caplog.records if "cannot be reached" in r.getMessage()]
    back = [r for r in caplog.records if "reachable again" in r.getMessage()]
    assert len(down) == 1 and len(back) == 1
    assert journal.reachability.outages == 1
    await reader.stop()
    await journal.aclose()


async def test_cursors_survive_a_redis_restart_with_aof(own_server: RedisServer) -> None:
    journal = RedisJournal.from_url(own_server.url(key="chat"))
    record = await journal.append(thought("kept"))
    await journal.save_cursor("ingress", record.end)
    own_server.restart()
    assert await journal.load_cursor("ingress") == record.end
    assert await journal.read() == [record]
    await journal.aclose()


async def test_appends_racing_redis_kills_are_never_duplicated(own_server: RedisServer) -> None:
    """Appends in flight while Redis is killed and restarted: each is in the journal exactly once."""
    journal = RedisJournal.from_url(own_server.url(key="chat"))
    count = 300

    async def writer(number: int) -> JournalRecord:
        return await journal.append(thought(f"w{number}", id=f"w-{number}"))

    async def chaos() -> None:
        for _ in range(3):
            await asyncio.sleep(0.05)
            own_server.kill()
            await asyncio.sleep(0.2)
            own_server.start()

    results = await asyncio.gather(chaos(), *(writer(n) for n in range(count)))
    records = results[1:]
    items = await journal.read()
    ids = [item.entry.id for item in items if isinstance(item, JournalRecord)]
    assert len(ids) == len(set(ids)) == count
    assert sorted(ids) == sorted(f"w-{n}" for n in range(count))
    assert sorted(records, key=lambda r: r.end) == items
    await journal.aclose()


async def test_an_outage_longer_than_the_limit_fails_clearly(own_server: RedisServer) -> None:
    journal = RedisJournal.from_url(own_server.url(key="chat"), outage_limit=1.0)
    await journal.append(thought("up"))
    own_server.stop()
    with pytest.raises(JournalUnavailable, match="could not be reached for 1 s"):
        await journal.append(thought("down"))
    await journal.aclose()


async def test_a_read_with_an_interest_gives_the_admitted_entries_across_batches(name: str) -> None:
    """Entries the interest does not admit are passed over, also in batches that hold none it admits."""
    journal = RedisJournal.from_url(name)
    try:
        chat = GenericEntry(kind="message", text="chat").to_json().encode()
        for n in range(2 * BATCH + 10):
            if n % 700 == 0:
                await journal.append(thought(f"t{n}", id=f"t{n}"))
            await journal.append_raw({b"entry": chat.replace(b'"id":null', b'"id":"m%d"' % n)})
        await journal.append_raw({b"other": b"no entry field"})
        everything = await journal.read()
        admitted = await journal.read(interest=STARTUP_INTEREST)
    finally:
        await journal.aclose()
    assert len(everything) == 2 * BATCH + 10 + 3 + 1
    assert texts(admitted) == ["t0", "t700", "t1400"]
    assert isinstance(admitted[-1], BadLine)  # (not an entry line: reported as ever)
    assert admitted == [i for i in everything if isinstance(i, BadLine) or i.entry.kind == "thought"]
