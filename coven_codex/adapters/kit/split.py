"""Cutting a long message at a platform's limit without losing, repeating or breaking anything.

:func:`split_message` returns :class:`Part` objects whose ``body`` strings are consecutive
slices of the text: joined, they are the text, character for character. A cut prefers, in this
order, a paragraph boundary, a line boundary and a space in the last two thirds of the room a
part has, then any line boundary, and only then the limit itself. A cut inside a fenced code
block closes the fence at the end of the part (``suffix``) and reopens it, with its info string,
at the start of the next (``prefix``), so every part renders as code where the text did.
Each part's ``text`` (prefix + body + suffix) is at most ``limit`` characters.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

MIN_ROOM = 8
"""The fewest body characters a part must be able to hold; smaller limits are refused."""

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})([^\n]*)")


@dataclass(frozen=True, slots=True)
class Part:
    """One message of a split text: ``prefix`` (a reopened fence), ``body`` (a slice of the text), ``suffix``."""

    prefix: str
    body: str
    suffix: str

    @property
    def text(self) -> str:
        """What to post."""
        return self.prefix + self.body + self.suffix


@dataclass(frozen=True, slots=True)
class _Line:
    start: int
    end: int
    """Just after the line's newline (or the end of the text)."""
    opener: str | None
    """The opening fence line (without its newline) when this line lies inside a fenced block."""
    marker: str | None
    fence_line: bool


def _scan(text: str) -> list[_Line]:
    lines: list[_Line] = []
    opener: str | None = None
    marker: str | None = None
    start = 0
    while True:
        newline = text.find("\n", start)
        end = len(text) if newline < 0 else newline + 1
        content = text[start:end].removesuffix("\n")
        match = _FENCE.fullmatch(content)
        if opener is None or marker is None:
            opens = match is not None and not (match.group(1)[0] == "`" and "`" in match.group(2))
            lines.append(_Line(start, end, None, None, opens))
            if match is not None and opens:
                opener, marker = content.lstrip(" "), match.group(1)
        else:
            closes = (
                match is not None
                and match.group(1)[0] == marker[0]
                and len(match.group(1)) >= len(marker)
                and not match.group(2).strip()
            )
            lines.append(_Line(start, end, opener, marker, closes))
            if closes:
                opener = marker = None
        if end >= len(text):
            return lines
        start = end


def split_message(text: str, limit: int) -> list[Part]:
    """``text`` cut into parts of at most ``limit`` characters each (see the module docstring).

    Raises ValueError when ``limit`` is below :data:`MIN_ROOM`. When a fence's marker is too long to
    close and reopen within the limit, the text is cut as plain text.
    """
    lines = _scan(text)
    starts = [line.start for line in lines]
    markers = [len(line.marker) for line in lines if line.marker]
    reserve = 1 + max(markers) if markers else 0
    if limit < MIN_ROOM:
        raise ValueError(f"a message limit of {limit} characters is too small to split into")
    if limit - 2 * reserve < MIN_ROOM:  # fences too long to repeat in so little room: cut as plain text
        lines = [_Line(line.start, line.end, None, None, False) for line in lines]
        reserve = 0

    def line_at(position: int) -> _Line:
        return lines[max(0, bisect.bisect_right(starts, position) - 1)]

    def prefix_at(position: int) -> str:
        line = line_at(position)
        if line.opener is None or line.marker is None:
            return ""
        opener = line.opener if len(line.opener) + 1 + reserve <= limit // 2 else line.marker
        return opener + "\n"

    parts: list[Part] = []
    start = 0
    while True:
        prefix = prefix_at(start) if start else ""
        if len(prefix) + len(text) - start <= limit:
            parts.append(Part(prefix, text[start:], ""))
            return parts
        cut = _choose_cut(text, start, limit - len(prefix) - reserve, line_at)
        body = text[start:cut]
        line = line_at(cut)
        suffix = ""
        if line.opener is not None and line.marker is not None:
            suffix = ("" if body.endswith("\n") else "\n") + line.marker
        parts.append(Part(prefix, body, suffix))
        start = cut


def _choose_cut(text: str, start: int, room: int, line_at: Callable[[int], _Line]) -> int:
    window = text[start : start + room]
    least = max(1, room // 3)
    for separator in ("\n\n", "\n", " "):
        found = window.rfind(separator)
        if found >= 0 and found + len(separator) >= least:
            return start + found + len(separator)
    found = window.rfind("\n")
    if found >= 0:
        return start + found + 1
    cut = start + room
    line = line_at(cut)
    if line.fence_line and line.start > start:
        return line.start  # never cut a fence line in two
    return cut
