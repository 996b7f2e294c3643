"""The messages on a conversation's inbox: everything that changes a conversation arrives as one.

Ingress routes thoughts, resets, cancels and approvals; the slot pool grants a slot or asks for
it back; the child task starting Codex reports its outcome; the driver's events come as they are
emitted; egress says a thought was recorded; the manager asks for a stop. Only the
conversation's own task reads them (:mod:`coven_codex.conversation.session`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from coven_codex.codex.drivers import CodexDriver, DriverError, DriverEvent
from coven_codex.codex.thought import Thought
from coven_codex.entries import ApprovalEntry, CancelEntry, ConversationSettings
from coven_codex.journal import Position


@dataclass(frozen=True, slots=True)
class DriverMessage:
    """An event of a driver (handled only if that driver is still the session's open one)."""

    driver: CodexDriver
    event: DriverEvent


@dataclass(frozen=True, slots=True)
class Evict:
    """The slot pool asks for the slot of this idle conversation (another one waits for it)."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """Egress saw Codex record a user message carrying this client id."""

    client_id: str


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A thought reused the id of an earlier, different thought (at another journal position)."""

    entry_id: str
    position: Position


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """A ``reset`` entry routed to this session: end the thread once what came before it is done."""

    entry_id: str
    position: Position
    cwd: str | None = None
    """The next thread's working directory as the reset names it (checked when the reset arrives)."""
    resume_thread: str | None = None
    """The Codex thread the conversation takes over once its own has ended (chat ``/resume``)."""
    settings: ConversationSettings | None = None
    """A ``settings`` entry rather than a reset: the values it changes (all ``None``: a question)."""


@dataclass(frozen=True, slots=True)
class Release:
    """Another conversation takes this one's thread over (the session manager asks): let it go once
    what runs is interrupted, say where it went, and set ``done``."""

    thread_id: str
    to: str
    """The conversation that takes the thread over."""
    cause: str
    """The journal position of the thought or reset that takes it (the id of the ``thread_moved`` status)."""
    done: asyncio.Future[None]


@dataclass(frozen=True, slots=True)
class DropQueued:
    """A ``cancel`` with ``queued`` written before this run: drop the thoughts queued before it (no interrupt)."""


@dataclass(frozen=True, slots=True)
class SlotGranted:
    """The slot this session waited for is its own now."""


@dataclass(frozen=True, slots=True)
class CodexOpened:
    """The child task starting ``driver`` reports it started."""

    driver: CodexDriver


@dataclass(frozen=True, slots=True)
class CodexFailed:
    """The child task starting ``driver`` reports the start failed."""

    driver: CodexDriver
    error: DriverError


@dataclass(frozen=True, slots=True)
class Stop:
    """Shutdown: interrupt the running turn, close Codex by ``by`` (``time.monotonic()``) at the latest."""

    by: float


LinkMessage = DriverMessage | Evict | SlotGranted | CodexOpened | CodexFailed | Stop
"""Messages about the link to Codex."""
Queued = Thought | ResetRequest | Release
"""What waits in a conversation's queue, in order: thoughts, resets, and a release of its thread (put first)."""
Message = Queued | CancelEntry | ApprovalEntry | Recorded | Duplicate | DropQueued | LinkMessage
