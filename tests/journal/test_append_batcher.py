"""The batcher under a Redis journal's appends: what waits for what, cancellation, errors, closing.

The batches go to a send function of the test's own that holds each batch until the test lets it
go, so what arrives while a batch is on its way is exact (the Redis side is in test_redis_batching).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from coven_codex.journal import JournalError
from coven_codex.journal.redis.batcher import AppendBatcher, BatchPhase


class HeldSends:
    """A send function that records each batch and answers it when released (``"reply to " + request``)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.arrived = asyncio.Event()
        self._release: asyncio.Queue[BaseException | None] = asyncio.Queue()

    async def __call__(self, batch: Sequence[str]) -> list[str]:
        self.batches.append(list(batch))
        self.arrived.set()
        outcome = await self._release.get()
        if outcome is not None:
            raise outcome
        return [f"reply to {request}" for request in batch]

    async def next_batch(self) -> list[str]:
        async with asyncio.timeout(10):
            await self.arrived.wait()
        self.arrived.clear()
        return self.batches[-1]

    def release(self, outcome: BaseException | None = None) -> None:
        self._release.put_nowait(outcome)


def closed() -> JournalError:
    return JournalError("the journal test is closed")


async def test_appends_arriving_while_a_batch_is_on_its_way_all_go_in_the_next_one() -> None:
    """A delta made while 20 others wait waits for the batch in flight and its own, not for 20 round trips."""
    sends = HeldSends()
    batcher: AppendBatcher[str, str] = AppendBatcher(sends, closed=closed)
    assert batcher.phase is BatchPhase.IDLE
    first = asyncio.create_task(batcher.submit("first", 5))
    assert await sends.next_batch() == ["first"]
    assert batcher.phase is BatchPhase.SENDING
    later = [asyncio.create_task(batcher.submit(f"later {n}", 7)) for n in range(20)]
    delta = asyncio.create_task(batcher.submit("delta", 5))
    await asyncio.sleep(0)  # the 21 tasks run up to their wait (no I/O is involved)
    assert batcher.queued == 21
    sends.release()
    assert await first == "reply to first"
    assert await sends.next_batch() == [f"later {n}" for n in range(20)] + ["delta"]
    sends.release()
    assert await delta == "reply to delta"
    assert [await task for task in later] == [f"reply to later {n}" for n in range(20)]
    assert batcher.batches == 2 and batcher.largest == 21
    assert batcher.phase is BatchPhase.IDLE


async def test_a_cancelled_append_still_queued_is_never_sent() -> None:
    sends = HeldSends()
    batcher: AppendBatcher[str, str] = AppendBatcher(sends, closed=closed)
    first = asyncio.create_task(batcher.submit("first", 5))
    await sends.next_batch()
    cancelled = asyncio.create_task(batcher.submit("cancelled", 9))
    kept = asyncio.create_task(batcher.submit("kept", 4))
    await asyncio.sleep(0)
    assert batcher.queued == 2
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert batcher.queued == 1
    sends.release()
    await first
    assert await sends.next_batch() == ["kept"]
    sends.release()
    assert await kept == "reply to kept"
    assert all("cancelled" not in batch for batch in sends.batches)


async def test_a_batch_that_fails_fails_its_own_appends_and_the_next_batch_is_sent() -> None:
    sends = HeldSends()
    batcher: AppendBatcher[str, str] = AppendBatcher(sends, closed=closed)
    doomed = [asyncio.create_task(batcher.submit(f"doomed {n}", 5)) for n in range(3)]
    assert await sends.next_batch() == [f"doomed {n}" for n in range(3)]
    survivor = asyncio.create_task(batcher.submit("survivor", 5))
    await asyncio.sleep(0)
    sends.release(JournalError("Redis went away for good"))
    for task in doomed:
        with pytest.raises(JournalError, match="went away"):
            await task
    assert await sends.next_batch() == ["survivor"]
    sends.release()
    assert await survivor == "reply to survivor"


async def test_a_send_that_answers_the_wrong_number_of_replies_fails_that_batch_clearly() -> None:
    async def short(batch: Sequence[str]) -> list[str]:
        return ["one reply"]

    batcher: AppendBatcher[str, str] = AppendBatcher(short, closed=closed)
    results = await asyncio.gather(batcher.submit("a", 1), batcher.submit("b", 1), return_exceptions=True)
    assert all(isinstance(result, JournalError) and "1 replies to a batch of 2" in str(result) for result in results)


async def test_batches_are_bounded_by_entries_and_by_bytes() -> None:
    sent: list[list[str]] = []

    async def send(batch: Sequence[str]) -> list[str]:
        sent.append(list(batch))
        return list(batch)

    by_count: AppendBatcher[str, str] = AppendBatcher(send, closed=closed, max_entries=3)
    await asyncio.gather(*(by_count.submit(f"c{n}", 1) for n in range(7)))
    assert sent == [["c0", "c1", "c2"], ["c3", "c4", "c5"], ["c6"]]
    sent.clear()
    by_size: AppendBatcher[str, str] = AppendBatcher(send, closed=closed, max_bytes=10)
    sizes = {"big": 25, "s1": 6, "s2": 4, "s3": 1}
    await asyncio.gather(*(by_size.submit(request, size) for request, size in sizes.items()))
    assert sent == [["big"], ["s1", "s2"], ["s3"]]


async def test_a_full_queue_makes_the_next_append_wait_for_room() -> None:
    sends = HeldSends()
    batcher: AppendBatcher[str, str] = AppendBatcher(sends, closed=closed, max_queued=2)
    first = asyncio.create_task(batcher.submit("first", 1))
    await sends.next_batch()
    queued = [asyncio.create_task(batcher.submit(f"q{n}", 1)) for n in range(2)]
    waiting = asyncio.create_task(batcher.submit("waiting", 1))
    await asyncio.sleep(0)
    assert batcher.queued == 2  # "waiting" waits for room, outside the queue
    sends.release()
    await first
    assert await sends.next_batch() == ["q0", "q1"]
    sends.release()
    assert await sends.next_batch() == ["waiting"]
    sends.release()
    assert await waiting == "reply to waiting"
    assert [await task for task in queued] == ["reply to q0", "reply to q1"]


async def test_closing_fails_the_batch_in_flight_and_the_queued_appends_and_refuses_new_ones() -> None:
    sends = HeldSends()
    batcher: AppendBatcher[str, str] = AppendBatcher(sends, closed=closed, max_queued=1)
    in_flight = asyncio.create_task(batcher.submit("in flight", 1))
    await sends.next_batch()
    queued = asyncio.create_task(batcher.submit("queued", 1))
    waiting_for_room = asyncio.create_task(batcher.submit("waiting for room", 1))
    await asyncio.sleep(0)
    await batcher.aclose()
    assert batcher.phase is BatchPhase.CLOSED
    for task in (in_flight, queued, waiting_for_room):
        with pytest.raises(JournalError, match="is closed"):
            await task
    with pytest.raises(JournalError, match="is closed"):
        await batcher.submit("after", 1)
    assert sends.batches == [["in flight"]]
