"""Which lines a reader must decode: a prefilter that passes over the others without decoding them.

A daemon started after an outage reads everything written while it was stopped (a backlog of
other programs' traffic can be millions of lines), and decoding a line (JSON, then the entry's
model) costs about a hundred times more than looking at its bytes. An :class:`Interest` names
string values a line must hold to matter to its reader (the daemon: the kinds ingress routes,
and its own sender), and a reader given one decodes only the lines that may hold one of them.

The rule, from how JSON spells a string: a string value equal to a word made of ASCII letters
and ``_`` appears in the line's bytes as that word between double quotes, unless one of its
characters is written as a ``\\u`` escape (no other escape stands for a letter). So a line that
holds none of the quoted words and no ``\\u`` cannot decode to an entry with one of those
values, and is passed over. The test admits more than it must (a quoted word in a text, an
escaped backslash before a ``u``), never less. Lines passed over are not checked either: a
malformed one among them is not reported as a bad line (docs/journal-protocol.md, *Reading
with an interest*).

:meth:`Interest.admits` tests one line; :meth:`Interest.line_starts` finds the admitted lines
of a chunk of whole lines with one search per word over the chunk (C speed), so a chunk where
none occurs costs no work per line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_WORD = re.compile(r"[A-Za-z_]+")
_ESCAPE = b"\\u"
_BACKSLASH = b"\\"
NEWLINE = b"\n"


@dataclass(frozen=True, slots=True)
class Interest:
    """Lines that may hold one of ``words`` as a JSON string value (module docstring)."""

    words: frozenset[str]
    _needles: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.words:
            raise ValueError("an interest needs at least one word")
        for word in self.words:
            if not _WORD.fullmatch(word):
                raise ValueError(f"interest words are ASCII letters and '_' only, not {word!r}")
        object.__setattr__(self, "_needles", tuple(b'"%s"' % word.encode() for word in sorted(self.words)))

    def admits(self, line: bytes) -> bool:
        """Whether ``line`` (one line, without its newline) may hold one of the words."""
        return _ESCAPE in line or any(needle in line for needle in self._needles)

    def line_starts(self, chunk: bytes, end: int) -> list[int]:
        """The offsets where the admitted lines of ``chunk[:end]`` start, ascending.

        ``chunk[:end]`` must be whole lines (it starts a line and ends with a newline).
        """
        needles = self._needles
        if chunk.find(_BACKSLASH, 0, end) >= 0:  # (one memchr: most chunks have no backslash)
            needles = (*needles, _ESCAPE)
        starts: set[int] = set()
        for needle in needles:
            at = chunk.find(needle, 0, end)
            while at >= 0:
                starts.add(chunk.rfind(NEWLINE, 0, at) + 1)
                at = chunk.find(needle, chunk.find(NEWLINE, at, end) + 1, end)
        return sorted(starts)
