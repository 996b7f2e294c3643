"""Linux inotify through ctypes, one instance per event loop, read by ``loop.add_reader``.

Nothing here wakes up unless the kernel reports a change: an idle watch costs no CPU.
(watchfiles, by contrast, checks for changes every ``step`` milliseconds in a thread.)
One inotify instance per event loop serves every subscription, because the kernel
allows only ``fs.inotify.max_user_instances`` (often 128) instances per user.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from coven_codex.tailing.libc import linux_libc

log = logging.getLogger(__name__)

IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_CLOSE_WRITE: Final = 0x00000008
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ONLYDIR: Final = 0x01000000

WATCH_MASK: Final = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
_DIRECTORY_GONE: Final = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
_EVENT_HEADER = struct.Struct("iIII")
_READ_SIZE: Final = 64 * 1024


class InotifyUnavailable(OSError):
    """This system or this directory cannot be watched with inotify."""


def _load_libc() -> ctypes.CDLL | None:
    libc = linux_libc()
    if libc is None:
        return None
    for name in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch"):
        if not hasattr(libc, name):
            return None
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_init1.restype = ctypes.c_int
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_add_watch.restype = ctypes.c_int
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.inotify_rm_watch.restype = ctypes.c_int
    return libc


_LIBC: Final = _load_libc()


def _os_error(message: str, path: Path | None = None) -> InotifyUnavailable:
    code = ctypes.get_errno()
    hint = ""
    if code == errno.ENOSPC:
        hint = " (raise the sysctl fs.inotify.max_user_watches)"
    elif code == errno.EMFILE:
        hint = " (raise the sysctl fs.inotify.max_user_instances)"
    text = f"{message}: {os.strerror(code)}{hint}"
    return InotifyUnavailable(code, text, str(path) if path else None)


@dataclass(frozen=True, slots=True)
class NameSuffix:
    """Every entry name that ends with ``suffix`` (a rollout file of one thread: ``-<thread id>.jsonl``)."""

    suffix: str

    def __post_init__(self) -> None:
        if not self.suffix:
            raise ValueError("a name suffix cannot be empty")


NameMatch = str | NameSuffix | Callable[[str], bool]
"""Which entries of a watched directory a subscription hears about: one name, every name with a
suffix, or every name a predicate accepts (called for each event on the directory, so it must be
cheap). Subscriptions to a name or a suffix are found by that name (or its end): an event costs the
same however many of them watch its directory (a day folder of Codex's rollouts holds the file of
every conversation, and every conversation waiting for its rollout watches it)."""


class InotifySubscription:
    """Wakes :meth:`wait` when something happens to ``name`` inside ``directory`` (an entry
    name, or a predicate on entry names: :data:`NameMatch`)."""

    __slots__ = ("_event", "_hub", "dead", "directory", "name", "wd")

    def __init__(self, hub: _InotifyHub, wd: int, directory: Path, name: NameMatch) -> None:
        self._hub = hub
        self._event = asyncio.Event()
        self.wd = wd
        self.directory = directory
        self.name = name
        self.dead = False
        """The directory itself went away; subscribe again to the new target."""

    def matches(self, name: str) -> bool:
        """An event about the entry ``name`` concerns this subscription."""
        wanted = self.name
        if isinstance(wanted, str):
            return wanted == name
        if isinstance(wanted, NameSuffix):
            return name.endswith(wanted.suffix)
        return wanted(name)

    def notify(self) -> None:
        """Something happened to the file: wake the waiting :meth:`wait`."""
        self._event.set()

    async def wait(self) -> None:
        """Return once a notification arrived since the last wait."""
        await self._event.wait()
        self._event.clear()

    async def aclose(self) -> None:
        """Stop receiving notifications; the watch is removed once nobody else uses it."""
        self._hub.unsubscribe(self)


class _WatchGroup:
    """The subscriptions of one watch (one directory): by entry name, by name suffix (per suffix
    length), and the predicates (:data:`NameMatch`)."""

    __slots__ = ("named", "predicates", "suffixes")

    def __init__(self) -> None:
        self.named: dict[str, set[InotifySubscription]] = {}
        self.suffixes: dict[int, dict[str, set[InotifySubscription]]] = {}
        self.predicates: set[InotifySubscription] = set()

    def __bool__(self) -> bool:
        return bool(self.named) or bool(self.suffixes) or bool(self.predicates)

    def __iter__(self) -> Iterator[InotifySubscription]:
        for group in self.named.values():
            yield from group
        for table in self.suffixes.values():
            for group in table.values():
                yield from group
        yield from self.predicates

    def _table(self, name: str | NameSuffix, *, create: bool) -> dict[str, set[InotifySubscription]] | None:
        if isinstance(name, str):
            return self.named
        if create:
            return self.suffixes.setdefault(len(name.suffix), {})
        return self.suffixes.get(len(name.suffix))

    def add(self, subscription: InotifySubscription) -> None:
        name = subscription.name
        if isinstance(name, str | NameSuffix):
            table = self._table(name, create=True)
            assert table is not None
            table.setdefault(name if isinstance(name, str) else name.suffix, set()).add(subscription)
        else:
            self.predicates.add(subscription)

    def discard(self, subscription: InotifySubscription) -> bool:
        """Remove ``subscription``; whether it was here."""
        name = subscription.name
        if not isinstance(name, str | NameSuffix):
            found = subscription in self.predicates
            self.predicates.discard(subscription)
            return found
        table = self._table(name, create=False)
        key = name if isinstance(name, str) else name.suffix
        group = None if table is None else table.get(key)
        if table is None or group is None or subscription not in group:
            return False
        group.discard(subscription)
        if not group:
            del table[key]
            if not table and isinstance(name, NameSuffix):
                del self.suffixes[len(key)]
        return True

    def concerned(self, name: str) -> list[InotifySubscription]:
        """The subscriptions an event about the entry ``name`` concerns: a look-up per suffix length,
        and a call per predicate."""
        found = [subscription for subscription in self.predicates if subscription.matches(name)]
        found.extend(self.named.get(name, ()))
        for length, table in self.suffixes.items():
            if length <= len(name):
                found.extend(table.get(name[-length:], ()))
        return found


class _InotifyHub:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        assert _LIBC is not None
        fd = _LIBC.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise _os_error("inotify_init1 failed")
        self._fd = fd
        self._loop = loop
        self._subscriptions: dict[int, _WatchGroup] = {}
        loop.add_reader(fd, self._on_readable)

    @property
    def empty(self) -> bool:
        return not self._subscriptions

    def subscribe(self, directory: Path, name: NameMatch) -> InotifySubscription:
        assert _LIBC is not None
        wd = _LIBC.inotify_add_watch(self._fd, os.fsencode(directory), WATCH_MASK)
        if wd < 0:
            if ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR):
                raise FileNotFoundError(errno.ENOENT, "directory to watch is gone", str(directory))
            raise _os_error("cannot watch the directory with inotify", directory)
        subscription = InotifySubscription(self, wd, directory, name)
        self._subscriptions.setdefault(wd, _WatchGroup()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: InotifySubscription) -> None:
        group = self._subscriptions.get(subscription.wd)
        if group is not None and group.discard(subscription) and not group:
            del self._subscriptions[subscription.wd]
            if not subscription.dead and _LIBC is not None:
                _LIBC.inotify_rm_watch(self._fd, subscription.wd)
        if self.empty:
            self.close()

    def close(self) -> None:
        if self._fd < 0:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
        _HUBS.pop(self._loop, None)

    def _on_readable(self) -> None:
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError:
                log.exception("reading inotify events failed; waking every watcher")
                self._wake_all()
                return
            if not data:
                return
            self._dispatch(data)

    def _dispatch(self, data: bytes) -> None:
        offset = 0
        size = _EVENT_HEADER.size
        while offset + size <= len(data):
            wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
            raw_name = data[offset + size : offset + size + length].rstrip(b"\0")
            offset += size + length
            if mask & IN_Q_OVERFLOW:
                self._wake_all()
                continue
            group = self._subscriptions.get(wd)
            if not group:
                continue
            if mask & _DIRECTORY_GONE and not raw_name:
                for subscription in group:
                    subscription.dead = True
                    subscription.notify()
                if mask & IN_IGNORED:
                    del self._subscriptions[wd]
                continue
            for subscription in group.concerned(os.fsdecode(raw_name)):
                subscription.notify()

    def _wake_all(self) -> None:
        for group in self._subscriptions.values():
            for subscription in group:
                subscription.notify()


_HUBS: dict[asyncio.AbstractEventLoop, _InotifyHub] = {}


def inotify_available() -> bool:
    """The C library offers inotify (Linux), so :func:`subscribe` can work."""
    return _LIBC is not None


def subscribe(directory: Path, name: NameMatch) -> InotifySubscription:
    """Watch ``name`` (an entry name or a predicate on names) in ``directory`` on the running
    loop's shared inotify instance.

    Raises :class:`InotifyUnavailable` when inotify cannot be used, and
    ``FileNotFoundError`` when ``directory`` does not exist.
    """
    if _LIBC is None:
        raise InotifyUnavailable(errno.ENOSYS, "inotify is not available on this system")
    loop = asyncio.get_running_loop()
    hub = _HUBS.get(loop)
    if hub is None:
        hub = _InotifyHub(loop)
        _HUBS[loop] = hub
    try:
        return hub.subscribe(directory, name)
    except OSError:
        if hub.empty:
            hub.close()
        raise
