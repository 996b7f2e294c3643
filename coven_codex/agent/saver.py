"""Saving one session's state: at once (write-ahead) or coalesced (egress progress)."""

from __future__ import annotations

import asyncio

from coven_codex.agent.state import SessionState, StateStore


class StateSaver:
    """Serialises saves of one :class:`SessionState`; each save snapshots the state when it runs.

    :meth:`save_now` is awaited where order matters (the write-ahead before a hand-over).
    :meth:`request` only marks the state dirty; :meth:`run` saves the newest snapshot, so a
    burst of egress lines costs one write. A durable store fsyncs, which runs in a thread.
    """

    def __init__(self, state: SessionState, store: StateStore) -> None:
        self._state = state
        self._store = store
        self._lock = asyncio.Lock()
        self._wanted = asyncio.Event()

    def request(self) -> None:
        self._wanted.set()

    async def save_now(self) -> None:
        async with self._lock:
            data = self._state.model_dump_json().encode("utf-8")
            if self._store.durable:
                await asyncio.to_thread(self._store.write, self._state.conversation, data)
            else:
                self._store.write(self._state.conversation, data)

    async def run(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            await self.save_now()

    def save_blocking(self) -> None:
        """The last save at shutdown, after the tasks are gone."""
        self._store.write(self._state.conversation, self._state.model_dump_json().encode("utf-8"))
