"""Stream ids as journal positions: ``MS-SEQ`` is ``Position(MS, SEQ)``; ``START`` is ``0-0``."""

from __future__ import annotations

from coven_codex.journal.protocol import JournalError, Position


def stream_id(position: Position) -> str:
    """The stream id text of ``position`` (``"MS-SEQ"``)."""
    return f"{position.major}-{position.minor}"


def position_of(raw: bytes | str) -> Position:
    """The position of a stream id as Redis returns it."""
    text = raw.decode("ascii") if isinstance(raw, bytes) else raw
    ms, sep, seq = text.partition("-")
    if not sep or not ms.isdigit() or not seq.isdigit():
        raise JournalError(f"Redis returned {text[:60]!r} where a stream id was expected")
    return Position(int(ms), int(seq))
