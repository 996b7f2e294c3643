"""The journal (docs/journal-protocol.md): protocol, file backend (the embedded default), memory backend."""

from coven_codex.journal.decoding import decode_line
from coven_codex.journal.file import FileJournal
from coven_codex.journal.memory import MemoryJournal
from coven_codex.journal.protocol import (
    BAD_LINE_CODE,
    BadLine,
    CursorError,
    Durability,
    Journal,
    JournalError,
    JournalItem,
    JournalRecord,
    Position,
)

__all__ = [
    "BAD_LINE_CODE",
    "BadLine",
    "CursorError",
    "Durability",
    "FileJournal",
    "Journal",
    "JournalError",
    "JournalItem",
    "JournalRecord",
    "MemoryJournal",
    "Position",
    "decode_line",
]
