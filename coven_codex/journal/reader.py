"""Reading a segmented file journal forward from a position: the one reader behind ``tail`` and ``read``.

:class:`SegmentReader` is synchronous and never waits: :meth:`SegmentReader.catch_up` yields
every item readable now, crossing roll-overs (a segment is finished once the journal's path
holds a later one, see :mod:`coven_codex.journal.segments`), and returns when it has read
everything; the tail then waits for a change notification on the journal's path and calls it
again.

Given an :class:`~coven_codex.journal.interest.Interest`, the reader decodes only the lines it
admits: each chunk's whole lines are searched for the interest's words at once and only the
lines holding one are split out and decoded (the rest are passed over without a Python step
per line); a line that starts in one chunk and ends in a later one goes through the splitter
as usual, and is decoded whole if the interest admits it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from coven_codex.journal.decoding import decode_line
from coven_codex.journal.interest import NEWLINE, Interest
from coven_codex.journal.protocol import START, JournalError, JournalItem, Position
from coven_codex.journal.segments import FINGERPRINT_BYTES, SegmentLayout, fingerprint, is_header
from coven_codex.tailing import LineSplitter, TailNotice, TailNoticeKind
from coven_codex.tailing.notices import NoticeCallback, report

READ_CHUNK: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class Replacement:
    """The journal's path was replaced or truncated by hand (not a roll-over) while it was read."""

    kind: TailNoticeKind
    """``REPLACED`` or ``TRUNCATED``."""


