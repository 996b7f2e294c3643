"""What a driver tells its conversation: the events, in the order a turn produces them, and their delivery.

:class:`ThreadStarted`, :class:`TurnStarted`, :class:`Delta` (app-server, if ``stream_deltas``),
:class:`ApprovalRequested` / :class:`ApprovalResolved`, :class:`AgentMessageCompleted`,
:class:`TurnFinished`; :class:`TurnExpired` when a turn clock runs out, and :class:`DriverFailed` at any
time. A driver hands them to its :data:`EventSink` one at a time, in order, from the
:class:`EventDispatcher`'s own task (see :mod:`coven_codex.codex.drivers.base`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from coven_codex.codex.errors import ClassifiedError
from coven_codex.entries import TokenUsage

log = logging.getLogger(__name__)

TurnStatus = Literal["completed", "interrupted", "failed"]
Submission = Literal["started", "steered", "queued"]
ResolvedBy = Literal["chat", "policy", "timeout"]


@dataclass(frozen=True, slots=True)
class ThreadStarted:
    """The Codex thread id is known: persist it now so a restart resumes this thread.

    ``resumed`` is ``False`` when a new thread was started, including when resuming the
    requested one failed (the reason is in ``note``).
    """

    thread_id: str
    resumed: bool
    note: str | None = None


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """A turn started in Codex; ``client_ids``: the thoughts it carries so far."""

    turn_id: str | None
    client_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """A turn ended. ``client_ids``: the thoughts it carried (started with it or steered in)."""

    turn_id: str | None
    status: TurnStatus
    client_ids: tuple[str, ...]
    error: ClassifiedError | None = None
    usage: TokenUsage | None = None
    """The tokens the turn used, when Codex reported them to the driver (exec's ``turn.completed``)."""

    @property
    def ok(self) -> bool:
        """The turn completed (not interrupted, not failed)."""
        return self.status == "completed"


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """Codex asks permission for ``action`` (e.g. ``run a command: touch x``)."""

    request_id: str
    action: str
    call_id: str | None


@dataclass(frozen=True, slots=True)
class ApprovalResolved:
    """An approval request was answered, by the chat, by the policy or by the timeout."""

    request_id: str
    approved: bool
    by: ResolvedBy


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of assistant text as it streams (app-server only; ephemeral)."""

    item_id: str
    text: str


@dataclass(frozen=True, slots=True)
class AgentMessageCompleted:
    """An assistant message is complete (the app-server's ``item/completed``; exec's item event)."""

    item_id: str
    text: str


@dataclass(frozen=True, slots=True)
class DriverFailed:
    """The driver cannot go on (its Codex process died or stopped answering).

    ``undelivered``: client ids of queued thoughts that never reached Codex. ``in_flight``:
    client ids of the turn that was running; they may or may not have reached Codex (the
    rollout tells: the app-server records them as ``client_id``).
    """

    error: ClassifiedError
    returncode: int | None
    undelivered: tuple[str, ...] = ()
    in_flight: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnExpired:
    """The running turn ran out of time (``OUTER_TIMEOUT`` / ``STREAM_IDLE``): the driver is ending it
    now; its :class:`TurnFinished` (failed, with the same error) follows once it has ended."""

    turn_id: str | None
    error: ClassifiedError


DriverEvent = (
    ThreadStarted
    | TurnStarted
    | TurnExpired
    | TurnFinished
    | ApprovalRequested
    | ApprovalResolved
    | Delta
    | AgentMessageCompleted
    | DriverFailed
)
EventSink = Callable[[DriverEvent], Awaitable[None]]


def queue_sink(queue: asyncio.Queue[DriverEvent]) -> EventSink:
    """An :data:`EventSink` that puts every event on ``queue``."""

    async def put(event: DriverEvent) -> None:
        await queue.put(event)

    return put


@dataclass(slots=True)
class EventDispatcher:
    """Delivers events to the sink in order from its own task."""

    sink: EventSink
    _queue: asyncio.Queue[tuple[DriverEvent, asyncio.Future[None] | None]] = field(default_factory=asyncio.Queue)

    def emit(self, event: DriverEvent) -> None:
        """Queue ``event`` for the sink without waiting for it to be handled."""
        self._queue.put_nowait((event, None))

    async def deliver(self, event: DriverEvent) -> None:
        """Emit ``event`` and wait until the sink has handled it."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((event, done))
        await done

    async def run(self) -> None:
        """Hand queued events to the sink one at a time; a sink that raises is logged and skipped."""
        while True:
            event, done = await self._queue.get()
            try:
                await self.sink(event)
            except Exception:
                log.exception("the driver's event sink failed on %s", type(event).__name__)
            finally:
                if done is not None and not done.done():
                    done.set_result(None)

    async def drain(self) -> None:
        """Deliver what is queued (used while closing, after :meth:`run` was cancelled)."""
        while not self._queue.empty():
            event, done = self._queue.get_nowait()
            with contextlib.suppress(Exception):
                await self.sink(event)
            if done is not None and not done.done():
                done.set_result(None)
