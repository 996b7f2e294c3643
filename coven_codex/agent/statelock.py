"""One daemon per directory: an exclusive ``flock`` on ``<dir>/daemon.lock`` (the daemon takes
one on its state directory and one on its ``CODEX_HOME``).

The kernel drops the lock when the process dies, even by ``kill -9``, so a stale lock never
blocks a restart. The file also holds the owner's pid, for the message another daemon shows.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from coven_codex.agent.state import StateError

LOCK_NAME = "daemon.lock"


class StateLock:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise StateError(
                f"another coven-codex daemon (pid {owner}) is using {self.path.parent}; "
                "stop it first, or give this one its own --workspace (or state_dir and codex_home)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> StateLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
