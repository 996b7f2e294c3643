"""An append-only JSONL file, optionally rotated by size (``traces.jsonl`` -> ``traces.jsonl.1`` ...)."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import BinaryIO, Protocol

from coven_codex.traces.records import TraceRecord


class RecordSink(Protocol):
    """Where the receiver puts records: called from a worker thread, one record at a time."""

    def write(self, record: TraceRecord) -> None:
        """Store ``record``."""

    def close(self) -> None:
        """Flush and close (called once, when the receiver stops)."""


FILE_MODE = 0o600
DIR_MODE = 0o700


def open_private(path: Path, *, truncate: bool = False) -> BinaryIO:
    """``path`` opened for appending (emptied first with ``truncate``), readable by its owner only:
    created 0600 (its directory 0700 when created), and an existing file is made 0600."""
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0)
    fd = os.open(path, flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, "ab")
    except BaseException:
        os.close(fd)
        raise


class JsonlWriter:
    """Appends lines to ``path``; with ``max_bytes``, a file that would pass it is rotated first.

    Rotation renames ``path`` to ``path.1`` (``path.1`` to ``path.2`` and so on, keeping
    ``backups`` old files; every file is 0600, see :func:`open_private`); a single line larger
    than ``max_bytes`` still goes into a file of its own, whole. Each line is written with one
    ``write`` and flushed; :meth:`close` also fsyncs. Safe to call from several threads.
    """

    def __init__(self, path: Path, *, max_bytes: int | None = None, backups: int = 3) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = max(backups, 0)
        self.lines = 0
        self._handle: BinaryIO | None = None
        self._size = 0
        self._lock = threading.Lock()

    def write(self, record: TraceRecord) -> None:
        """Append ``record`` as one line."""
        self.write_line(record.to_line())

    def write_line(self, line: bytes) -> None:
        """Append ``line`` (which must end in a newline), rotating first if needed."""
        with self._lock:
            handle = self._open()
            if self.max_bytes is not None and self._size > 0 and self._size + len(line) > self.max_bytes:
                self._rotate()
                handle = self._open()
            handle.write(line)
            handle.flush()
            self._size += len(line)
            self.lines += 1

    def close(self) -> None:
        """Flush and fsync the current file and close it (writing again reopens it)."""
        with self._lock:
            if self._handle is None:
                return
            handle, self._handle = self._handle, None
            try:
                handle.flush()
                os.fsync(handle.fileno())
            finally:
                handle.close()

    def _open(self) -> BinaryIO:
        if self._handle is None:
            self._handle = open_private(self.path)
            self._size = self._handle.tell()
        return self._handle

    def _rotate(self) -> None:
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
            return
        for index in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{index}")
            with contextlib.suppress(FileNotFoundError):
                os.replace(older, self.path.with_name(f"{self.path.name}.{index + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
