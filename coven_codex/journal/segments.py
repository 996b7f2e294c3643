"""Segments of the file journal: where each lies, which is active, roll-over and compaction.

Layout (docs/journal-protocol.md, *Segments*): the journal's own path (``chat.jsonl``) is always
the **active** segment, the only one appended to. Every other segment is sealed and lies in
``chat.jsonl.d/<number, 10 digits>.jsonl``. A segment other than 0 starts with a header line
``{"kind": "segment", "segment": N, ...}`` that gives its number; a file without one is segment 0
(every journal written before segments existed). A position is ``Position(segment, byte offset)``.

A roll-over happens under the ``flock`` of the active segment: the file is hard-linked to its
sealed name, then a new file holding only the next header is renamed over the journal's path.
The path therefore always exists, an appender that waited for the lock sees that its file is no
longer at the path and reopens it, and a reader that sees a higher number at the path knows its
segment is complete. A crash between the two steps leaves the sealed name and the path on the
same file, which is harmless (the next roll-over goes on from there).

Compaction removes (or moves to an archive folder) sealed segments lying wholly behind every
saved cursor, after recording what it removed in ``chat.jsonl.d/compacted.json``, so that a
reader asking for a removed segment is told so (:class:`SegmentRemoved`) instead of silently
starting over.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from coven_codex.journal.atomic import atomic_write, fsync_directory, write_all
from coven_codex.journal.protocol import START, JournalError, Position

SEGMENT_DIGITS: Final = 10
HEADER_KIND: Final = "segment"
HEADER_PREFIX: Final = b'{"kind": "segment", "segment": '
HEADER_LIMIT: Final = 512
"""A header line is shorter than this; the first line is read with one ``pread`` of this size."""
FINGERPRINT_BYTES: Final = 4096
COMPACTED_NAME: Final = "compacted.json"
COMPACT_LOCK_NAME: Final = "compact.lock"
FILE_MODE: Final = 0o600

Retention = Literal["keep", "archive", "delete"]
RETENTIONS: Final = ("keep", "archive", "delete")


class SegmentRemoved(JournalError):
    """A position lies in a segment that compaction removed; the message says where it went and what to do."""

    def __init__(self, message: str, *, segment: int, oldest: Position) -> None:
        super().__init__(message)
        self.segment = segment
        self.oldest = oldest
        """The oldest position the journal still holds."""


class Compacted(BaseModel):
    """``compacted.json``: every segment up to ``through`` was removed by compaction."""

    model_config = ConfigDict(extra="ignore")

    through: int
    action: Literal["archive", "delete"]
    archive: str | None = None
    at: str


@dataclass(frozen=True, slots=True)
class CompactReport:
    """What a compaction did (or, for a dry run, would do)."""

    removed: list[int]
    """Segment numbers removed (archived or deleted), oldest first."""
    action: Literal["archive", "delete"]
    archive: Path | None
    held_by: str | None
    """The cursor that keeps the oldest segment still kept (None: no cursor limits it)."""
    active: int
    """The number of the active segment."""
    message: str
    """A sentence for people saying what happened."""


def fingerprint(head: bytes) -> str | None:
    """The identity of a journal file: a hash of its first line (at most ``FINGERPRINT_BYTES``).

    ``head`` is the start of the file. None while the file has no complete first line. Lines
    are never rewritten, so the fingerprint of a file never changes; a file that replaced it
    (rotation) or refilled it (truncation) starts with another line: every entry has a unique
    id (``FileJournal.append`` assigns one) and a time, and so has every segment header.
    """
    head = head[:FINGERPRINT_BYTES]
    newline = head.find(b"\n")
    if newline >= 0:
        head = head[: newline + 1]
    elif len(head) < FINGERPRINT_BYTES:
        return None
    return hashlib.sha256(head).hexdigest()[:32]


def header_line(segment: int) -> bytes:
    """The first line of segment ``segment`` (>= 1): its number, a unique id and its creation time."""
    ts = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = json.dumps({"id": f"segment-{segment}-{secrets.token_hex(8)}", "ts": ts, "sender": "coven-codex"})
    return HEADER_PREFIX + str(segment).encode() + b", " + body[1:].encode() + b"\n"


def parse_header(head: bytes) -> tuple[int, float | None] | None:
    """The number and creation time (epoch seconds) a segment header gives, or None if ``head`` has none.

    ``head`` is the start of the file. Segment 0 has no header: its time is that of its
    first entry's ``ts`` when it has one (:func:`first_line_time`).
    """
    if not head.startswith(HEADER_PREFIX):
        return None
    newline = head.find(b"\n")
    if newline < 0:
        return None
    try:
        value = json.loads(head[:newline])
        number = value["segment"]
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            return None
    except (ValueError, KeyError, TypeError):
        return None
    return number, parse_time(value.get("ts"))


def parse_time(value: object) -> float | None:
    """Epoch seconds of an entry's ``ts`` text, or None when it is missing or not a time."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def first_line_time(head: bytes) -> float | None:
    """The ``ts`` of the first line of ``head`` (the start of a file), if it is a JSON object with one."""
    newline = head.find(b"\n")
    if newline < 0:
        return None
    try:
        value = json.loads(head[:newline])
    except ValueError:
        return None
    return parse_time(value.get("ts")) if isinstance(value, dict) else None


