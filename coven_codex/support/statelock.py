"""One daemon per directory and per journal: an exclusive ``flock`` on a lock file.

The daemon takes one on ``<state_dir>/daemon.lock``, one on ``<CODEX_HOME>/daemon.lock`` and one
on the file journal's daemon lock (``<journal>.cursors/daemon.lock``, see
:meth:`coven_codex.journal.FileJournal.daemon_lock_path`). The journal's lock is a separate file,
not the journal itself: adapters take ``flock`` on the journal for every append and must go on
appending while a daemon runs.

The kernel drops the lock when the process dies, even by ``kill -9``, so a stale lock never
blocks a restart. The file also holds the owner's pid, for the message another daemon shows.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

LOCK_NAME = "daemon.lock"


class StateError(RuntimeError):
    """The state directory (or a lock file in it) cannot be used; the message says what to do."""


class DaemonLock:
    """An exclusive, non-blocking ``flock`` on ``path``; ``refusal`` explains a conflict.

    ``refusal`` gets the holder's pid (as it wrote it, or ``unknown``) and returns the message.
    """

    def __init__(self, path: Path, refusal: Callable[[str], str]) -> None:
        self.path = path
        self._refusal = refusal
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`StateError` naming the pid that holds it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateError(
                f"cannot create the lock file {self.path}: {exc.strerror}; make its directory writable"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise StateError(self._refusal(owner[:16])) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (and the pid in the file)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> DaemonLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class StateLock(DaemonLock):
    """One daemon per state directory (or ``CODEX_HOME``): ``<dir>/daemon.lock``."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(
            state_dir / LOCK_NAME,
            lambda pid: (
                f"another coven-codex daemon (pid {pid}) is using {state_dir}; "
                "stop it first, or give this one its own --workspace (or state_dir and codex_home)"
            ),
        )


class JournalLock(DaemonLock):
    """One daemon per file journal: two would both answer every thought."""

    def __init__(self, journal: Path | str, lock_path: Path) -> None:
        super().__init__(
            lock_path,
            lambda pid: (
                f"another coven-codex daemon (pid {pid}) is serving the journal {journal}; two daemons"
                f" on one journal would answer every thought twice. Stop that daemon first (kill -TERM {pid}),"
                " or give this one its own --journal"
            ),
        )
