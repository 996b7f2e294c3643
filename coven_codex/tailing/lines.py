"""Complete lines out of a byte stream: the pure, synchronous core of the tailer.

:class:`LineSplitter` is fed consecutive chunks of a file and returns the complete
lines they finish. A partial last line is kept until its newline arrives. A line
longer than ``max_line_bytes`` is not buffered: its bytes are skipped up to its
newline and it comes out as one :class:`Line` with ``too_long=True``.
"""

from __future__ import annotations

from dataclasses import dataclass

NEWLINE = b"\n"
DEFAULT_MAX_LINE_BYTES = 16 * 2**20


@dataclass(frozen=True, slots=True)
class Line:
    """One complete line of a file.

    ``data`` is the line without its trailing newline (``b""`` when ``too_long``).
    ``start`` is the byte offset of its first byte; ``end`` the offset just after its
    newline, so resuming from ``end`` continues after this line.
    """

    data: bytes
    start: int
    end: int
    too_long: bool = False


class LineSplitter:
    """Splits chunks that follow each other in a file into complete lines.

    ``offset`` is the file offset of the next byte to feed; ``consumed`` the offset
    just after the last complete line returned (where a reader may resume).
    """

    __slots__ = ("_max_line_bytes", "_offset", "_partial", "_partial_start", "_skipping")

    def __init__(self, offset: int = 0, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be at least 1")
        self._max_line_bytes = max_line_bytes
        self._offset = offset
        self._partial = bytearray()
        self._partial_start = offset
        self._skipping = False

    @property
    def offset(self) -> int:
        """The file offset of the next byte to feed."""
        return self._offset

    @property
    def consumed(self) -> int:
        """The offset just after the last complete line returned (where a reader may resume)."""
        return self._partial_start

    @property
    def pending_bytes(self) -> int:
        """Bytes fed after the last complete line (a partial line, kept or being skipped)."""
        return self._offset - self._partial_start

    def reset(self, offset: int) -> None:
        """Forget any partial line and continue as if the next byte were at ``offset``."""
        self._offset = offset
        self._partial.clear()
        self._partial_start = offset
        self._skipping = False

    def feed(self, chunk: bytes) -> list[Line]:
        """Feed the bytes that follow the previous chunk; returns the lines they complete."""
        if not chunk:
            return []
        lines: list[Line] = []
        base = self._offset
        self._offset += len(chunk)
        first_newline = chunk.find(NEWLINE)
        if first_newline < 0:
            self._keep_partial(chunk)
            return lines
        # The line in progress (kept or skipped) ends at the first newline of this chunk.
        head = chunk[:first_newline]
        line_end = base + first_newline + 1
        if self._skipping or len(self._partial) + len(head) > self._max_line_bytes:
            lines.append(Line(b"", self._partial_start, line_end, too_long=True))
        elif self._partial:
            self._partial += head
            lines.append(Line(bytes(self._partial), self._partial_start, line_end))
        else:
            lines.append(Line(head, self._partial_start, line_end))
        self._partial.clear()
        self._skipping = False
        # Every other complete line of the chunk, then whatever follows the last newline.
        pieces = chunk[first_newline + 1 :].split(NEWLINE)
        tail = pieces.pop()
        start = line_end
        limit = self._max_line_bytes
        for piece in pieces:
            end = start + len(piece) + 1
            if len(piece) > limit:
                lines.append(Line(b"", start, end, too_long=True))
            else:
                lines.append(Line(piece, start, end))
            start = end
        self._partial_start = start
        self._keep_partial(tail)
        return lines

    def _keep_partial(self, data: bytes) -> None:
        if self._skipping or not data:
            return
        if len(self._partial) + len(data) > self._max_line_bytes:
            self._partial.clear()
            self._skipping = True
            return
        self._partial += data
