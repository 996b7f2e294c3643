"""The ingress cursor: the journal position a restarted daemon resumes reading from.

Thoughts of different conversations finish at different times (one waits for a free Codex
slot while another is delivered at once), so the cursor cannot simply follow the reader. It
is a *low-water mark*: the start of the oldest routed entry that is not yet finished, or, when
nothing is pending, the end of the last entry read. Everything before the saved cursor is
finished for good; entries after it that were already finished (delivered thoughts) are
recognised on re-reading by the ids each session remembers.
"""

from __future__ import annotations

import heapq

from coven_codex.journal import Position


class LowWaterCursor:
    """Tracks pending journal positions; :attr:`position` is what may be saved."""

    def __init__(self, start: Position) -> None:
        self._read_end = start
        self._heap: list[Position] = []
        self._done: set[Position] = set()
        self._pending = 0

    def read(self, start: Position, end: Position, *, pending: bool, ahead: bool = False) -> None:
        """The reader consumed the item ``[start, end)``; ``pending`` if it is not finished yet.
        ``ahead``: it was routed ahead of the reader (a cluster daemon replays a conversation it
        adopted up to the journal's end), which has not read the items before it: where the reader
        is does not move."""
        if not ahead:
            self._read_end = max(self._read_end, end)
        if pending:
            heapq.heappush(self._heap, start)
            self._pending += 1

    def finish(self, start: Position) -> None:
        """The pending item starting at ``start`` is finished (delivered, or dropped for good)."""
        self._done.add(start)
        self._pending -= 1
        while self._heap and self._heap[0] in self._done:
            self._done.discard(heapq.heappop(self._heap))

    @property
    def read_end(self) -> Position:
        """Where the reader is: the end of the last item it consumed."""
        return self._read_end

    @property
    def pending(self) -> int:
        """How many routed items are not finished yet."""
        return self._pending

    @property
    def position(self) -> Position:
        """The start of the oldest unfinished item, or :attr:`read_end` when that is earlier (or
        none is pending)."""
        return min(self._heap[0], self._read_end) if self._heap else self._read_end
