"""The journal contract (docs/journal-protocol.md): an ordered, append-only log of chat entries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Protocol, runtime_checkable

from pydantic import PlainSerializer, PlainValidator

from coven_codex.entries import DEFAULT_CONVERSATION, BaseEntry, ErrorEntry
from coven_codex.journal.interest import Interest


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A place in a journal: opaque and ordered; only the backend that made it interprets it.

    Outside a backend a position is compared, stored, printed and passed back, never computed
    with. The file backend uses ``major`` for the segment and ``minor`` for the byte offset
    in it; a stream backend uses its entry id (milliseconds, sequence). :data:`START` lies
    before the first entry of every journal.
    """

    major: int
    minor: int

    def __post_init__(self) -> None:
        for part in (self.major, self.minor):
            if isinstance(part, bool) or not isinstance(part, int) or part < 0:
                raise CursorError(f"invalid journal position ({self.major!r}, {self.minor!r}): parts are integers >= 0")

    def __str__(self) -> str:
        return str(self.minor) if self.major == 0 else f"{self.major}-{self.minor}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """The position whose text form is ``text`` (``"123"`` or ``"MAJOR-MINOR"``).

        Raises :class:`CursorError` naming the text when it is not a position.
        """
        major, sep, minor = text.strip().partition("-")
        try:
            return cls(int(major), int(minor)) if sep else cls(0, int(major))
        except ValueError:
            raise CursorError(
                f"invalid journal position {text[:40]!r}: write it as printed by coven-codex"
                " (a number, or two numbers joined by '-')"
            ) from None


START = Position(0, 0)
"""Before the first entry, in every backend."""


def _stored_position(value: object) -> Position:
    if isinstance(value, Position):
        return value
    if isinstance(value, int | str) and not isinstance(value, bool):
        return Position.parse(str(value))  # an integer: a byte offset saved by an older coven-codex
    raise ValueError(f"not a journal position: {value!r}")


StoredPosition = Annotated[Position, PlainValidator(_stored_position), PlainSerializer(str, return_type=str)]
"""A :class:`Position` in a pydantic model: saved as its text form, read from text or an old integer."""

Durability = Literal["always", "batched", "never"]

BAD_LINE_CODE = "BAD_LINE"
MAX_CURSOR_NAME = 80


class JournalError(Exception):
    """A journal operation failed; the message says what happened and what to do."""


class CursorError(JournalError):
    """A cursor name is invalid or a saved cursor cannot be read."""


class StorageError(JournalError):
    """Writing the journal or a cursor to disk failed (disk full, quota, read-only, I/O error).

    Nothing half-written is left behind (a torn line is cut off again, a cursor keeps its old
    value); the message names the file and the cause.
    """


class CursorStorageError(CursorError, StorageError):
    """Saving a cursor failed for lack of storage (it keeps its old value)."""


class JournalReplaced(JournalError):
    """The journal a reader was following was replaced or truncated under it.

    Raised by a tail that does not follow replacements (``FileJournal(follow_replacement=False)``)
    instead of yielding the first item of the new content: positions of the old and the new
    file must never be mixed. A new ``tail(0)`` reads the new content.
    """


class CursorMismatch(CursorError):
    """A saved cursor belongs to another journal file than the one now at the journal's path.

    The journal was rotated, replaced or truncated since the cursor was saved. ``previous`` is
    the file the cursor belongs to when it was found beside the journal (renamed by a
    rotation), else None.
    """

    def __init__(self, message: str, *, name: str, position: Position, file: str | None, previous: Path | None) -> None:
        super().__init__(message)
        self.name = name
        self.position = position
        self.file = file
        self.previous = previous


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """An entry read from (or appended to) the journal, with where it lies."""

    entry: BaseEntry
    """Always has an ``id``."""
    start: Position
    end: Position
    """Resume from here to continue after this record."""


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that is not a valid entry; readers report it and go on."""

    start: Position
    end: Position
    reason: str

    def to_error_entry(self, conversation: str | None = None) -> ErrorEntry:
        """An ``error`` entry (code ``BAD_LINE``) naming the line's position.

        Its id is derived from the position, so reporting the same line twice
        gives the same entry.
        """
        return ErrorEntry(
            id=f"bad-line@{self.start}",
            code=BAD_LINE_CODE,
            text=f"journal line at position {self.start} was skipped: {self.reason}",
            hint="Fix the program that wrote it: every line must be one JSON chat entry"
            " (see docs/journal-protocol.md).",
            conversation=conversation or DEFAULT_CONVERSATION,
        )


JournalItem = JournalRecord | BadLine


@runtime_checkable
class Journal(Protocol):
    """An append-only journal of chat entries, addressed by positions; the file and memory journals implement it."""

    async def append(self, entry: BaseEntry) -> JournalRecord:
        """Append ``entry`` (an ``id`` is assigned when it has none) and return its record."""
        ...

    def tail(self, start: Position = START) -> AsyncIterator[JournalItem]:
        """Every item from ``start`` on, live. Never ends by itself."""
        ...

    async def read(
        self, start: Position = START, end: Position | None = None, *, interest: Interest | None = None
    ) -> list[JournalItem]:
        """The items lying between ``start`` and ``end`` (the current end when None).

        With ``interest``, the backend may leave out lines the interest does not admit, undecoded
        (:mod:`coven_codex.journal.interest`); it never leaves out one it admits.
        """
        ...

    async def end_position(self) -> Position:
        """The position just after the last complete item."""
        ...

    async def load_cursor(self, name: str) -> Position | None:
        """The position saved under ``name``, or None if there is none."""
        ...

    async def save_cursor(self, name: str, position: Position) -> None:
        """Save ``position`` under ``name``, atomically and durably."""
        ...

    async def aclose(self) -> None:
        """Release the journal's resources; it is not used afterwards."""
        ...


def check_cursor_name(name: str) -> str:
    """Cursor names: 1 to 80 printable characters (stored escaped, any text is safe)."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_CURSOR_NAME or not name.isprintable():
        raise CursorError(f"invalid cursor name {name!r}: use 1 to {MAX_CURSOR_NAME} printable characters")
    return name


def check_position(position: Position) -> Position:
    """Return ``position`` if it is a :class:`Position`, else raise :class:`CursorError`."""
    if not isinstance(position, Position):
        raise CursorError(f"invalid cursor position {position!r}: expected a journal Position")
    return position