class SegmentReader:
    """Reads the items of a segmented journal from ``start`` on; see the module docstring.

    ``follow``: on a hand replacement or truncation of the journal's path, go on with the new
    content (True) or stop there (False; :attr:`replaced` tells it happened and the reader reads
    nothing more). ``interest``: decode only the lines it admits (module docstring).
    """

    def __init__(
        self,
        layout: SegmentLayout,
        start: Position,
        *,
        max_line_bytes: int,
        on_notice: NoticeCallback | None,
        follow: bool,
        interest: Interest | None = None,
    ) -> None:
        if start == START:
            start = layout.oldest()  # "from the start": from the oldest entry still kept
        self._layout = layout
        self._start = start
        self.segment = start.major
        self._max_line_bytes = max_line_bytes
        self._on_notice = on_notice
        self._follow = follow
        self._interest = interest
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._sealed = False
        self._opened_once = False
        self._splitter = LineSplitter(start.minor, max_line_bytes=max_line_bytes)
        self.replaced: Replacement | None = None
        """Set when the path was replaced or truncated by hand; cleared by the consumer."""
        self.stopped = False
        """A replacement stopped a reader that does not follow them."""
        self.file: str | None = None
        """The fingerprint of the file being read (the hash of its first line), once known."""

    @property
    def position(self) -> Position:
        """Where the next item starts (after the last complete item read)."""
        return Position(self.segment, self._splitter.consumed)

    def close(self) -> None:
        """Release the open segment file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _notice(self, kind: TailNoticeKind, message: str, offset: int | None) -> None:
        report(TailNotice(kind, self._layout.path, message, offset), self._on_notice)

    def _adopt(self, fd: int, sealed: bool) -> None:
        st = os.fstat(fd)
        offset = 0
        if not self._opened_once:
            self._opened_once = True
            offset = self._start.minor if self.segment == self._start.major else 0
            if st.st_size < offset:
                if sealed:
                    os.close(fd)
                    raise JournalError(
                        f"position {self._start} lies past the end of segment {self.segment} of the journal"
                        f" {self._layout.path} ({st.st_size} bytes); use a position this journal gave"
                    )
                self._notice(
                    TailNoticeKind.TRUNCATED,
                    f"the file is shorter ({st.st_size} bytes) than the position to resume from"
                    f" ({offset}); it was truncated or replaced, reading it from the start",
                    0,
                )
                offset = 0
        self.close()
        self._fd = fd
        self._identity = (st.st_dev, st.st_ino)
        self._sealed = sealed
        self._splitter.reset(offset)
        self.file = fingerprint(os.pread(fd, FINGERPRINT_BYTES, 0))

    def _open(self) -> bool:
        fd, sealed = self._layout.open_segment(self.segment, self.position)
        if fd < 0:
            return False
        self._adopt(fd, sealed)
        return True

    def _drain(self) -> Iterator[list[JournalItem]]:
        fd = self._fd
        assert fd is not None
        splitter = self._splitter
        segment = self.segment
        while True:
            offset = splitter.offset
            chunk = os.pread(fd, READ_CHUNK, offset)
            if not chunk:
                return
            whole = chunk.rfind(NEWLINE) + 1 if self._interest is not None and not splitter.pending_bytes else 0
            if whole:
                items = self._sift(chunk, whole, offset, segment)
                splitter.reset(offset + whole)
                if len(chunk) < READ_CHUNK:
                    splitter.feed(chunk[whole:])  # the file's partial last line: kept (it completes no line)
                if items:
                    yield items
                if len(chunk) < READ_CHUNK:
                    return
                continue  # the next read starts with the line this chunk cut
            items = []
            for line in splitter.feed(chunk):
                if self._interest is not None and not line.too_long and not self._interest.admits(line.data):
                    continue  # (a line longer than a read, or the rest of one cut by the previous read)
                if line.start == 0:
                    if segment > 0 and not line.too_long and is_header(line.data):
                        continue
                    if self.file is None and not line.too_long:
                        self.file = fingerprint(line.data + b"\n")
                items.append(
                    decode_line(
                        line.data,
                        Position(segment, line.start),
                        Position(segment, line.end),
                        too_long=line.too_long,
                        max_line_bytes=self._max_line_bytes,
                    )
                )
            if items:
                yield items
            if len(chunk) < READ_CHUNK:
                return

    def _sift(self, chunk: bytes, whole: int, offset: int, segment: int) -> list[JournalItem]:
        """The items of the lines of ``chunk[:whole]`` (whole lines, read at ``offset``) that the
        interest admits; the others are passed over undecoded."""
        assert self._interest is not None
        if offset == 0 and self.file is None:
            self.file = fingerprint(chunk)
        items: list[JournalItem] = []
        for start in self._interest.line_starts(chunk, whole):
            stop = chunk.find(NEWLINE, start, whole)
            data = chunk[start:stop]
            if offset + start == 0 and segment > 0 and is_header(data):
                continue
            items.append(
                decode_line(
                    data,
                    Position(segment, offset + start),
                    Position(segment, offset + stop + 1),
                    max_line_bytes=self._max_line_bytes,
                )
            )
        return items

    def _drop_partial(self, why: str) -> None:
        pending = self._splitter.pending_bytes
        if pending:
            self._notice(
                TailNoticeKind.DROPPED_PARTIAL,
                f"{pending} bytes of an unterminated last line at {self.position} were abandoned because {why}",
                self._splitter.consumed,
            )

    def catch_up(self) -> Iterator[list[JournalItem]]:
        """Every item readable now, in batches, across roll-overs; returns when there is nothing more."""
        while not self.stopped:
            if self._fd is None and not self._open():
                return  # no journal yet
            yield from self._drain()
            try:
                st = os.stat(self._layout.path)
            except (FileNotFoundError, NotADirectoryError):
                return  # removed: keep the old file until a new one appears
            assert self._fd is not None
            if (st.st_dev, st.st_ino) == self._identity:
                size = os.fstat(self._fd).st_size
                if size >= self._splitter.offset:
                    return  # read to the end of the active segment
                self._drop_partial("the file was truncated")
                self._notice(
                    TailNoticeKind.TRUNCATED,
                    f"the file shrank to {size} bytes below the read offset {self._splitter.offset};"
                    " reading it again from the start",
                    0,
                )
                if not self._replaced(TailNoticeKind.TRUNCATED):
                    return
                self._splitter.reset(0)
                self.file = None
                continue
            active = self._layout.active()
            if active is None:
                return
            number, _identity = active
            if number > self.segment:
                # A roll-over sealed our segment: every write to it happened before the path
                # changed, so one more read finishes it.
                yield from self._drain()
                self._drop_partial(f"segment {self.segment} was sealed")
                self.close()
                self.segment += 1
                self._splitter.reset(0)
                continue
            if self._sealed:
                return  # a sealed segment's reader meets the path of a crash-left link: nothing to do
            # Another file took the path by hand (a rotation or a replacement, not a roll-over).
            yield from self._drain()
            self._drop_partial("the file was replaced")
            self._notice(TailNoticeKind.REPLACED, "another file took this path; following it from 0", 0)
            if not self._replaced(TailNoticeKind.REPLACED):
                return
            self.close()
            self.segment = number
            if not self._open():
                return

    def _replaced(self, kind: TailNoticeKind) -> bool:
        """Record a hand replacement; whether to go on reading the new content."""
        self.replaced = Replacement(kind)
        if not self._follow:
            self.stopped = True
            return False
        return True
