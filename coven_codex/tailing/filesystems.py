"""Which filesystems do not deliver change notifications for writes made elsewhere."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

from coven_codex.tailing.libc import linux_libc

# statfs(2) f_type values of network and userspace filesystems: inotify there only sees
# changes made through this very kernel, so a writer on another machine goes unnoticed.
REMOTE_FILESYSTEMS: Final[dict[int, str]] = {
    0x6969: "nfs",
    0x517B: "smb",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x01021997: "9p",
    0x00C36400: "ceph",
    0x65735546: "fuse",
    0x47504653: "gpfs",
    0x0BD00BD0: "lustre",
    0x013111A8: "ibrix",
    0x6B414653: "afs",
}
_STATFS_BUFFER: Final = 256


StatfsFunction = Callable[[bytes, ctypes.Array[ctypes.c_char]], int]


def _load_statfs() -> StatfsFunction | None:
    libc = linux_libc()
    if libc is None:
        return None
    statfs = getattr(libc, "statfs", None)
    if statfs is None:
        return None
    statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    statfs.restype = ctypes.c_int
    function: StatfsFunction = statfs
    return function


_STATFS: Final = _load_statfs()


def remote_filesystem(directory: Path) -> str | None:
    """The name of the network/userspace filesystem holding ``directory``, or None.

    None also when it cannot be told (not Linux, statfs failed): then inotify is tried.
    """
    if _STATFS is None:
        return None
    buffer = ctypes.create_string_buffer(_STATFS_BUFFER)
    if _STATFS(os.fsencode(directory), buffer) != 0:
        return None
    # f_type is the first member of struct statfs (a long) on every Linux architecture.
    f_type = ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF
    return REMOTE_FILESYSTEMS.get(f_type)
