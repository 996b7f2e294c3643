"""An in-memory journal for unit tests, behind the same protocol as the file journal."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator

from coven_codex.entries import BaseEntry
from coven_codex.journal.decoding import decode_line
from coven_codex.journal.file import encode_entry, with_id
from coven_codex.journal.interest import Interest
from coven_codex.journal.protocol import (
    START,
    JournalError,
    JournalItem,
    JournalRecord,
    Position,
    check_cursor_name,
    check_position,
)
from coven_codex.tailing import DEFAULT_MAX_LINE_BYTES

log = logging.getLogger(__name__)


class MemoryStore:
    """What a memory journal holds; several :class:`MemoryJournal` handles may share it."""

    def __init__(self) -> None:
        self.items: list[JournalItem] = []
        self.cursors: dict[str, Position] = {}
        self.identity: str | None = None
        self.grew = asyncio.Event()

    def push(self, item: JournalItem) -> None:
        """Add ``item`` and wake every tail waiting for more."""
        self.items.append(item)
        grew, self.grew = self.grew, asyncio.Event()
        grew.set()


def _index(position: Position) -> int:
    if check_position(position).major != 0:
        raise JournalError(f"position {position} is not a position in a memory journal")
    return position.minor


class MemoryJournal:
    """Items live in a list; item ``i`` lies at positions ``i``..``i + 1``.

    Entries go through the same encoding and decoding as in a file, so an entry read
    back equals one read from a :class:`FileJournal`. :meth:`append_raw` stores an
    arbitrary line, to exercise how consumers deal with bad lines. :meth:`reopen` gives
    another handle on the same items and cursors (what a restart would see).
    """

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, store: MemoryStore | None = None) -> None:
        self.max_line_bytes = max_line_bytes
        self.store = store if store is not None else MemoryStore()
        self._items = self.store.items
        self._cursors = self.store.cursors
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryJournal({len(self._items)} items)"

    def reopen(self) -> MemoryJournal:
        """Another handle on the same items and cursors, as a restarted process would see them."""
        return MemoryJournal(max_line_bytes=self.max_line_bytes, store=self.store)

    def _push(self, data: bytes) -> JournalItem:
        if self._closed:
            raise JournalError("the journal is closed")
        index = len(self._items)
        item = decode_line(data, Position(0, index), Position(0, index + 1), max_line_bytes=self.max_line_bytes)
        self.store.push(item)
        return item

    async def append(self, entry: BaseEntry) -> JournalRecord:
        """Append ``entry`` through the file encoding; :class:`JournalError` if it does not decode back."""
        entry = with_id(entry)
        item = self._push(encode_entry(entry, self.max_line_bytes)[:-1])
        if not isinstance(item, JournalRecord):
            raise JournalError(f"entry {entry.id} does not survive encoding: {item.reason}")
        return item

    async def append_raw(self, data: bytes) -> JournalItem:
        """Store one line as a file would hold it (without its newline), valid or not."""
        return self._push(data)

    async def tail(self, start: Position = START) -> AsyncGenerator[JournalItem, None]:
        """Every item from ``start`` on, live (a start past the end reads from 0); never ends by itself."""
        position = _index(check_position(start))
        if position > len(self._items):
            log.warning("tail start %d is past the end (%d); reading from 0", position, len(self._items))
            position = 0
        while True:
            while position < len(self._items):
                item = self._items[position]
                position += 1
                yield item
            await self.store.grew.wait()

    async def read(
        self, start: Position = START, end: Position | None = None, *, interest: Interest | None = None
    ) -> list[JournalItem]:
        """The items from ``start`` up to ``end`` (the end when None); ``interest`` changes nothing
        (the items are decoded already)."""
        if end is not None and end < start:
            raise JournalError(f"invalid range {start}..{end}")
        return self._items[_index(start) : None if end is None else _index(end)]

    async def end_position(self) -> Position:
        """The position after the last item (positions are item indexes)."""
        return Position(0, len(self._items))

    async def load_cursor(self, name: str) -> Position | None:
        """The position saved under ``name``, or None."""
        return self._cursors.get(check_cursor_name(name))

    async def save_cursor(self, name: str, position: Position) -> None:
        """Save ``position`` under ``name`` (in memory, shared with reopened handles)."""
        self._cursors[check_cursor_name(name)] = check_position(position)

    async def load_identity(self) -> str | None:
        """The identity recorded for this journal (shared with reopened handles), or None."""
        return self.store.identity

    async def make_identity(self, made: str) -> str:
        """Record ``made`` as the identity unless one is recorded already; the one that holds."""
        if self.store.identity is None:
            self.store.identity = made
        return self.store.identity

    def identity_location(self) -> str:
        """Where the identity is kept, for messages."""
        return "the memory journal"

    async def aclose(self) -> None:
        """Mark the handle closed; the items stay in the store."""
        self._closed = True
