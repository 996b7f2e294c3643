"""Saving one session's state: at once (write-ahead) or coalesced (egress progress)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from coven_codex.agent.state import SessionState, StateStore


class StateSaver:
    """Serialises saves of one :class:`SessionState`; each save snapshots the state when it runs.

    :meth:`save_now` is awaited where order matters (the write-ahead before a hand-over): it
    returns once the save is durable as the store's durability promises (``"always"``: the
    write and its fsync run in a thread; ``"batched"``: the write is made at once and the
    fsync shared with other sessions' saves, see :meth:`StateStore.wait_durable`).
    :meth:`request` only marks the state dirty; :meth:`run` saves the newest snapshot, so a
    burst of egress lines costs one write.
    """

    def __init__(
        self, state: SessionState, store: StateStore, *, mirror: Callable[[bytes], Awaitable[None]] | None = None
    ) -> None:
        self._state = state
        self._store = store
        self._mirror = mirror
        """Called with each snapshot once it is durable here (the cluster's fenced copy in Redis)."""
        self._lock = asyncio.Lock()
        self._wanted = asyncio.Event()

    def request(self) -> None:
        """Mark the state dirty: :meth:`run` saves it soon, once for a burst of requests."""
        self._wanted.set()

    async def save_now(self) -> None:
        """Save a snapshot of the state now; returns once it is durable as the store promises (and mirrored)."""
        async with self._lock:
            data = self._state.model_dump_json().encode("utf-8")
            if self._store.durability == "always":
                await asyncio.to_thread(self._store.write, self._state.conversation, data)
            else:
                self._store.write(self._state.conversation, data)
            await self._store.wait_durable()
            if self._mirror is not None:
                await self._mirror(data)

    async def run(self) -> None:
        """Save the newest snapshot whenever one was requested; runs until cancelled."""
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            await self.save_now()

    def save_blocking(self) -> None:
        """The last save at shutdown, after the tasks are gone (durable on return)."""
        self._store.save(self._state)
