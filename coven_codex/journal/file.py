"""The file journal: JSONL segments, appended under an exclusive lock, tailed on change notifications."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Final, Literal

from coven_codex.entries import BaseEntry, new_entry_id
from coven_codex.journal.atomic import fsync_directory
from coven_codex.journal.cursors import FileCursorStore
from coven_codex.journal.group_commit import GroupCommit
from coven_codex.journal.interest import Interest
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
from coven_codex.journal.reader import SegmentReader
from coven_codex.journal.segments import (
    FINGERPRINT_BYTES,
    HEADER_LIMIT,
    RETENTIONS,
    CompactReport,
    Retention,
    SegmentLayout,
    SegmentRemoved,
    fingerprint,
    first_line_time,
    parse_header,
)
from coven_codex.tailing import DEFAULT_MAX_LINE_BYTES, DEFAULT_POLL_INTERVAL, WakerFactory
from coven_codex.tailing.notices import NoticeCallback

__all__ = [
    "FINGERPRINT_BYTES",
    "FileJournal",
    "complete_end",
    "encode_entry",
    "file_fingerprint",
    "find_journal_file",
    "fingerprint",
    "with_id",
]

log = logging.getLogger(__name__)

DURABILITIES: Final = ("always", "batched", "never")
READ_CHUNK: Final = 1 << 20
FILE_MODE: Final = 0o600
_SYNC = getattr(os, "fdatasync", os.fsync)
DAEMON_LOCK_NAME: Final = "daemon.lock"
IDENTITY_NAME: Final = "journal-id"
"""In ``<journal>.cursors/``: the journal's identity (:mod:`coven_codex.journal.identity`); no cursor (no ``.json``)."""
ROTATED_SCAN_LIMIT: Final = 10_000
MIN_SEGMENT_BYTES: Final = 1024
_FAIR_ITEMS: Final = 256
"""After a batch this big, let other tasks run before going on."""
_REOPEN_LIMIT: Final = 1000
"""Roll-overs or replacements an append may meet in a row before it gives up (never in practice)."""


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


def find_journal_file(journal: Path, file: str, offset: int) -> Path | None:
    """A file beside ``journal`` whose fingerprint is ``file`` and which reaches byte ``offset``.

    Where a rotation (``mv journal.jsonl journal.jsonl.1``) left the file a cursor belongs to.
    Looks at the regular files of the journal's directory only (at most ``ROTATED_SCAN_LIMIT``).
    """
    try:
        names = sorted(os.listdir(journal.parent))[:ROTATED_SCAN_LIMIT]
    except OSError:
        return None
    for name in names:
        candidate = journal.parent / name
        if name == journal.name or not candidate.is_file() or candidate.stat().st_size < offset:
            continue
        with contextlib.suppress(OSError):
            if file_fingerprint(candidate) == file:
                return candidate
    return None


