"""A :class:`~coven_codex.agent.link.CodexLink` over the CODEX drivers (:mod:`coven_codex.codex.drivers`).

The drivers own the wire (app-server JSON-RPC, exec processes), the per-turn clocks (turn
timeout, stream-idle timeout), approval policy and timeouts, and process-tree shutdown. This
adapter only translates their events into the session's :data:`~coven_codex.agent.link.LinkEvent`
and their errors into :class:`~coven_codex.agent.link.LinkError`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Callable

from coven_codex.agent.limits import cut
from coven_codex.agent.link import (
    ApprovalAsked,
    ApprovalSettled,
    Delta,
    LinkError,
    LinkEvent,
    ProcessExited,
    ThreadReady,
    TurnEnded,
    TurnStarted,
    TurnTimedOut,
)
from coven_codex.codex import drivers as d

OUTSIDE_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""Signals that end Codex from outside (an operator, the OOM killer), unlike a crash (SIGSEGV, SIGABRT)."""


def killed_from_outside(returncode: int | None) -> bool:
    """Codex ended by one of :data:`OUTSIDE_SIGNALS`: a thought being handed over is not to blame."""
    return returncode is not None and returncode < 0 and -returncode in OUTSIDE_SIGNALS


log = logging.getLogger(__name__)

DriverFactory = Callable[[d.EventSink], d.CodexDriver]
"""Builds a driver delivering its events to the given sink (see :func:`coven_codex.codex.drivers.create_driver`)."""


class DriverLink:
    """A :class:`~coven_codex.agent.link.CodexLink` over one CODEX driver; see the module docstring."""

    def __init__(self, make_driver: DriverFactory) -> None:
        self._events: asyncio.Queue[LinkEvent | None] = asyncio.Queue()
        self._driver = make_driver(self._on_event)
        self._closed = False

    # -- what the session asks about -------------------------------------------------------------
    @property
    def persistent(self) -> bool:
        """One app-server process serves every turn; ``False`` for exec (a process per turn)."""
        return self._driver.kind == "app-server"

    @property
    def supports_steer(self) -> bool:
        """The driver can add a thought to a running turn (app-server only)."""
        return self._driver.supports_steer

    @property
    def records_client_id(self) -> bool:
        """The driver's Codex records our thought ids in the rollout."""
        return self._driver.records_client_id

    @property
    def thread_id(self) -> str | None:
        """The Codex thread, once the driver knows it."""
        return self._driver.thread_id

    @property
    def pids(self) -> list[int]:
        """The driver's process-group leaders now running."""
        return self._driver.pids

    # -- calls ----------------------------------------------------------------------------------------
    async def open(self, resume_thread: str | None) -> None:
        """Start the driver and start or resume the thread; a driver error becomes :class:`LinkError`."""
        try:
            await self._driver.start(resume_thread)
        except d.DriverError as exc:
            raise LinkError(str(exc)) from None

    async def send(self, thought_id: str, text: str, images: tuple[d.ImageInput, ...] = ()) -> None:
        """Hand a thought and its images to the driver; a driver error becomes a ``delivered`` :class:`LinkError`."""
        await self._submit(thought_id, text, images)

    async def steer(self, thought_id: str, text: str, images: tuple[d.ImageInput, ...] = ()) -> str:
        """Add a thought to the running turn; returns how it went (``"steered"``, ``"started"`` or ``"queued"``)."""
        how = await self._submit(thought_id, text, images)
        if how != "steered":
            log.info("thought %s did not join a running turn: %s", cut(thought_id), how)
        return how

    @property
    def busy(self) -> bool:
        """A turn is running in Codex."""
        return self._driver.busy

    @property
    def queued_ids(self) -> tuple[str, ...]:
        """Thought ids the driver holds to start as its next turns."""
        return self._driver.queued

    async def _submit(self, thought_id: str, text: str, images: tuple[d.ImageInput, ...]) -> d.Submission:
        try:
            return await self._driver.submit(text, thought_id, images)
        except d.DriverError as exc:
            # The driver may have written the request before it failed: Codex may have it.
            killed = killed_from_outside(exc.returncode)
            raise LinkError(str(exc), delivered=True, killed=killed) from None

    async def interrupt(self) -> None:
        """Interrupt the running turn (the driver kills the tree if it does not stop in time)."""
        await self._driver.cancel()

    async def answer(self, request_id: str, approve: bool) -> None:
        """Answer an approval request; a driver error becomes :class:`LinkError`."""
        try:
            await self._driver.answer_approval(request_id, approve)
        except d.DriverError as exc:
            raise LinkError(str(exc)) from None

    async def close(self) -> None:
        """Close the driver (every process tree) and end :meth:`events`; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        await self._driver.aclose()
        self._events.put_nowait(None)

    # -- events ---------------------------------------------------------------------------------------
    async def events(self) -> AsyncIterator[LinkEvent]:
        """The translated driver events, until :meth:`close`."""
        while (event := await self._events.get()) is not None:
            yield event

    async def _on_event(self, event: d.DriverEvent) -> None:
        translated = _translate(event)
        if translated is not None:
            self._events.put_nowait(translated)


def _translate(event: d.DriverEvent) -> LinkEvent | None:
    if isinstance(event, d.ThreadStarted):
        if event.note:
            log.warning("%s", event.note)
        return ThreadReady(event.thread_id)
    if isinstance(event, d.TurnStarted):
        return TurnStarted(event.turn_id)
    if isinstance(event, d.TurnExpired):
        return TurnTimedOut(event.error)
    if isinstance(event, d.TurnFinished):
        error = event.error
        message = error.message if error else None
        return TurnEnded(event.turn_id, event.status, message, classified=error, usage=event.usage)
    if isinstance(event, d.Delta):
        return Delta(event.item_id, event.text)
    if isinstance(event, d.ApprovalRequested):
        return ApprovalAsked(event.request_id, event.action, event.call_id)
    if isinstance(event, d.ApprovalResolved):
        return ApprovalSettled(event.request_id, event.approved, event.by)
    if isinstance(event, d.DriverFailed):
        return ProcessExited(event.returncode, event.error.message, classified=event.error)
    return None  # AgentMessageCompleted: the rollout is the record of replies
