"""Opening Codex for a conversation: the wait for a turn slot, the start in a child task, its outcome.

The conversation moves ``IDLE`` → ``WAITING_FOR_SLOT`` (all slots in use: the chat is told) →
``STARTING`` → ``READY`` (or ``BACKING_OFF`` when the start failed: the chat is told once per
distinct failure). The slot's grant and the start's outcome arrive as messages on the inbox
(:mod:`coven_codex.conversation.messages`); this part says what each means. The driver, slot and
backoff themselves are the link's (:mod:`coven_codex.conversation.link`).
"""

from __future__ import annotations

import asyncio
import logging

from coven_codex.agent.state import SessionState
from coven_codex.codex.drivers import CodexDriver, DriverError, DriverEvent
from coven_codex.codex.errors import classify
from coven_codex.conversation.link import CodexLink
from coven_codex.conversation.outbox import Outbox
from coven_codex.conversation.phases import Phase, PhaseMachine
from coven_codex.entries import StatusEntry

log = logging.getLogger(__name__)


class Opening:
    """Takes a slot, starts Codex, and reports the start in the chat (module docstring)."""

    def __init__(self, state: SessionState, link: CodexLink, outbox: Outbox, phases: PhaseMachine, name: str) -> None:
        self._state = state
        self._link = link
        self._outbox = outbox
        self._phases = phases
        self._name = name

    async def open(self, group: asyncio.TaskGroup | None) -> None:
        """Start a driver for the conversation's thread once it has a slot (both reported back as messages)."""
        if self._link.try_slot():
            self._start(group)
            return
        # Wait in a task of our own: the inbox is still read meanwhile (a cancel may drop the thought).
        self._phases.move(Phase.WAITING_FOR_SLOT)
        await self._outbox.emit(
            StatusEntry(
                state="session_waiting",
                text=f"waiting for a free turn slot ({self._link.slot_bound()}, all in use); your thought is "
                "queued and will be delivered in order",
            )
        )
        if group is not None:
            self._link.wait_for_slot(group)

    def slot_granted(self, group: asyncio.TaskGroup | None, *, wanted: bool) -> None:
        """The slot pool granted the slot waited for (``wanted``: a thought still waits for it)."""
        self._link.slot_wait = None
        if not self._phases.is_in(Phase.WAITING_FOR_SLOT) or not wanted:
            self._link.release_slot()  # the thoughts it was for were cancelled meanwhile
            return
        self._start(group)

    def not_wanted(self) -> None:
        """No thought waits for Codex any more (cancelled): a wait for a slot ends (``IDLE``)."""
        if self._link.slot_wait is not None:
            self._link.stop_waiting()
            self._phases.move(Phase.IDLE)

    def _start(self, group: asyncio.TaskGroup | None) -> None:
        """The slot is ours: start Codex in a child task, which reports :class:`CodexOpened` or
        :class:`CodexFailed` (a cancel of the session does not wait for the start)."""
        assert group is not None
        self._phases.move(Phase.STARTING)
        self._link.start(group)

    async def failed(self, driver: CodexDriver, exc: DriverError) -> None:
        """The start failed: back off (the chat is told, unless it failed the same way the last time)."""
        await self._link.start_failed(driver)
        if not self._phases.is_in(Phase.STARTING):
            # Shutdown ended the Codex that was starting: not a failure the chat needs to see.
            log.debug("conversation %r: Codex start cut short by shutdown (%s)", self._name, exc)
            return
        delay = self._link.restart_later()
        self._phases.move(Phase.BACKING_OFF)
        c = classify(str(exc))
        retries = self._link.retries
        if str(exc) != retries.last_start_error:
            # Retries that fail the same way are logged, not written to the chat each time.
            retries.last_start_error = str(exc)
            await self._outbox.error(c.code, f"could not start Codex: {c.message}", c.hint)
        else:
            log.warning(
                "conversation %r: Codex still fails to start (%s); next try in %.1fs", self._name, c.message, delay
            )

    async def opened(self, driver: CodexDriver) -> list[DriverEvent] | None:
        """The start succeeded: ``READY`` (the chat is told which thread); returns the driver's events
        that came before, for the conversation to act on (``None``: shutdown began meanwhile, the driver
        is closed)."""
        if not self._phases.is_in(Phase.STARTING):
            # Shutdown began while Codex was starting: end it here, it will never get a turn.
            await self._link.start_failed(driver)
            return None
        resume = self._state.thread_id
        early = self._link.opened(driver)
        self._phases.move(Phase.READY)
        if driver.persistent:
            resumed = resume is not None and driver.thread_id == resume
            thread = driver.thread_id or resume
            text = f"Codex session resumed (thread {thread})" if resumed else f"Codex session started (thread {thread})"
            await self._outbox.emit(
                StatusEntry(state="session_resumed" if resumed else "session_started", thread_id=thread, text=text)
            )
        return early
