"""An in-memory journal for unit tests, behind the same protocol as the file journal."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from coven_codex.entries import BaseEntry
from coven_codex.journal.decoding import decode_line
from coven_codex.journal.file import encode_entry, with_id
from coven_codex.journal.protocol import (
    JournalError,
    JournalItem,
    JournalRecord,
    Position,
    check_cursor_name,
    check_position,
)
from coven_codex.tailing import DEFAULT_MAX_LINE_BYTES

logger = logging.getLogger(__name__)


class MemoryJournal:
    """Items live in a list; item ``i`` lies at positions ``i``..``i + 1``.

    Entries go through the same encoding and decoding as in a file, so an entry read
    back equals one read from a :class:`FileJournal`. :meth:`append_raw` stores an
    arbitrary line, to exercise how consumers deal with bad lines.
    """

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._items: list[JournalItem] = []
        self._cursors: dict[str, Position] = {}
        self._grew = asyncio.Event()
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryJournal({len(self._items)} items)"

    def _push(self, data: bytes) -> JournalItem:
        if self._closed:
            raise JournalError("the journal is closed")
        start = len(self._items)
        item = decode_line(data, start, start + 1, max_line_bytes=self.max_line_bytes)
        self._items.append(item)
        grew, self._grew = self._grew, asyncio.Event()
        grew.set()
        return item

    async def append(self, entry: BaseEntry) -> JournalRecord:
        entry = with_id(entry)
        item = self._push(encode_entry(entry, self.max_line_bytes)[:-1])
        if not isinstance(item, JournalRecord):
            raise JournalError(f"entry {entry.id} does not survive encoding: {item.reason}")
        return item

    async def append_raw(self, data: bytes) -> JournalItem:
        """Store one line as a file would hold it (without its newline), valid or not."""
        return self._push(data)

    async def tail(self, start: Position = 0) -> AsyncIterator[JournalItem]:
        position = check_position(start)
        if position > len(self._items):
            logger.warning("tail start %d is past the end (%d); reading from 0", position, len(self._items))
            position = 0
        while True:
            while position < len(self._items):
                item = self._items[position]
                position += 1
                yield item
            await self._grew.wait()

    async def read(self, start: Position = 0, end: Position | None = None) -> list[JournalItem]:
        if start < 0 or (end is not None and end < start):
            raise JournalError(f"invalid range {start}..{end}")
        return self._items[start:end]

    async def end_position(self) -> Position:
        return len(self._items)

    async def load_cursor(self, name: str) -> Position | None:
        return self._cursors.get(check_cursor_name(name))

    async def save_cursor(self, name: str, position: Position) -> None:
        self._cursors[check_cursor_name(name)] = check_position(position)

    async def aclose(self) -> None:
        self._closed = True
