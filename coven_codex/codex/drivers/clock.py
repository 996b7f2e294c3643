"""The turn clock: a running turn's two deadlines (the turn timeout and the stream-idle timeout)."""

from __future__ import annotations

import asyncio
import contextlib

from coven_codex.codex.errors import ClassifiedError, classify


def timeout_error(turn_timeout: float) -> ClassifiedError:
    """The error of a turn that ran longer than ``turn_timeout`` (``OUTER_TIMEOUT``)."""
    return classify(f"the turn ran longer than the turn timeout ({turn_timeout:.0f}s)", exit_code=124)


def idle_error(idle_timeout: float) -> ClassifiedError:
    """The error of a turn silent for ``idle_timeout`` seconds (``STREAM_IDLE``)."""
    return classify(f"no output from Codex for {idle_timeout:.0f}s: stream idle, turn abandoned")


class TurnClock:
    """Deadlines of one running turn: the turn timeout and the stream-idle timeout.

    :meth:`expired` sleeps until the next deadline (no polling while nothing happens) and
    returns the error once one has passed. Activity pushes the idle deadline back; while
    approvals are pending the idle deadline does not apply.
    """

    def __init__(self, turn_timeout: float, idle_timeout: float) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._turn_timeout = turn_timeout
        self._idle_timeout = idle_timeout
        self._deadline = loop.time() + turn_timeout
        self._last_activity = loop.time()
        self._waiting_for_approval = 0
        self._changed = asyncio.Event()

    def touch(self) -> None:
        """Codex showed activity: push the idle deadline back."""
        self._last_activity = self._loop.time()

    def approval_started(self) -> None:
        """An approval is pending: the idle deadline does not apply until it ends."""
        self._waiting_for_approval += 1
        self._changed.set()

    def approval_ended(self) -> None:
        """An approval was answered: activity, and the idle deadline applies again once none is pending."""
        self._waiting_for_approval = max(0, self._waiting_for_approval - 1)
        self.touch()
        self._changed.set()

    async def expired(self) -> ClassifiedError:
        """Sleep until the turn or idle deadline passes; returns the matching error."""
        while True:
            now = self._loop.time()
            if now >= self._deadline:
                return timeout_error(self._turn_timeout)
            idle_at = self._last_activity + self._idle_timeout
            if not self._waiting_for_approval and now >= idle_at:
                return idle_error(self._idle_timeout)
            wake = self._deadline if self._waiting_for_approval else min(self._deadline, idle_at)
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.0, wake - now))
