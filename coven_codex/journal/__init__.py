"""The journal (docs/journal-protocol.md): protocol, file backend (the embedded default), memory backend."""

from coven_codex.journal.decoding import decode_line
from coven_codex.journal.file import FileJournal
from coven_codex.journal.memory import MemoryJournal
from coven_codex.journal.protocol import (
    BAD_LINE_CODE,
    START,
    BadLine,
    CursorError,
    CursorMismatch,
    CursorStorageError,
    Durability,
    Journal,
    JournalError,
    JournalItem,
    JournalRecord,
    JournalReplaced,
    Position,
    StorageError,
)

__all__ = [
    "BAD_LINE_CODE",
    "START",
    "BadLine",
    "CursorError",
    "CursorMismatch",
    "CursorStorageError",
    "Durability",
    "FileJournal",
    "Journal",
    "JournalError",
    "JournalItem",
    "JournalRecord",
    "JournalReplaced",
    "MemoryJournal",
    "Position",
    "StorageError",
    "decode_line",
]
