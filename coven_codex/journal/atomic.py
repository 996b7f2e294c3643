"""Durable, atomic small-file writes shared by the cursors and the session state.

A write either replaces the file completely or leaves the old one untouched, and never leaves
a temporary file behind, even when the disk is full.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Make a rename or a creation inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (``os.write`` may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data``: temporary file, fsync (when ``durable``), rename.

    On any failure (``ENOSPC`` included) the temporary file is removed and the old file stays
    as it was; the ``OSError`` propagates for the caller to explain.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    if durable:
        fsync_directory(path.parent)
