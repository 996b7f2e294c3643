"""Concurrent appends to a Redis journal travel together: one script call (one round trip) per batch.

Each append used to run its own ``EVALSHA`` on a connection of its own: with 16 appenders, 16
connections and 16 round trips, and redis-py's per-command work, made the Redis journal 0.44
times as fast as the file journal (issue 33, item 5). :class:`AppendBatcher` queues the appends that
arrive while a batch is on its way and sends them all as the next batch, on one connection;
the script (:data:`~coven_codex.journal.redis.scripts.APPEND`) still checks each entry's id and
fence on its own, in order, so a batch means exactly what its appends one after another would.

An append therefore waits for at most the batch in flight and then its own: a streaming turn's
delta never waits behind a queue of other appends' round trips, however many appenders there are.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from coven_codex.journal.protocol import JournalError

Request = TypeVar("Request")
Reply = TypeVar("Reply")

MAX_ENTRIES: Final = 256
"""Entries per batch at most: one script call stays short (Redis runs nothing else meanwhile)."""
MAX_BYTES: Final = 1 << 20
"""Payload bytes per batch at most (a bigger single entry travels alone)."""
MAX_QUEUED: Final = 4096
"""Appends queued at most; more wait for room (each batch sent makes room)."""


class BatchPhase(enum.Enum):
    """Where an :class:`AppendBatcher` is."""

    IDLE = "idle"
    """Nothing queued, no batch on its way; the next append starts one at once."""
    SENDING = "sending"
    """A batch is on its way; appends arriving meanwhile queue for the next one."""
    CLOSED = "closed"
    """Closed: appends are refused, and those still queued failed."""


@dataclass(slots=True, eq=False)
class _Pending(Generic[Request, Reply]):
    request: Request
    size: int
    future: asyncio.Future[Reply]
    taken: bool = field(default=False)
    """Whether a batch took it (it is no longer in the queue)."""


class AppendBatcher(Generic[Request, Reply]):
    """Sends queued requests in batches through ``send``, one batch at a time, in arrival order.

    ``send`` gets the requests of a batch and returns one reply per request, in order; an
    exception it raises fails every request of that batch (a failure of one request alone belongs
    in its reply). ``send`` must be bounded in time (the journal's goes through
    :class:`~coven_codex.journal.redis.outage.Reachability`, at most its outage limit), so that
    every wait here is: an append waits for the batch in flight, then for its own, and, when
    :data:`MAX_QUEUED` appends are queued, for the batch that makes room.

    A cancelled append still queued is taken out and never sent; one whose batch is on its way
    may still land (as a cancelled single append could, once its command was sent).
    """

    def __init__(
        self,
        send: Callable[[Sequence[Request]], Awaitable[Sequence[Reply]]],
        *,
        closed: Callable[[], JournalError],
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        if max_entries < 1 or max_bytes < 1 or max_queued < 1:
            raise ValueError("max_entries, max_bytes and max_queued must be at least 1")
        self._send = send
        self._closed = closed
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._queue: deque[_Pending[Request, Reply]] = deque()
        self._room = asyncio.Semaphore(max_queued)
        self._runner: asyncio.Task[None] | None = None
        self.phase = BatchPhase.IDLE
        self.batches = 0
        """Batches sent so far (each one script call)."""
        self.largest = 0
        """The most requests one batch carried."""

    @property
    def queued(self) -> int:
        """Requests waiting for the next batch."""
        return len(self._queue)

    async def submit(self, request: Request, size: int) -> Reply:
        """``request``'s reply, once the batch that carried it was answered (``size``: its payload bytes)."""
        if self.phase is BatchPhase.CLOSED:
            raise self._closed()
        await self._room.acquire()
        if self._is_closed():  # closed while this append waited for room
            self._room.release()
            raise self._closed()
        pending: _Pending[Request, Reply] = _Pending(request, size, asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        if self.phase is BatchPhase.IDLE:
            self.phase = BatchPhase.SENDING
            self._runner = asyncio.create_task(self._run(), name="redis-journal-appends")
        try:
            return await pending.future
        except asyncio.CancelledError:
            if not pending.taken:
                pending.taken = True
                self._queue.remove(pending)
                self._room.release()
            raise

    def _is_closed(self) -> bool:
        return self.phase is BatchPhase.CLOSED

    def _take(self) -> list[_Pending[Request, Reply]]:
        batch: list[_Pending[Request, Reply]] = []
        size = 0
        while self._queue and len(batch) < self._max_entries:
            pending = self._queue[0]
            if batch and size + pending.size > self._max_bytes:
                break
            self._queue.popleft()
            pending.taken = True
            self._room.release()
            batch.append(pending)
            size += pending.size
        return batch

    async def _run(self) -> None:
        batch: list[_Pending[Request, Reply]] = []
        try:
            while self._queue:
                batch = self._take()
                self.batches += 1
                self.largest = max(self.largest, len(batch))
                try:
                    replies = await self._send([pending.request for pending in batch])
                    if len(replies) != len(batch):
                        raise JournalError(
                            f"the journal's Redis answered {len(replies)} replies to a batch of {len(batch)} appends;"
                            " is something rewriting the journal's script? Nothing is known about those appends:"
                            " retry them (appends are idempotent by entry id)"
                        )
                except Exception as exc:
                    for pending in batch:
                        if not pending.future.done():
                            pending.future.set_exception(exc)
                else:
                    for pending, reply in zip(batch, replies, strict=True):
                        if not pending.future.done():
                            pending.future.set_result(reply)
                batch = []
        except asyncio.CancelledError:
            error = self._closed()
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(error)
            raise
        finally:
            self._runner = None
            if self.phase is BatchPhase.SENDING:
                self.phase = BatchPhase.IDLE

    async def aclose(self) -> None:
        """Refuse new appends, stop the batch in flight and fail it and every queued append (closed)."""
        self.phase = BatchPhase.CLOSED
        runner = self._runner
        if runner is not None:
            runner.cancel()
            await asyncio.wait({runner})
        error = self._closed()
        while self._queue:
            pending = self._queue.popleft()
            pending.taken = True
            self._room.release()
            if not pending.future.done():
                pending.future.set_exception(error)
