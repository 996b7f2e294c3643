"""Concurrent appends to a Redis journal share one script call, each entry still checked on its own.

A real ``redis-server``; the script calls are counted by Redis itself (``INFO commandstats``), so
"one batch" here means one ``EVALSHA`` on the server.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from coven_codex.entries import ThoughtEntry
from coven_codex.journal import JournalError, JournalRecord
from coven_codex.journal.redis import Fence, FencedOut, RedisJournal, parse_redis_name
from coven_codex.testing.redis_server import RedisServer


async def script_calls(client: Redis) -> int:
    """How many script calls (``EVALSHA`` and ``EVAL``) the server has run."""
    stats = await client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval"))


@pytest.fixture
async def setup(redis_server: RedisServer) -> AsyncIterator[tuple[RedisJournal, Redis, str]]:
    name = redis_server.url(key=f"batch-{uuid.uuid4().hex}")
    journal = RedisJournal.from_url(name)
    client = Redis.from_url(parse_redis_name(name).url)
    await journal.append(ThoughtEntry(text="loads the script and the connection"))
    yield journal, client, parse_redis_name(name).key
    await client.aclose()
    await journal.aclose()


async def test_sixteen_concurrent_appends_travel_in_one_script_call_in_the_order_they_were_made(
    setup: tuple[RedisJournal, Redis, str],
) -> None:
    journal, client, _key = setup
    before = await script_calls(client)
    records = await asyncio.gather(*(journal.append(ThoughtEntry(text=f"a{n}", id=f"a{n}")) for n in range(16)))
    assert await script_calls(client) - before == 1
    assert [record.entry.id for record in records] == [f"a{n}" for n in range(16)]
    assert all(earlier.end == later.start for earlier, later in itertools.pairwise(records))
    assert (await journal.read(records[0].start)) == records


async def test_a_stale_writer_inside_a_batch_is_fenced_out_alone(setup: tuple[RedisJournal, Redis, str]) -> None:
    journal, client, key = setup
    ours, taken, gone = f"{key}:lease:ours", f"{key}:lease:taken", f"{key}:lease:gone"
    await client.set(ours, 7)
    await client.set(taken, 8)  # another daemon took this conversation over
    before = await script_calls(client)
    results = await asyncio.gather(
        journal.append(ThoughtEntry(text="by the owner", id="owner-1"), fence=Fence(ours, 7)),
        journal.append(ThoughtEntry(text="by the old owner", id="stale"), fence=Fence(taken, 7)),
        journal.append(ThoughtEntry(text="unfenced", id="free")),
        journal.append(ThoughtEntry(text="no lease at all", id="leaseless"), fence=Fence(gone, 7)),
        journal.append(ThoughtEntry(text="by the owner again", id="owner-2"), fence=Fence(ours, 7)),
        return_exceptions=True,
    )
    assert await script_calls(client) - before == 1
    owner_1, stale, free, leaseless, owner_2 = results
    assert isinstance(stale, FencedOut) and stale.held == "8" and stale.token == 7 and stale.key == taken
    assert isinstance(leaseless, FencedOut) and leaseless.held is None
    written = [owner_1, free, owner_2]
    assert all(isinstance(record, JournalRecord) for record in written)
    assert await journal.read(written[0].start) == written  # type: ignore[union-attr]  # checked just above


async def test_a_duplicate_inside_a_batch_is_written_once(setup: tuple[RedisJournal, Redis, str]) -> None:
    journal, client, _key = setup
    before = await script_calls(client)
    first, between, again = await asyncio.gather(
        journal.append(ThoughtEntry(text="once", id="dup")),
        journal.append(ThoughtEntry(text="between", id="other")),
        journal.append(ThoughtEntry(text="once, retried", id="dup")),
    )
    assert await script_calls(client) - before == 1
    assert again == first and again.entry.text == "once"
    assert await journal.read(first.start) == [first, between]


async def test_a_fence_key_redis_cannot_read_fails_its_own_append_only_saying_why(
    setup: tuple[RedisJournal, Redis, str],
) -> None:
    journal, client, key = setup
    ours, wrong = f"{key}:lease:ours", f"{key}:lease:wrong"
    await client.set(ours, 3)
    await client.hset(wrong, "not", "a token")
    before = await script_calls(client)
    results = await asyncio.gather(
        journal.append(ThoughtEntry(text="before", id="before"), fence=Fence(ours, 3)),
        journal.append(ThoughtEntry(text="broken fence", id="broken"), fence=Fence(wrong, 3)),
        journal.append(ThoughtEntry(text="after", id="after")),
        return_exceptions=True,
    )
    assert await script_calls(client) - before == 1
    before_record, broken, after_record = results
    assert isinstance(broken, JournalError) and not isinstance(broken, FencedOut)
    assert "cannot read its fence key" in str(broken) and wrong in str(broken) and "WRONGTYPE" in str(broken)
    assert isinstance(before_record, JournalRecord) and isinstance(after_record, JournalRecord)
    assert await journal.read(before_record.start) == [before_record, after_record]


async def test_an_append_on_a_closed_journal_fails_saying_it_is_closed(redis_server: RedisServer) -> None:
    journal = RedisJournal.from_url(redis_server.url(key=f"batch-{uuid.uuid4().hex}"))
    await journal.append(ThoughtEntry(text="open"))
    await journal.aclose()
    with pytest.raises(JournalError, match="is closed"):
        await journal.append(ThoughtEntry(text="closed"))
