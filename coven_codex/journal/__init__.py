"""The journal (docs/journal-protocol.md): protocol, file backend (the embedded default), memory backend."""

from coven_codex.journal.decoding import decode_line
from coven_codex.journal.file import FileJournal
from coven_codex.journal.interest import Interest
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
from coven_codex.journal.segments import CompactReport, SegmentRemoved

__all__ = [
    "BAD_LINE_CODE",
    "START",
    "BadLine",
    "CompactReport",
    "CursorError",
    "CursorMismatch",
    "CursorStorageError",
    "Durability",
    "FileJournal",
    "Interest",
    "Journal",
    "JournalError",
    "JournalItem",
    "JournalRecord",
    "JournalReplaced",
    "MemoryJournal",
    "Position",
    "SegmentRemoved",
    "StorageError",
    "decode_line",
]
