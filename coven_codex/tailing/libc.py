"""The C library through ctypes, for the Linux-only calls the tailer makes (inotify, statfs)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys


@functools.cache
def linux_libc() -> ctypes.CDLL | None:
    """The C library (``errno`` kept for ``ctypes.get_errno``) on Linux; ``None`` elsewhere or if it
    cannot be loaded."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