def is_header(data: bytes) -> bool:
    """Whether the line ``data`` (without its newline) is a segment header."""
    return data.startswith(HEADER_PREFIX) and parse_header(data + b"\n") is not None


class SegmentLayout:
    """The files of one segmented journal (see the module docstring); stateless, safe in any thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.directory = path.with_name(path.name + ".d")

    def sealed_path(self, segment: int) -> Path:
        """Where sealed segment ``segment`` lies."""
        return self.directory / f"{segment:0{SEGMENT_DIGITS}d}.jsonl"

    def number_of(self, fd: int) -> int:
        """The segment number of the open file ``fd`` (0 when it has no header)."""
        header = parse_header(os.pread(fd, HEADER_LIMIT, 0))
        return 0 if header is None else header[0]

    def active(self) -> tuple[int, tuple[int, int]] | None:
        """The active segment's number and (device, inode), or None while the journal does not exist."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            st = os.fstat(fd)
            return self.number_of(fd), (st.st_dev, st.st_ino)
        finally:
            os.close(fd)

    def sealed_numbers(self) -> list[int]:
        """The numbers of the sealed segments present in the segment folder, ascending."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        numbers = []
        for name in names:
            stem, dot, extension = name.partition(".")
            if dot and extension == "jsonl" and len(stem) == SEGMENT_DIGITS and stem.isdigit():
                numbers.append(int(stem))
        return sorted(numbers)

    def compacted(self) -> Compacted | None:
        """What compaction removed so far, or None if it never removed anything."""
        try:
            raw = (self.directory / COMPACTED_NAME).read_bytes()
        except FileNotFoundError:
            return None
        try:
            return Compacted.model_validate_json(raw)
        except ValidationError:
            raise JournalError(
                f"{self.directory / COMPACTED_NAME} is corrupt; it records which segments compaction removed:"
                f' restore it, or write {{"through": <last removed segment>, "action": "delete", "at": ""}}'
            ) from None

    def oldest(self) -> Position:
        """The first position the journal still holds (:data:`START` until compaction removed segment 0)."""
        compacted = self.compacted()
        return START if compacted is None else Position(compacted.through + 1, 0)

    def open_segment(self, segment: int, position: Position) -> tuple[int, bool]:
        """Open segment ``segment`` for reading: ``(fd, sealed)``; ``position`` names it in errors.

        Raises :class:`SegmentRemoved` for a segment compaction removed, :class:`JournalError`
        for one that never existed. Returns ``(-1, False)`` while the journal does not exist.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = -1
        if fd >= 0:
            number = self.number_of(fd)
            if number == segment:
                return fd, False
            os.close(fd)
        else:
            number = None
        try:
            return os.open(self.sealed_path(segment), os.O_RDONLY | os.O_CLOEXEC), True
        except FileNotFoundError:
            pass
        if number is None and segment == 0:
            return -1, False
        raise self.missing(segment, position, number)

    def missing(self, segment: int, position: Position, active: int | None) -> JournalError:
        """The error for a position in segment ``segment``, which is neither active nor sealed."""
        compacted = self.compacted()
        oldest = self.oldest()
        if compacted is not None and segment <= compacted.through:
            where = (
                f"archived to {compacted.archive}" if compacted.action == "archive" and compacted.archive else "deleted"
            )
            return SegmentRemoved(
                f"position {position} lies in segment {segment} of the journal {self.path}, which compaction"
                f" {where} ({compacted.at}); the entries after that position are no longer in the journal."
                f" To read them, put the segment back as {self.sealed_path(segment)}; to skip them, resume"
                f" from {oldest}, the oldest position the journal still holds",
                segment=segment,
                oldest=oldest,
            )
        return JournalError(
            f"position {position} names segment {segment}, which the journal {self.path} does not have"
            f" (its active segment is {active if active is not None else 'missing'}); use a position this"
            " journal gave, or read it from its start"
        )

    # -- roll-over (the caller holds the active segment's flock) ------------------------------

    def roll_over(self, fd: int, number: int, *, durable: bool) -> tuple[int, int]:
        """Seal the active segment ``fd`` (number ``number``) and put segment ``number + 1`` at the path.

        Returns the new file's descriptor (opened for appending) and its size (its header). The
        caller holds ``fd``'s exclusive lock and has checked that ``fd`` is the file at the path.
        """
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            write_all(fd, b"\n")  # a torn last line is ended, so the sealed segment reads to its end
        if not self.directory.is_dir():
            self.directory.mkdir(mode=0o700, exist_ok=True)
            if durable:
                fsync_directory(self.path.parent)
        sealed = self.sealed_path(number)
        st = os.fstat(fd)
        try:
            os.link(self.path, sealed)
        except FileExistsError:
            existing = os.stat(sealed)
            if (existing.st_dev, existing.st_ino) != (st.st_dev, st.st_ino):
                raise JournalError(
                    f"cannot seal segment {number} of {self.path}: {sealed} exists and is another file;"
                    " move it away (it is not part of this journal)"
                ) from None
        if durable:
            os.fsync(fd)
            fsync_directory(self.directory)
        header = header_line(number + 1)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.segment")
        new = os.open(temporary, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        try:
            write_all(new, header)
            if durable:
                os.fsync(new)
            os.rename(temporary, self.path)
        except BaseException:
            os.close(new)
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
        if durable:
            fsync_directory(self.path.parent)
        return new, len(header)

    # -- compaction ----------------------------------------------------------------------------

    def compact(
        self,
        cursors: dict[str, Position],
        *,
        action: Literal["archive", "delete"],
        archive: Path | None,
        dry_run: bool = False,
    ) -> CompactReport:
        """Remove the sealed segments lying wholly behind every cursor in ``cursors`` (name: position).

        ``archive`` (default ``<journal>.archive/``) receives them when ``action`` is
        ``"archive"``. Several compactions at once are serialised by a lock in the segment folder.
        """
        target = (archive or self.path.with_name(self.path.name + ".archive")) if action == "archive" else None
        current = self.active()
        active = current[0] if current is not None else 0
        if not self.directory.is_dir():
            return CompactReport([], action, target, None, active, "nothing to compact: the journal has one segment")
        lock = os.open(self.directory / COMPACT_LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._compact_locked(cursors, action, target, active, dry_run)
        finally:
            os.close(lock)

    def _compact_locked(
        self,
        cursors: dict[str, Position],
        action: Literal["archive", "delete"],
        target: Path | None,
        active: int,
        dry_run: bool,
    ) -> CompactReport:
        if not cursors:
            return CompactReport(
                [],
                action,
                target,
                None,
                active,
                "nothing compacted: no reader has saved a cursor, so no segment is known to be read",
            )
        held_by, held = min(cursors.items(), key=lambda item: (item[1], item[0]))
        limit = min(held.major, active)
        removable = [number for number in self.sealed_numbers() if number < limit]
        if not removable:
            return CompactReport(
                [],
                action,
                target,
                held_by,
                active,
                f"nothing to compact: cursor {held_by!r} is at {held}, in the oldest segment kept",
            )
        verb = "archive" if action == "archive" else "delete"
        if dry_run:
            return CompactReport(
                removable,
                action,
                target,
                held_by,
                active,
                f"would {verb} segment(s) {removable[0]}-{removable[-1]}; cursor {held_by!r} at {held} holds the rest",
            )
        previous = self.compacted()
        through = max(removable[-1], previous.through if previous is not None else -1)
        record = Compacted(
            through=through,
            action=action,
            archive=str(target) if target is not None else None,
            at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        if target is not None:
            target.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Recorded first: a reader that finds a segment missing always finds why.
        atomic_write(self.directory / COMPACTED_NAME, record.model_dump_json().encode() + b"\n")
        for number in removable:
            source = self.sealed_path(number)
            if target is None:
                with contextlib.suppress(FileNotFoundError):
                    source.unlink()
            else:
                destination = target / f"{self.path.name}.{number:0{SEGMENT_DIGITS}d}.jsonl"
                with contextlib.suppress(FileNotFoundError):
                    shutil.move(source, destination)
        fsync_directory(self.directory)
        done = "archived to " + str(target) if target is not None else "deleted"
        return CompactReport(
            removable,
            action,
            target,
            held_by,
            active,
            f"{done}: segment(s) {removable[0]}-{removable[-1]}; cursor {held_by!r} at {held} holds the rest",
        )