class FileJournal:
    """A JSONL journal that several processes may append to and read at once, in segments.

    ``durability``: ``"always"`` fsyncs every append before it returns; ``"batched"``
    (default) also returns only once the line is on disk, but appends in flight at the
    same time share one fsync (group commit); ``"never"`` leaves flushing to the OS
    (a process crash loses nothing, a power cut may lose the last seconds).

    ``segment_bytes`` / ``segment_age`` (seconds): an append that finds the active segment
    this big or this old first rolls over to a new one (None: never; docs/journal-protocol.md,
    *Segments*). ``retention``: after a roll-over this journal made, segments behind every
    saved cursor are kept (``"keep"``), moved to ``archive`` (``"archive"``; default
    ``<journal>.archive/``) or deleted (``"delete"``); :meth:`compact` does it on demand.

    Positions are ``Position(segment, byte offset)``. Cursors are saved with the fingerprint of
    the segment file they belong to, and :meth:`load_cursor` refuses (:class:`CursorMismatch`)
    a cursor of another file. ``follow_replacement``: when the file is replaced or truncated by
    hand under :meth:`tail`, go on with the new content from 0 (True, the default for adapters),
    or raise :class:`JournalReplaced` (False: the daemon, which must finish what it read of the
    old file before it reads the new one). A roll-over is not a replacement: every tail crosses it.
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
        segment_bytes: int | None = None,
        segment_age: float | None = None,
        retention: Retention = "keep",
        archive: Path | None = None,
    ) -> None:
        if durability not in DURABILITIES:
            raise JournalError(f"unknown durability {durability!r}: use one of {', '.join(DURABILITIES)}")
        if max_line_bytes < 1:
            raise JournalError(f"max_line_bytes must be at least 1, got {max_line_bytes}")
        if segment_bytes is not None and segment_bytes < MIN_SEGMENT_BYTES:
            raise JournalError(f"segment_bytes must be at least {MIN_SEGMENT_BYTES}, got {segment_bytes}")
        if segment_age is not None and not segment_age > 0:
            raise JournalError(f"segment_age must be a number of seconds above 0, got {segment_age}")
        if retention not in RETENTIONS:
            raise JournalError(f"unknown retention {retention!r}: use one of {', '.join(RETENTIONS)}")
        self.path = Path(path)
        self.durability: Durability = durability
        self.max_line_bytes = max_line_bytes
        self.segment_bytes = segment_bytes
        self.segment_age = segment_age
        self.retention: Retention = retention
        self.archive = archive
        self.layout = SegmentLayout(self.path)
        self._force_polling = force_polling
        self._on_notice = on_notice
        self._cursors = FileCursorStore(self.path.with_name(self.path.name + ".cursors"))
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._segment = 0
        """The number of the segment ``_fd`` is."""
        self._born = 0.0
        """When that segment was started (epoch seconds), for ``segment_age``."""
        self._known_end = -1
        self._closed = False
        self._group_commit = GroupCommit(self._sync)
        self._follow_replacement = follow_replacement
        self._tail_file: tuple[int, str] | None = None
        """Segment and fingerprint of the file the tail last yielded from (cursors are saved against it)."""

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

    # -- identity --------------------------------------------------------------------------

    def identity_path(self) -> Path:
        """Where the journal's identity is kept: ``<journal>.cursors/journal-id``, beside its cursors.

        The same folder as the cursors, so it follows the journal wherever its cursors do: across
        segments and a rotation by hand (the path stays), and a move of the journal with its
        ``.cursors`` folder.
        """
        return self._cursors.directory / IDENTITY_NAME

    def _load_identity_blocking(self) -> str | None:
        try:
            return self.identity_path().read_bytes().decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return None

    async def load_identity(self) -> str | None:
        """The identity recorded for this journal (as written; checked by the caller), or None."""
        try:
            return await asyncio.to_thread(self._load_identity_blocking)
        except OSError as exc:
            raise JournalError(
                f"cannot read the journal's identity {self.identity_path()}: {exc.strerror}; check its permissions"
            ) from None

    def _make_identity_blocking(self, made: str) -> str:
        path = self.identity_path()
        directory = path.parent
        if not directory.is_dir():
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fsync_directory(directory.parent)
        temporary = directory / f".{IDENTITY_NAME}.{os.getpid()}.{made}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        try:
            try:
                os.write(fd, made.encode("ascii") + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(temporary, path)  # never over an identity another process made first
            except FileExistsError:
                return self._load_identity_blocking() or made
        finally:
            with contextlib.suppress(OSError):
                temporary.unlink()
        fsync_directory(directory)
        return made

    async def make_identity(self, made: str) -> str:
        """Record ``made`` as this journal's identity unless one is recorded already; the one that holds."""
        try:
            return await asyncio.to_thread(self._make_identity_blocking, made)
        except OSError as exc:
            raise JournalError(
                f"cannot record the journal's identity in {self.identity_path()}: {exc.strerror};"
                " make that folder writable"
            ) from None

    def identity_location(self) -> str:
        """Where the identity is kept, for messages."""
        return str(self.identity_path())

    # -- appending -------------------------------------------------------------------------

    def _open_for_append(self) -> int:
        """Open the file at the journal's path for appending (creating it), as the active segment."""
        self._drop_fd()
        created = not self.path.exists()
        if created:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        self._adopt_for_append(fd)
        if created and self.durability != "never":
            fsync_directory(self.path.parent)
        return fd

    def _adopt_for_append(self, fd: int) -> None:
        st = os.fstat(fd)
        head = os.pread(fd, HEADER_LIMIT, 0)
        header = parse_header(head)
        if header is None:
            self._segment, born = 0, first_line_time(head)
        else:
            self._segment, born = header
        self._born = time.time() if born is None else born
        self._fd = fd
        self._identity = (st.st_dev, st.st_ino)
        self._known_end = -1

    def _drop_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._identity = None

    def _is_active(self) -> bool:
        """Whether the open append file is still the one at the journal's path (holding its lock)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == self._identity

    def _roll_due(self, fd: int) -> bool:
        if self.segment_bytes is None and self.segment_age is None:
            return False
        size = os.fstat(fd).st_size
        if self.segment_bytes is not None and size >= self.segment_bytes:
            return True
        if self.segment_age is None or time.time() - self._born < self.segment_age:
            return False
        return size > len(os.pread(fd, HEADER_LIMIT, 0).partition(b"\n")[0]) + 1 if self._segment else size > 0

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

    def _append_locked(self, line: bytes, *, wait: bool) -> tuple[Position, Position, bool] | None:
        """Lock, write, unlock (and fsync when durability is "always"): start, end, rolled over.

        With ``wait=False`` it gives up (returns None) instead of waiting for a lock someone
        else holds, opening a file or rolling over, so it can run on the event loop without
        blocking it.
        """
        if not self._lock.acquire(blocking=wait):
            return None
        try:
            if self._closed:
                raise JournalError(f"the journal {self.path} is closed")
            rolled = False
            for _attempt in range(_REOPEN_LIMIT):
                fd = self._fd
                if fd is None:
                    if not wait:
                        return None  # opening may create and fsync: not on the loop
                    fd = self._open_for_append()
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return None
                try:
                    if not self._is_active():
                        # Rolled over (or replaced) by someone else while we waited for the lock.
                        log.debug("%s moved on to another file; appending to the file now at that path", self.path)
                        self._fd = self._identity = None  # ``fd`` is closed by the caller once unlocked
                        continue
                    if self._roll_due(fd):
                        if not wait:
                            return None
                        self._roll_over(fd)
                        rolled = True
                        continue
                    start, end = self._write_line(fd, line)
                    segment = self._segment
                finally:
                    with contextlib.suppress(OSError):
                        fcntl.flock(fd, fcntl.LOCK_UN)
                    if fd != self._fd:
                        os.close(fd)  # the sealed segment; closing it after unlocking
                if self.durability == "always":
                    _SYNC(fd)
                return Position(segment, start), Position(segment, end), rolled
            raise JournalError(
                f"cannot append to {self.path}: it was replaced {_REOPEN_LIMIT} times in a row while this"
                " process waited to write; check what keeps replacing the journal file"
            )
        except OSError as exc:
            raise StorageError(
                f"cannot append to {self.path}: {exc.strerror}; check that the file is writable"
                " and the disk is not full"
            ) from None
        finally:
            self._lock.release()

    def _roll_over(self, fd: int) -> None:
        """Seal the active segment ``fd`` (locked, at the path) and make the next one the append file."""
        new, _size = self.layout.roll_over(fd, self._segment, durable=self.durability != "never")
        log.info("%s: segment %d sealed, appending to segment %d", self.path, self._segment, self._segment + 1)
        self._fd = None  # ``fd`` is closed by the caller once unlocked
        self._adopt_for_append(new)

    def _append_blocking(self, line: bytes) -> tuple[Position, Position, bool]:
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
        # elsewhere, an fsync, a roll-over) goes to a thread.
        positions = None if self.durability == "always" else self._append_locked(line, wait=False)
        if positions is None:
            positions = await asyncio.to_thread(self._append_blocking, line)
        start, end, rolled = positions
        if self.durability == "batched":
            await self._group_commit.wait_durable()
        if rolled and self.retention != "keep":
            await self._retain()
        return JournalRecord(entry, start, end)

    async def _retain(self) -> None:
        """Apply the retention setting after a roll-over; a failure is logged, the append stands."""
        action: Literal["archive", "delete"] = "archive" if self.retention == "archive" else "delete"
        try:
            report = await self.compact(action=action, archive=self.archive)
        except JournalError as exc:
            log.warning("journal retention (%s) failed after a roll-over: %s", self.retention, exc)
            return
        if report.removed:
            log.info("journal retention: %s", report.message)

    # -- reading ---------------------------------------------------------------------------

    def _reader(self, start: Position, *, follow: bool, interest: Interest | None = None) -> SegmentReader:
        return SegmentReader(
            self.layout,
            start,
            max_line_bytes=self.max_line_bytes,
            on_notice=self._on_notice,
            follow=follow,
            interest=interest,
        )

    async def tail(self, start: Position = START) -> AsyncGenerator[JournalItem, None]:
        """Every item from ``start`` on, live, across roll-overs; a hand replacement: see ``follow_replacement``.

        Raises :class:`SegmentRemoved` when ``start`` (or a segment it must read) was removed
        by compaction.
        """
        reader = self._reader(check_position(start), follow=self._follow_replacement)
        factory = WakerFactory(
            self.path.absolute(), self._force_polling, "auto", DEFAULT_POLL_INTERVAL, self._on_notice
        )
        waker = factory.create()
        try:
            while True:
                try:
                    unpaused = 0
                    for batch in reader.catch_up():
                        for item in batch:
                            if reader.file is not None:
                                self._tail_file = (reader.segment, reader.file)
                            yield item
                        unpaused += len(batch)
                        if unpaused >= _FAIR_ITEMS:  # across small segments too
                            unpaused = 0
                            await asyncio.sleep(0)  # a long catch-up must not starve the rest of the loop
                except OSError as exc:
                    raise self._read_error(exc) from None
                if reader.stopped:
                    assert reader.replaced is not None
                    raise JournalReplaced(f"the journal {self.path} was {reader.replaced.kind} while it was being read")
                if waker.dead or factory.stale(not self.path.exists()):
                    await waker.aclose()
                    waker = factory.create()
                    continue
                await waker.wait()
        finally:
            reader.close()
            await waker.aclose()

    def _read_error(self, exc: OSError) -> JournalError:
        return JournalError(
            f"cannot read the journal {self.path}: {exc.strerror or exc}; check that it is a readable regular file"
        )

    def _read_blocking(self, start: Position, end: Position | None, interest: Interest | None) -> list[JournalItem]:
        reader = self._reader(start, follow=False, interest=interest)
        items: list[JournalItem] = []
        try:
            for batch in reader.catch_up():
                for item in batch:
                    if end is not None and item.end > end:
                        return items
                    items.append(item)
        finally:
            reader.close()
        return items

    async def read(
        self, start: Position = START, end: Position | None = None, *, interest: Interest | None = None
    ) -> list[JournalItem]:
        """The items lying between ``start`` and ``end`` (the journal's end when None); no file, no items.

        Reads across segments; :class:`SegmentRemoved` when ``start`` lies in a removed one. With
        ``interest``, only the lines it admits are decoded and returned (:mod:`~coven_codex.journal.interest`).
        """
        check_position(start)
        if end is not None and check_position(end) < start:
            raise JournalError(f"invalid range {start}..{end}")
        try:
            return await asyncio.to_thread(self._read_blocking, start, end, interest)
        except OSError as exc:
            raise self._read_error(exc) from None

    def _end_position_blocking(self) -> Position:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return START
        try:
            # an unterminated last line is not part of the journal yet
            return Position(self.layout.number_of(fd), complete_end(fd))
        finally:
            os.close(fd)

    async def end_position(self) -> Position:
        """The position just after the last complete line of the active segment."""
        try:
            return await asyncio.to_thread(self._end_position_blocking)
        except OSError as exc:
            raise self._read_error(exc) from None

    # -- cursors, compaction and lifecycle ----------------------------------------------------

    def _load_cursor_blocking(self, name: str) -> Position | None:
        saved = self._cursors.load(name)
        if saved is None or saved.position == START:
            return None if saved is None else saved.position
        position = saved.position
        try:
            fd, _sealed = self.layout.open_segment(position.major, position)
        except SegmentRemoved:
            raise
        except JournalError:
            fd = -1  # the segment is nowhere: the journal was replaced by hand (below)
        if fd < 0:
            current, end = None, 0
        else:
            try:
                current, end = fingerprint(os.pread(fd, FINGERPRINT_BYTES, 0)), complete_end(fd)
            finally:
                os.close(fd)
        if saved.file is None:
            return position  # saved by an older coven-codex, or before the file existed: nothing to check
        if current == saved.file and position.minor <= end:
            return position
        previous = find_journal_file(self.path, saved.file, position.minor)
        where = f"it is now {previous}" if previous is not None else f"it is no longer in {self.path.parent}"
        raise CursorMismatch(
            f"cursor {name!r} belongs to another file than the journal now at {self.path} (the journal"
            f" was rotated, replaced or truncated; {where}); delete {self._cursors.path_for(name)}"
            " to read the journal from its beginning",
            name=name,
            position=position,
            file=saved.file,
            previous=previous,
        )

    async def load_cursor(self, name: str) -> Position | None:
        """The saved position, if it belongs to the journal's files.

        Raises :class:`CursorMismatch` for a cursor saved on another file (rotation,
        replacement, truncation by hand), so that a reader neither re-reads nor skips silently,
        and :class:`SegmentRemoved` for one whose segment compaction removed.
        """
        try:
            return await asyncio.to_thread(self._load_cursor_blocking, name)
        except OSError as exc:
            raise self._read_error(exc) from None

    def _segment_fingerprint(self, position: Position) -> str | None:
        if self._tail_file is not None and self._tail_file[0] == position.major:
            return self._tail_file[1]
        fd, _sealed = self.layout.open_segment(position.major, position)
        if fd < 0:
            return None
        try:
            return fingerprint(os.pread(fd, FINGERPRINT_BYTES, 0))
        finally:
            os.close(fd)

    def _save_cursor_blocking(self, name: str, position: Position) -> None:
        self._cursors.path_for(name)  # a bad name or position is refused before anything is read
        check_position(position)
        file = None
        if position > START:
            try:
                file = self._segment_fingerprint(position)
            except OSError as exc:
                raise self._read_error(exc) from None
        self._cursors.save(name, position, file)

    async def save_cursor(self, name: str, position: Position) -> None:
        """Save ``position`` with the fingerprint of the segment file it lies in.

        That is the file this journal's :meth:`tail` read it from (it may be the old one when
        the tail stopped at a hand replacement), else the segment's file now.
        """
        await asyncio.to_thread(self._save_cursor_blocking, name, position)

    async def cursors(self) -> dict[str, Position]:
        """Every saved cursor: name and position."""
        try:
            return await asyncio.to_thread(self._cursors.load_all)
        except OSError as exc:
            raise self._read_error(exc) from None

    async def compact(
        self, *, action: Literal["archive", "delete"] = "archive", archive: Path | None = None, dry_run: bool = False
    ) -> CompactReport:
        """Archive (move to ``archive``, default ``<journal>.archive/``) or delete the sealed
        segments lying wholly behind every saved cursor; a reader later asking for one gets
        :class:`SegmentRemoved`.
        """

        def run() -> CompactReport:
            return self.layout.compact(self._cursors.load_all(), action=action, archive=archive, dry_run=dry_run)

        try:
            return await asyncio.to_thread(run)
        except OSError as exc:
            raise StorageError(
                f"cannot compact the journal {self.path}: {exc.strerror} ({exc.filename});"
                " check that its folder and the archive folder are writable"
            ) from None

    async def aclose(self) -> None:
        """Wait for pending group commits, then close the file; later appends fail."""
        await self._group_commit.drain()
        with self._lock:
            self._closed = True
            self._drop_fd()
