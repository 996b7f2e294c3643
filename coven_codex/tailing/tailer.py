"""``tail_lines``: follow a file line by line, woken by change notifications.

Reads to the end of the file on every wake-up (and once right after the watch starts,
so nothing written before it is missed), yields complete lines only, resumes from a
byte offset, waits for a file that does not exist yet, restarts from 0 when the file
is truncated and moves to the new file when another one is renamed over it.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Final

from coven_codex.tailing import inotify
from coven_codex.tailing.filesystems import remote_filesystem
from coven_codex.tailing.lines import DEFAULT_MAX_LINE_BYTES, Line, LineSplitter
from coven_codex.tailing.notices import NoticeCallback, TailNotice, TailNoticeKind, report
from coven_codex.tailing.wakers import (
    DEFAULT_POLL_INTERVAL,
    InotifyWaker,
    NotifierKind,
    PollingWaker,
    Waker,
    WakerFailed,
    WatchfilesWaker,
    default_notifier,
)

READ_CHUNK: Final = 1 << 20
"""Bytes read per system call while catching up."""
_FAIR_LINES: Final = 256
_FAIR_BYTES: Final = READ_CHUNK // 2
"""After a batch this big, let other tasks run before going on."""


class TailError(OSError):
    """The file exists but cannot be followed (permissions, not a regular file)."""


def watch_target(path: Path) -> tuple[Path, str]:
    """The directory to watch and the name in it whose changes matter.

    Normally the file's parent and the file's name; while the parent does not exist
    yet, its nearest existing ancestor and the name of the next missing component.
    """
    child = path
    directory = path.parent
    while not directory.is_dir() and directory != directory.parent:
        child = directory
        directory = directory.parent
    return directory, child.name


def watched_path(path: Path) -> Path:
    """The path whose directory to watch: for a symlink, its final target (writes happen there).

    Re-pointing the symlink itself is then not noticed until the old target changes.
    """
    try:
        if path.is_symlink():
            return path.resolve()
    except OSError:
        pass
    return path


class _Follower:
    """The synchronous file-reading half of the tailer: one open file and its splitter."""

    def __init__(self, path: Path, start: int, max_line_bytes: int, on_notice: NoticeCallback | None):
        if start < 0:
            raise ValueError(f"start offset must be >= 0, got {start}")
        self._path = path
        self._start = start
        self._on_notice = on_notice
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._opened_once = False
        self.missing = True
        """The path did not exist at the last catch-up."""
        self._splitter = LineSplitter(start, max_line_bytes=max_line_bytes)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def release(self) -> None:
        """Close the file while waiting; the next :meth:`catch_up` opens it again by its path and
        goes on at the same offset if it is the same file (else it was replaced: read from 0)."""
        self.close()

    def _notice(self, kind: TailNoticeKind, message: str, offset: int | None) -> None:
        report(TailNotice(kind, self._path, message, offset), self._on_notice)

    def _open(self) -> int | None:
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise TailError(
                exc.errno, f"cannot read {self._path}: {exc.strerror}; check that it is a readable file"
            ) from None
        return fd

    def _adopt(self, fd: int) -> None:
        """Make ``fd`` the followed file, reading from the start offset the first time, else 0."""
        st = os.fstat(fd)
        offset = 0
        if not self._opened_once:
            self._opened_once = True
            offset = self._start
            if st.st_size < offset:
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
        self._splitter.reset(offset)

    def _drain(self) -> Iterator[list[Line]]:
        fd = self._fd
        assert fd is not None
        splitter = self._splitter
        while True:
            chunk = os.pread(fd, READ_CHUNK, splitter.offset)
            if not chunk:
                return
            lines = splitter.feed(chunk)
            if lines:
                yield lines
            if len(chunk) < READ_CHUNK:
                return

    def _drop_partial(self, why: str) -> None:
        pending = self._splitter.pending_bytes
        if pending:
            self._notice(
                TailNoticeKind.DROPPED_PARTIAL,
                f"{pending} bytes of an unterminated last line at offset {self._splitter.consumed}"
                f" were abandoned because {why}",
                self._splitter.consumed,
            )

    def catch_up(self) -> Iterator[list[Line]]:
        """Every complete line now readable, in batches (one per chunk read)."""
        self.missing = True
        if self._fd is None:
            fd = self._open()
            if fd is None:
                return
            st = os.fstat(fd)
            if self._identity is None:
                self._adopt(fd)
            elif (st.st_dev, st.st_ino) == self._identity:
                self._fd = fd  # the same file, reopened after :meth:`release`: go on where we were
            else:
                self._drop_partial("the file was replaced")
                self._adopt(fd)
                self._notice(TailNoticeKind.REPLACED, "another file took this path; following it from 0", 0)
        yield from self._drain()
        while True:
            try:
                st = os.stat(self._path)
            except (FileNotFoundError, NotADirectoryError):
                return  # removed: keep the old file until a new one appears
            self.missing = False
            assert self._fd is not None
            if (st.st_dev, st.st_ino) != self._identity:
                yield from self._drain()  # finish the old file first
                fd = self._open()
                if fd is None:
                    return
                self._drop_partial("the file was replaced")
                self._adopt(fd)
                self._notice(TailNoticeKind.REPLACED, "another file took this path; following it from 0", 0)
                yield from self._drain()
                continue
            size = os.fstat(self._fd).st_size
            if size < self._splitter.offset:
                self._drop_partial("the file was truncated")
                self._notice(
                    TailNoticeKind.TRUNCATED,
                    f"the file shrank to {size} bytes below the read offset {self._splitter.offset};"
                    " reading it again from the start",
                    0,
                )
                self._splitter.reset(0)
                yield from self._drain()
                continue
            return


class WakerFactory:
    """Chooses how to be woken (once, reporting a polling fallback) and builds wakers."""

    def __init__(
        self,
        path: Path,
        force_polling: bool | None,
        notifier: NotifierKind,
        poll_interval: float,
        on_notice: NoticeCallback | None,
    ) -> None:
        self._path = path
        self._poll_interval = poll_interval
        self._on_notice = on_notice
        self._watched = watched_path(path)
        self.target = watch_target(self._watched)
        self._kind = self._choose(force_polling, notifier)

    def fall_back(self, reason: str) -> Waker:
        """Poll from now on, reporting ``reason`` once (a waker's notifier failed)."""
        self._fall_back(reason)
        return PollingWaker(self._path, self._poll_interval)

    def _fall_back(self, reason: str) -> None:
        self._kind = "polling"
        report(
            TailNotice(
                TailNoticeKind.POLLING,
                self._path,
                f"{reason}; checking the file for changes every {self._poll_interval:g}s",
            ),
            self._on_notice,
        )

    def _choose(self, force_polling: bool | None, notifier: NotifierKind) -> NotifierKind:
        if force_polling or notifier == "polling":
            self._fall_back("polling was requested")
            return "polling"
        if force_polling is None and notifier == "auto":
            filesystem = remote_filesystem(self.target[0])
            if filesystem is not None:
                self._fall_back(
                    f"{self.target[0]} is on a {filesystem} filesystem, where change notifications miss"
                    " writes made on other machines (pass force_polling=False to rely on them anyway)"
                )
                return "polling"
        return default_notifier() if notifier == "auto" else notifier

    def stale(self, file_missing: bool) -> bool:
        """Whether the watched directory is no longer the right one.

        While the file's directory is missing, an ancestor is watched until it reappears.
        The kernel may not report the removal of a directory whose deleted file is still
        open here (the open file pins it), so that case is checked when the file is missing.
        """
        if self.target[0] != self._watched.parent:
            return watch_target(self._watched) != self.target
        return file_missing and not self.target[0].is_dir()

    def create(self) -> Waker:
        """A waker watching the path's current directory (inotify, watchfiles or, failing both, polling)."""
        for _attempt in range(100):
            self._watched = watched_path(self._path)
            self.target = watch_target(self._watched)
            directory, name = self.target
            try:
                if self._kind == "inotify":
                    return InotifyWaker(directory, name)
                if self._kind == "watchfiles":
                    return WatchfilesWaker(directory, name)
            except FileNotFoundError:
                continue  # the directory vanished meanwhile: find the new target
            except inotify.InotifyUnavailable as exc:
                self._fall_back(f"inotify cannot watch {directory}: {exc.strerror}")
            return PollingWaker(self._path, self._poll_interval)
        raise TailError(errno.ENOENT, f"cannot find a stable directory to watch for {self._path}")


def _absolute(path: Path | str) -> Path:
    return Path(path).absolute()


async def tail_lines(
    path: Path,
    start: int = 0,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    force_polling: bool | None = None,
    on_notice: NoticeCallback | None = None,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    notifier: NotifierKind = "auto",
    hold_open: bool = True,
) -> AsyncGenerator[Line, None]:
    """Yield the complete lines of ``path`` from byte ``start`` on, forever.

    It never ends by itself: cancel the consuming task or leave the loop (then close the
    iterator, e.g. with ``contextlib.aclosing``, to release the file at once).

    ``force_polling``: None chooses (notifications, polling on network filesystems or when
    notifications are unavailable), True always polls, False never polls on purpose.
    ``notifier`` picks the notification mechanism (``"auto"``: inotify on Linux, watchfiles
    elsewhere). Truncation, replacement and a polling fallback are logged and passed to
    ``on_notice``.

    ``hold_open=False`` closes the file while waiting for a change (a tail that is idle holds no
    file descriptor: many of them can wait at once), at the price of not finishing a replaced
    file's last lines written after the previous read.
    """
    path = _absolute(path)
    follower = _Follower(path, start, max_line_bytes, on_notice)
    factory = WakerFactory(path, force_polling, notifier, poll_interval, on_notice)
    waker = factory.create()
    try:
        while True:
            for batch in follower.catch_up():
                for line in batch:
                    yield line
                if len(batch) >= _FAIR_LINES or batch[-1].end - batch[0].start >= _FAIR_BYTES:
                    await asyncio.sleep(0)  # a long catch-up must not starve the rest of the loop
            if waker.dead or factory.stale(follower.missing):
                await waker.aclose()
                waker = factory.create()
                continue
            if not hold_open:
                follower.release()
            try:
                await waker.wait()
            except WakerFailed as exc:
                await waker.aclose()
                waker = factory.fall_back(str(exc))  # read again first: the file may have changed meanwhile
    finally:
        follower.close()
        await waker.aclose()
