"""The bound on conversations running a turn (``max_sessions``), with eviction of idle holders.

A session holds a slot while its Codex thread is open (with the app-server driver the thread
costs no process of its own: every thread is on the shared app-server). When every slot is taken, a session that
needs one waits (first come, first served); to keep the wait short, the pool asks the holder
that has been idle longest to give its slot back (its session ends the process if it is
still idle, exactly as the idle reaper would). Busy holders are never disturbed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from coven_codex.support.limits import cut

log = logging.getLogger(__name__)


class SlotPool:
    """At most ``size`` named holders at once; waiters are served in order; see the module docstring."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a slot pool needs at least one slot")
        self.size = size
        self._holders: set[str] = set()
        self._waiters: OrderedDict[str, asyncio.Future[None]] = OrderedDict()
        self._idle: OrderedDict[str, tuple[float, Callable[[], None]]] = OrderedDict()

    @property
    def in_use(self) -> int:
        """How many slots are held."""
        return len(self._holders)

    @property
    def waiting(self) -> int:
        """How many sessions wait for a slot."""
        return len(self._waiters)

    def holds(self, name: str) -> bool:
        """``name`` holds a slot."""
        return name in self._holders

    def try_acquire(self, name: str) -> bool:
        """Take a slot at once if one is free (and nobody waits before us)."""
        if name in self._holders:
            return True
        if len(self._holders) < self.size and not self._waiters:
            self._holders.add(name)
            return True
        return False

    async def acquire(self, name: str) -> None:
        """Wait for a slot; see :meth:`try_acquire` for the fast path."""
        if self.try_acquire(name):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[name] = future
        self._evict_idle()
        try:
            await future
        except BaseException:
            self._waiters.pop(name, None)
            if future.done() and not future.cancelled():
                # We were granted the slot but cancelled before taking it: hand it on.
                self._holders.discard(name)
                self._grant()
            raise

    def release(self, name: str) -> None:
        """Give ``name``'s slot back (if it holds one) and grant it to the first waiter."""
        self._idle.pop(name, None)
        if name in self._holders:
            self._holders.discard(name)
            self._grant()

    def mark_idle(self, name: str, evict: Callable[[], None]) -> None:
        """The holder ``name`` is idle; ``evict`` asks it to give its slot back."""
        self._idle[name] = (time.monotonic(), evict)
        self._idle.move_to_end(name)
        if self._waiters:
            self._evict_idle()

    def mark_busy(self, name: str) -> None:
        """The holder ``name`` is busy again: it is no longer asked to give its slot back."""
        self._idle.pop(name, None)

    def _grant(self) -> None:
        while self._waiters and len(self._holders) < self.size:
            name, future = self._waiters.popitem(last=False)
            if future.done():
                continue
            self._holders.add(name)
            future.set_result(None)
        if self._waiters:
            self._evict_idle()

    def _evict_idle(self) -> None:
        if not self._idle or len(self._holders) < self.size:
            return
        name, (_since, evict) = self._idle.popitem(last=False)
        log.info("asking idle session %r to end its Codex process: another conversation needs the slot", cut(name))
        evict()
