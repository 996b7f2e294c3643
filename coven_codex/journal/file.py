"""The file journal: JSONL, appended under an exclusive lock, tailed by the line tailer."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import threading
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Final

from coven_codex.entries import BaseEntry, new_entry_id
from coven_codex.journal.atomic import fsync_directory
from coven_codex.journal.cursors import FileCursorStore
from coven_codex.journal.decoding import decode_line
from coven_codex.journal.group_commit import GroupCommit
from coven_codex.journal.protocol import (
    START,
    CursorMismatch,
    Durability,
    JournalError,
    JournalItem,
    JournalRecord,
    JournalReplaced,
    Position,
    StorageError,
    check_position,
)
from coven_codex.tailing import DEFAULT_MAX_LINE_BYTES, LineSplitter, TailNotice, TailNoticeKind, tail_lines
from coven_codex.tailing.notices import NoticeCallback

log = logging.getLogger(__name__)

DURABILITIES: Final = ("always", "batched", "never")
READ_CHUNK: Final = 1 << 20
FILE_MODE: Final = 0o600
_SYNC = getattr(os, "fdatasync", os.fsync)
DAEMON_LOCK_NAME: Final = "daemon.lock"
FINGERPRINT_BYTES: Final = 4096
ROTATED_SCAN_LIMIT: Final = 10_000


def encode_entry(entry: BaseEntry, max_line_bytes: int) -> bytes:
    """The entry as one newline-terminated UTF-8 line; refuses lines readers would reject."""
    line = entry.to_json().encode("utf-8") + b"\n"
    if len(line) - 1 > max_line_bytes:
        raise JournalError(
            f"entry {entry.id} is {len(line) - 1} bytes long, over the journal's {max_line_bytes}-byte"
            " line limit; shorten its text or raise max_line_bytes for every reader and writer"
        )
    return line


def with_id(entry: BaseEntry) -> BaseEntry:
    """``entry``, given a fresh id when it has none."""
    return entry if entry.id else entry.with_id(new_entry_id())


def fingerprint(head: bytes) -> str | None:
    """The identity of a journal file: a hash of its first line (at most ``FINGERPRINT_BYTES``).

    ``head`` is the start of the file. None while the file has no complete first line. Lines
    are never rewritten, so the fingerprint of a file never changes; a file that replaced it
    (rotation) or refilled it (truncation) starts with another line: every entry has a unique
    id (``FileJournal.append`` assigns one) and a time.
    """
    head = head[:FINGERPRINT_BYTES]
    newline = head.find(b"\n")
    if newline >= 0:
        head = head[: newline + 1]
    elif len(head) < FINGERPRINT_BYTES:
        return None
    return hashlib.sha256(head).hexdigest()[:32]


def file_fingerprint(path: Path) -> str | None:
    """:func:`fingerprint` of the file at ``path`` (None when it is missing or has no first line)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return fingerprint(os.pread(fd, FINGERPRINT_BYTES, 0))
    finally:
        os.close(fd)


def complete_end(fd: int) -> int:
    """The byte offset just after the last complete line of the open file ``fd``."""
    position = os.fstat(fd).st_size
    while position > 0:
        size = min(READ_CHUNK, position)
        block = os.pread(fd, size, position - size)
        if block.endswith(b"\n"):
            return position
        newline = block.rfind(b"\n")
        if newline >= 0:
            return position - size + newline + 1
        position -= size
    return 0


def find_journal_file(journal: Path, file: str, position: Position) -> Path | None:
    """A file beside ``journal`` whose fingerprint is ``file`` and which reaches ``position``.

    Where a rotation (``mv journal.jsonl journal.jsonl.1``) left the file a cursor belongs to.
    Looks at the regular files of the journal's directory only (at most ``ROTATED_SCAN_LIMIT``).
    """
    try:
        names = sorted(os.listdir(journal.parent))[:ROTATED_SCAN_LIMIT]
    except OSError:
        return None
    for name in names:
        candidate = journal.parent / name
        if name == journal.name or not candidate.is_file() or candidate.stat().st_size < offset_of(position):
            continue
        with contextlib.suppress(OSError):
            if file_fingerprint(candidate) == file:
                return candidate
    return None


