"""The daemon's writes to a shared journal, fenced by the conversation's lease."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from coven_codex.cluster.leases import Fence, LeaseLost
from coven_codex.cluster.node import ClusterNode
from coven_codex.entries import BaseEntry
from coven_codex.journal import START, Interest, Journal, JournalError, JournalItem, JournalRecord, Position


class FenceableJournal(Journal, Protocol):
    """A journal whose appends can carry a fence (the Redis Streams backend)."""

    async def append(self, entry: BaseEntry, *, fence: Fence | None = None) -> JournalRecord:
        """Append ``entry`` only while ``fence`` holds (else the backend's fenced-out error)."""
        ...


class FencedJournal:
    """``journal`` for the daemon's own entries: each append carries its conversation's fence.

    A refused append (another daemon holds the conversation now) raises :class:`LeaseLost`;
    reads pass through.
    """

    def __init__(self, journal: FenceableJournal, node: ClusterNode) -> None:
        self._journal = journal
        self._node = node

    async def append(self, entry: BaseEntry) -> JournalRecord:
        """Append ``entry`` under the lease of its conversation; :class:`LeaseLost` when it is not ours."""
        fence = self._node.fence(entry.conversation)
        try:
            return await self._journal.append(entry, fence=fence)
        except JournalError as exc:
            if type(exc).__name__ == "FencedOut":
                self._node.drop(entry.conversation)
                raise LeaseLost(entry.conversation) from None
            raise

    def tail(self, start: Position = START) -> AsyncIterator[JournalItem]:
        """The journal's tail, unchanged."""
        return self._journal.tail(start)

    async def read(
        self, start: Position = START, end: Position | None = None, *, interest: Interest | None = None
    ) -> list[JournalItem]:
        """The journal's items, unchanged."""
        return await self._journal.read(start, end, interest=interest)

    async def end_position(self) -> Position:
        """The journal's end."""
        return await self._journal.end_position()

    async def load_cursor(self, name: str) -> Position | None:
        """A cursor of the journal."""
        return await self._journal.load_cursor(name)

    async def save_cursor(self, name: str, position: Position) -> None:
        """Save a cursor of the journal."""
        await self._journal.save_cursor(name, position)

    async def aclose(self) -> None:
        """The journal is closed by its owner, not here."""
