"""Group commit: concurrent appends share one fsync instead of paying one each."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class GroupCommit:
    """Waits until the caller's write is on disk, sharing fsyncs between callers.

    A caller takes a ticket after its write finished; a sync covers every ticket
    taken before it started. While one sync runs, later callers wait for the next
    one, which then covers all of them at once.
    """

    def __init__(self, sync: Callable[[], None]) -> None:
        self._sync = sync
        self._issued = 0
        self._synced = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._running: asyncio.Task[None] | None = None

    async def wait_durable(self) -> None:
        """Return once a sync started after this call has finished; raise that sync's error if it failed."""
        self._issued += 1
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._issued, future))
        if self._running is None:
            self._running = asyncio.create_task(self._run())
        await asyncio.shield(future)

    async def _run(self) -> None:
        try:
            while self._synced < self._issued:
                covers = self._issued
                error: BaseException | None = None
                try:
                    await asyncio.to_thread(self._sync)
                except Exception as exc:
                    error = exc
                self._synced = covers
                done = [(ticket, f) for ticket, f in self._waiters if ticket <= covers]
                self._waiters = [(ticket, f) for ticket, f in self._waiters if ticket > covers]
                for _ticket, future in done:
                    if future.done():
                        continue
                    if error is None:
                        future.set_result(None)
                    else:
                        future.set_exception(error)
        finally:
            self._running = None

    async def drain(self) -> None:
        """Wait for the sync in progress (and any it triggers) to finish."""
        while self._running is not None:
            await asyncio.shield(self._running)