def position_at(offset: int) -> Position:
    """The position of byte ``offset`` of the journal file."""
    return Position(0, offset)


def offset_of(position: Position) -> int:
    """The byte offset ``position`` names; :class:`JournalError` for a position of another backend."""
    if check_position(position).major != 0:
        raise JournalError(f"position {position} is not a position in a journal file; use a position this journal gave")
    return position.minor


class FileJournal:
    """A JSONL journal file that several processes may append to and read at once.

    ``durability``: ``"always"`` fsyncs every append before it returns; ``"batched"``
    (default) also returns only once the line is on disk, but appends in flight at the
    same time share one fsync (group commit); ``"never"`` leaves flushing to the OS
    (a process crash loses nothing, a power cut may lose the last seconds).

    Positions are byte offsets in one file. Cursors are saved with the :func:`fingerprint` of
    the file they belong to, and :meth:`load_cursor` refuses (:class:`CursorMismatch`) a cursor
    of another file. ``follow_replacement``: when the file is replaced or truncated under
    :meth:`tail`, go on with the new content from 0 (True, the default for adapters), or raise
    :class:`JournalReplaced` (False: the daemon, which must finish what it read of the old file
    before it reads the new one).
    """

    def __init__(
        self,
        path: Path,
        *,
        durability: Durability = "batched",
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        force_polling: bool | None = None,
        on_notice: NoticeCallback | None = None,
        follow_replacement: bool = True,
    ) -> None:
        if durability not in DURABILITIES:
            raise JournalError(f"unknown durability {durability!r}: use one of {', '.join(DURABILITIES)}")
        if max_line_bytes < 1:
            raise JournalError(f"max_line_bytes must be at least 1, got {max_line_bytes}")
        self.path = Path(path)
        self.durability: Durability = durability
        self.max_line_bytes = max_line_bytes
        self._force_polling = force_polling
        self._on_notice = on_notice
        self._cursors = FileCursorStore(self.path.with_name(self.path.name + ".cursors"))
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._known_end = -1
        self._closed = False
        self._group_commit = GroupCommit(self._sync)
        self._follow_replacement = follow_replacement
        self._tail_file: str | None = None
        """Fingerprint of the file the tail reads (cursors are saved against it); None: unknown."""

    def __repr__(self) -> str:
        return f"FileJournal({str(self.path)!r}, durability={self.durability!r})"

    def daemon_lock_path(self) -> Path:
        """Where a daemon serving this journal takes its exclusive lock (one daemon per journal).

        A file beside the cursors of the journal's real path (symlinks resolved), so every
        path naming the same journal gives the same lock. Not the journal itself: appenders
        ``flock`` that for each line and must never wait for a daemon.
        """
        real = self.path.expanduser().resolve()
        return real.with_name(real.name + ".cursors") / DAEMON_LOCK_NAME

    # -- appending -------------------------------------------------------------------------

    def _open_for_append(self, *, may_open: bool) -> int | None:
        """The append descriptor, (re)opened if needed and ``may_open``, else None.

        Reopens when the file was removed or replaced since it was opened.
        """
        try:
            st = os.stat(self.path)
            identity: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            identity = None
        if self._fd is not None and identity == self._identity:
            return self._fd
        if not may_open:
            return None
        if self._fd is not None:
            log.warning("%s was replaced or removed; appending to the file now at that path", self.path)
            os.close(self._fd)
            self._fd = None
        created = identity is None
        if created:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        st = os.fstat(fd)
        self._fd = fd
        self._identity = (st.st_dev, st.st_ino)
        self._known_end = -1
        if created and self.durability != "never":
            fsync_directory(self.path.parent)
        return fd

    def _write_line(self, fd: int, line: bytes) -> tuple[int, int]:
        """Write ``line`` at the end of the file; the caller holds the exclusive lock."""
        start = os.fstat(fd).st_size
        if start != self._known_end and start > 0 and os.pread(fd, 1, start - 1) != b"\n":
            # Someone left an unterminated line: end it, so ours is not glued to it.
            log.warning("%s ended with an unterminated line at %d; terminating it", self.path, start)
            os.write(fd, b"\n")
            start += 1
        view = memoryview(line)
        written = 0
        try:
            while written < len(line):
                written += os.write(fd, view[written:])
        except OSError:
            if written:
                os.ftruncate(fd, start)  # never leave half a line behind
            raise
        end = start + len(line)
        self._known_end = end
        return start, end

    def _append_locked(self, line: bytes, *, wait: bool) -> tuple[int, int] | None:
        """Lock, write, unlock (and fsync when durability is "always").

        With ``wait=False`` it gives up (returns None) instead of waiting for a lock
        someone else holds, so it can run on the event loop without blocking it.
        """
        if not self._lock.acquire(blocking=wait):
            return None
        try:
            if self._closed:
                raise JournalError(f"the journal {self.path} is closed")
            fd = self._open_for_append(may_open=wait)  # opening may create and fsync: not on the loop
            if fd is None:
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            try:
                start, end = self._write_line(fd, line)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            if self.durability == "always":
                _SYNC(fd)
            return start, end
        except OSError as exc:
            raise StorageError(
                f"cannot append to {self.path}: {exc.strerror}; check that the file is writable"
                " and the disk is not full"
            ) from None
        finally:
            self._lock.release()

    def _append_blocking(self, line: bytes) -> tuple[int, int]:
        positions = self._append_locked(line, wait=True)
        assert positions is not None
        return positions

    def _sync(self) -> None:
        with self._lock:  # a private descriptor, so appends need not wait for the flush
            if self._fd is None:
                return
            fd = os.dup(self._fd)
        try:
            _SYNC(fd)
        except OSError as exc:
            raise StorageError(
                f"cannot flush {self.path} to disk: {exc.strerror}; check that the disk is not full"
                " and has no I/O errors"
            ) from None
        finally:
            os.close(fd)

    async def append(self, entry: BaseEntry) -> JournalRecord:
        """Append ``entry`` as one line (an ``id`` is assigned when it has none), as durably as ``durability`` says."""
        entry = with_id(entry)
        line = encode_entry(entry, self.max_line_bytes)
        # Fast path: an uncontended write of one line to the page cache takes microseconds,
        # less than a hop to a worker thread; anything that could block (a lock held
        # elsewhere, an fsync) goes to a thread.
        positions = None if self.durability == "always" else self._append_locked(line, wait=False)
        if positions is None:
            positions = await asyncio.to_thread(self._append_blocking, line)
        start, end = positions
        if self.durability == "batched":
            await self._group_commit.wait_durable()
        return JournalRecord(entry, position_at(start), position_at(end))

    # -- reading ---------------------------------------------------------------------------

    async def tail(self, start: Position = START) -> AsyncGenerator[JournalItem, None]:
        """Every item from ``start`` on, live; a replaced or truncated file: see ``follow_replacement``."""
        offset = offset_of(start)
        self._tail_file = await asyncio.to_thread(file_fingerprint, self.path) if offset > 0 else None
        replaced: list[TailNotice] = []

        def on_notice(notice: TailNotice) -> None:
            if notice.kind in (TailNoticeKind.REPLACED, TailNoticeKind.TRUNCATED):
                replaced.append(notice)
            self._report_notice(notice)

        lines = tail_lines(
            self.path,
            offset,
            max_line_bytes=self.max_line_bytes,
            force_polling=self._force_polling,
            on_notice=on_notice,
        )
        async with contextlib.aclosing(lines):
            try:
                async for line in lines:
                    if replaced:
                        if not self._follow_replacement:
                            raise JournalReplaced(
                                f"the journal {self.path} was {replaced[0].kind} while it was being read"
                            )
                        replaced.clear()
                        self._tail_file = None
                    if line.start == 0:
                        self._tail_file = (
                            fingerprint(line.data + b"\n")
                            if not line.too_long
                            else await asyncio.to_thread(file_fingerprint, self.path)
                        )
                    yield decode_line(
                        line.data,
                        position_at(line.start),
                        position_at(line.end),
                        too_long=line.too_long,
                        max_line_bytes=self.max_line_bytes,
                    )
            except OSError as exc:
                raise self._read_error(exc) from None

    def _read_error(self, exc: OSError) -> JournalError:
        return JournalError(
            f"cannot read the journal {self.path}: {exc.strerror or exc}; check that it is a readable regular file"
        )

    def _report_notice(self, notice: TailNotice) -> None:
        if self._on_notice is not None:
            self._on_notice(notice)

    def _read_blocking(self, start: int, end: int | None) -> list[JournalItem]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return []
        items: list[JournalItem] = []
        try:
            limit = os.fstat(fd).st_size if end is None else end
            splitter = LineSplitter(start, max_line_bytes=self.max_line_bytes)
            while splitter.offset < limit:
                chunk = os.pread(fd, min(READ_CHUNK, limit - splitter.offset), splitter.offset)
                if not chunk:
                    break
                for line in splitter.feed(chunk):
                    items.append(
                        decode_line(
                            line.data,
                            position_at(line.start),
                            position_at(line.end),
                            too_long=line.too_long,
                            max_line_bytes=self.max_line_bytes,
                        )
                    )
        finally:
            os.close(fd)
        return items

    async def read(self, start: Position = START, end: Position | None = None) -> list[JournalItem]:
        """The items lying between ``start`` and ``end`` (the file's end when None); no file, no items."""
        if end is not None and end < start:
            raise JournalError(f"invalid range {start}..{end}")
        try:
            return await asyncio.to_thread(
                self._read_blocking, offset_of(start), None if end is None else offset_of(end)
            )
        except OSError as exc:
            raise self._read_error(exc) from None

    def _end_position_blocking(self) -> Position:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return START
        try:
            return position_at(complete_end(fd))  # an unterminated last line is not part of the journal yet
        finally:
            os.close(fd)

    async def end_position(self) -> Position:
        """The position just after the last complete line."""
        try:
            return await asyncio.to_thread(self._end_position_blocking)
        except OSError as exc:
            raise self._read_error(exc) from None

    # -- cursors and lifecycle -------------------------------------------------------------

    def _load_cursor_blocking(self, name: str) -> Position | None:
        saved = self._cursors.load(name)
        if saved is None or saved.position == START or saved.file is None:
            return None if saved is None else saved.position  # nothing to check it against
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            current, end = None, 0
        else:
            try:
                current, end = fingerprint(os.pread(fd, FINGERPRINT_BYTES, 0)), complete_end(fd)
            finally:
                os.close(fd)
        if current == saved.file and saved.position <= position_at(end):
            return saved.position
        previous = find_journal_file(self.path, saved.file, saved.position)
        where = f"it is now {previous}" if previous is not None else f"it is no longer in {self.path.parent}"
        raise CursorMismatch(
            f"cursor {name!r} belongs to another file than the journal now at {self.path} (the journal"
            f" was rotated, replaced or truncated; {where}); delete {self._cursors.path_for(name)}"
            " to read the journal from its beginning",
            name=name,
            position=saved.position,
            file=saved.file,
            previous=previous,
        )

    async def load_cursor(self, name: str) -> Position | None:
        """The saved position, if it belongs to the file now at the journal's path.

        Raises :class:`CursorMismatch` for a cursor saved on another file (rotation,
        replacement, truncation), so that a reader neither re-reads nor skips silently.
        """
        try:
            return await asyncio.to_thread(self._load_cursor_blocking, name)
        except OSError as exc:
            raise self._read_error(exc) from None

    def _save_cursor_blocking(self, name: str, position: Position) -> None:
        file = None
        if position > START:
            file = self._tail_file
            if file is None:
                try:
                    file = file_fingerprint(self.path)
                except OSError as exc:
                    raise self._read_error(exc) from None
        self._cursors.save(name, position, file)

    async def save_cursor(self, name: str, position: Position) -> None:
        """Save ``position`` with the fingerprint of the file it lies in.

        That is the file this journal's :meth:`tail` reads (it may be the old one when the
        tail stopped at a replacement), else the file now at the path.
        """
        await asyncio.to_thread(self._save_cursor_blocking, name, position)

    async def aclose(self) -> None:
        """Wait for pending group commits, then close the file; later appends fail."""
        await self._group_commit.drain()
        with self._lock:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
