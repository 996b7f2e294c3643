"""What a session needs from a running Codex: the *link* interface the agent codes against.

A link wraps one of the CODEX drivers (app-server or exec, see :mod:`coven_codex.agent.links`)
and reduces it to a few calls and a stream of :data:`LinkEvent`. Sessions never talk to a
driver directly, so the orchestration logic does not depend on which driver runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from coven_codex.codex.drivers.base import ImageInput
from coven_codex.codex.errors import ClassifiedError
from coven_codex.entries import TokenUsage


@dataclass(frozen=True, slots=True)
class ThreadReady:
    """Codex told us the thread id (the session finds the rollout file through its ``RolloutLocator``)."""

    thread_id: str


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """Codex started a turn (``turn_id`` when the driver knows it)."""

    turn_id: str | None


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """A turn is over; ``status`` is ``completed``, ``interrupted`` or ``failed``."""

    turn_id: str | None
    status: str
    error: str | None = None
    classified: ClassifiedError | None = None
    """The driver's classification of ``error``, when it made one."""
    usage: TokenUsage | None = None
    """The tokens the turn used, when the driver reports them (exec's ``turn.completed``)."""


@dataclass(frozen=True, slots=True)
class TurnTimedOut:
    """The running turn ran out of time and is being ended; its :class:`TurnEnded` follows."""

    error: ClassifiedError


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of a reply being streamed (ephemeral; the complete reply comes from the rollout)."""

    item_id: str | None
    text: str


@dataclass(frozen=True, slots=True)
class ApprovalAsked:
    """Codex asks permission for ``action``; answer with :meth:`CodexLink.answer`."""

    request_id: str
    action: str
    call_id: str | None


@dataclass(frozen=True, slots=True)
class ApprovalSettled:
    """An approval request was answered without the chat: by the policy or by its timeout."""

    request_id: str
    approved: bool
    by: str


@dataclass(frozen=True, slots=True)
class ProcessExited:
    """The Codex process ended without being asked to (the driver failed); the session restarts it later."""

    returncode: int | None
    detail: str
    classified: ClassifiedError | None = None


LinkEvent = (
    ThreadReady | TurnStarted | TurnTimedOut | TurnEnded | Delta | ApprovalAsked | ApprovalSettled | ProcessExited
)


class LinkError(RuntimeError):
    """A request to Codex failed; ``delivered`` says whether Codex may have received the input."""

    def __init__(self, message: str, *, delivered: bool = False, killed: bool = False) -> None:
        super().__init__(message)
        self.delivered = delivered
        self.killed = killed
        """Codex was killed from outside (SIGKILL, SIGTERM, ...): not the thought's fault."""


class CodexLink(Protocol):
    """One conversation's connection to Codex."""

    @property
    def persistent(self) -> bool:
        """``True`` if one process serves many turns (app-server); ``False`` for one per turn (exec)."""
        ...

    @property
    def supports_steer(self) -> bool:
        """A thought can join a running turn (:meth:`steer`); only the app-server can."""
        ...

    @property
    def records_client_id(self) -> bool:
        """Codex records our thought id in the rollout (in-flight thoughts resolve by id, not count)."""
        ...

    @property
    def thread_id(self) -> str | None:
        """The Codex thread, once known."""
        ...

    @property
    def pids(self) -> list[int]:
        """Process-group leaders currently running for this link."""
        ...

    async def open(self, resume_thread: str | None) -> None:
        """Start Codex (for persistent links) and start or resume the thread."""
        ...

    async def send(self, thought_id: str, text: str, images: tuple[ImageInput, ...] = ()) -> None:
        """Start a turn with ``text`` (and ``images``); returns once Codex has the input (bytes written / accepted)."""
        ...

    async def steer(self, thought_id: str, text: str, images: tuple[ImageInput, ...] = ()) -> str:
        """Add ``text`` to the running turn: ``"steered"``; or, if the turn had just ended,
        ``"started"`` (a new turn) or ``"queued"`` (the link starts it as its next turn)."""
        ...

    @property
    def queued_ids(self) -> tuple[str, ...]:
        """Thought ids the link holds back to start as the next turns by itself."""
        ...

    @property
    def busy(self) -> bool:
        """A turn is running in Codex."""
        ...

    async def interrupt(self) -> None:
        """Ask Codex to stop the running turn; its end arrives as a :class:`TurnEnded` event."""
        ...

    async def answer(self, request_id: str, approve: bool) -> None:
        """Answer the approval request ``request_id``; raise :class:`LinkError` if that fails."""
        ...

    def events(self) -> AsyncIterator[LinkEvent]:
        """Events until the link is closed; ends after a :class:`ProcessExited` of a persistent link."""
        ...

    async def close(self) -> None:
        """End every process of this link (whole trees); safe to call twice."""
        ...
