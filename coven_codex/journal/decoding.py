"""Turning one stored line into a journal item (a record, or a bad line with its reason)."""

from __future__ import annotations

import json

from coven_codex.entries import EntryError, parse_entry
from coven_codex.journal.protocol import BadLine, JournalItem, JournalRecord, Position

_REASON_LIMIT = 200


def _short(text: str) -> str:
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 3] + "..."


def decode_line(
    data: bytes, start: Position, end: Position, *, too_long: bool = False, max_line_bytes: int
) -> JournalItem:
    """Decode one line (without its newline) lying at ``start``..``end``.

    Never raises: anything that is not a valid entry becomes a :class:`BadLine`.
    An entry without an ``id`` gets the deterministic id ``"@<start>"``.
    """
    if too_long or len(data) > max_line_bytes:
        return BadLine(start, end, f"line is longer than the {max_line_bytes}-byte limit")
    if not data.strip():
        return BadLine(start, end, "empty line")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadLine(start, end, f"invalid UTF-8 at byte {exc.start} of the line")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return BadLine(start, end, f"not JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:
        return BadLine(start, end, "not JSON: nested too deeply")
    try:
        entry = parse_entry(value)
    except EntryError as exc:
        return BadLine(start, end, _short(str(exc)))
    if entry.id is None:
        entry = entry.with_id(f"@{start}")
    return JournalRecord(entry, start, end)
