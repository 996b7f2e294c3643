"""A conversation's own timers: the interrupt's grace, the idle release of its thread, the restart
backoff, the stop's deadline. They are the timeout of the conversation's one wait on its inbox.
An idle thread is also let go when the slot pool needs its slot for another conversation.

The turn deadline, the stream-idle bound and the approval timeout are the drivers'
(:mod:`coven_codex.codex.drivers`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from coven_codex.agent.state import SessionState
from coven_codex.conversation.closing import Closing
from coven_codex.conversation.handover import HandOver
from coven_codex.conversation.ledger import TurnLedger
from coven_codex.conversation.link import CodexLink
from coven_codex.conversation.messages import Message
from coven_codex.conversation.outbox import Outbox
from coven_codex.conversation.stopping import Stopping
from coven_codex.entries import StatusEntry
from coven_codex.settings import Settings

log = logging.getLogger(__name__)

STOP_GRACE_FACTOR = 2.0
"""After an interrupt, the driver ends a stuck turn within ``kill_grace``; we close the driver after twice that."""


class Timers:
    """When the conversation must act without a message, and what it does then (module docstring)."""

    def __init__(
        self,
        state: SessionState,
        settings: Settings,
        *,
        link: CodexLink,
        ledger: TurnLedger,
        handover: HandOver,
        closing: Closing,
        stopping: Stopping,
        outbox: Outbox,
        busy: Callable[[], bool],
        name: str,
    ) -> None:
        self._state = state
        self._settings = settings
        self._link = link
        self._ledger = ledger
        self._handover = handover
        self._closing = closing
        self._stopping = stopping
        self._outbox = outbox
        self._busy = busy
        self._name = name

    def _interrupt_due(self) -> float | None:
        """When the turn asked to stop is given up on, if one was (and a driver is open to stop it)."""
        turn = self._ledger.turn
        if turn is None or self._link.codex is None or turn.interrupt_sent_at is None:
            return None
        return turn.interrupt_sent_at + STOP_GRACE_FACTOR * self._settings.kill_grace

    async def next_message(self, inbox: asyncio.Queue[Message]) -> Message | None:
        """The conversation's one wait: its next message, or ``None`` when a timer is due first."""
        timeout = self.next_timeout()
        if timeout is None:
            return await inbox.get()
        try:
            # Not asyncio.wait_for: on Python 3.11 it returns the message instead of raising when the
            # get completes in the same step as a cancel, and the session would not stop.
            async with asyncio.timeout(max(timeout, 0.0)):
                return await inbox.get()
        except TimeoutError:
            return None

    def next_timeout(self) -> float | None:
        """Seconds until the next timer is due (``None``: none runs)."""
        deadlines: list[float] = []
        interrupt = self._interrupt_due()
        if interrupt is not None:
            deadlines.append(interrupt)
        codex = self._link.codex
        if codex is not None and codex.idle_since is not None:
            deadlines.append(codex.idle_since + self._settings.release_thread_after)
        if self._link.retries.not_before is not None:
            deadlines.append(self._link.retries.not_before)
        stop_by = self._stopping.deadline()
        if stop_by is not None:
            deadlines.append(stop_by)
        return min(deadlines) - time.monotonic() if deadlines else None

    async def check(self) -> None:
        """Act on the timers that are due (the backoff's end is the next step's: ``_advance``)."""
        now = time.monotonic()
        if self._stopping.stopping:
            stop_by = self._stopping.deadline()
            if stop_by is not None and now >= stop_by:
                await self._stopping.finish()
            return
        interrupt = self._interrupt_due()
        if interrupt is not None and now >= interrupt:
            log.warning("conversation %r: the turn did not stop after interrupt; ending Codex", self._name)
            await self._closing.end(reason="turn did not stop")
        await self._release_if_idle(now)

    async def ready_and_idle(self) -> None:
        """Codex is open with nothing to do: a persistent driver's idle clock starts (the thread is let
        go when it runs out); exec's driver ends now."""
        codex = self._link.codex
        assert codex is not None
        if codex.driver.persistent:
            self._link.mark_idle()
        else:
            await self._closing.end(reason="turn over")

    async def _release_if_idle(self, now: float) -> None:
        """Let the thread go once the conversation has been idle for ``release_thread_after``: no
        turn running, nothing queued, no approval pending. Its state (thread id, rollout, cursor)
        stays; the next thought resumes the thread (``thread/resume``), on the Codex process the
        pool keeps warm when it is still running (docs/architecture.md, "Timeouts and limits")."""
        codex = self._link.codex
        if (
            codex is not None
            and codex.idle_since is not None
            and not self._busy()
            and not codex.approvals
            and not codex.driver.busy
            and self._handover.unconfirmed is None
            and now >= codex.idle_since + self._settings.release_thread_after
        ):
            log.info(
                "conversation %r: idle for %gs; letting its Codex thread go (the next thought resumes it)",
                self._name,
                self._settings.release_thread_after,
            )
            await self._closing.end(reason="idle")
            await self._outbox.emit(
                StatusEntry(
                    state="session_ended",
                    thread_id=self._state.thread_id,
                    text="idle: the Codex thread was let go; the next thought resumes it",
                )
            )

    async def evicted(self) -> None:
        """The slot pool needs the idle conversation's slot for another: let its thread go now."""
        log.info("conversation %r: ending its idle Codex process for another conversation", self._name)
        await self._closing.end(reason="slot needed by another conversation")
        # As when it is let go for being idle: the chat, and whoever waits for every thread to
        # be let go (benchmarks/bench_scale.py above max_sessions), learn it from the journal.
        await self._outbox.emit(
            StatusEntry(
                state="session_ended",
                thread_id=self._state.thread_id,
                text="idle: the Codex thread was let go for a conversation waiting for a turn slot"
                f" ({self._link.slot_bound()}); the next thought resumes it",
            )
        )
