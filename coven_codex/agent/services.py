"""What the sessions share, and the shapes of the callables the daemon gives them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from coven_codex.agent.egress import AppendHook
from coven_codex.agent.job_names import JOB_PREFIX
from coven_codex.agent.processes import ProcessRegistry
from coven_codex.agent.slots import SlotPool
from coven_codex.agent.state import StateStore
from coven_codex.agent.writer import DaemonWriter
from coven_codex.codex.capabilities import DriverPlan
from coven_codex.codex.drivers import CodexDriver, EventSink, ImageInput
from coven_codex.entries import Attachment
from coven_codex.journal import Journal, Position
from coven_codex.metrics.instruments import Instruments
from coven_codex.settings import Settings


@dataclass(frozen=True, slots=True)
class PendingThought:
    """A thought routed to a session and not yet settled (delivered, or given up): its id, text and
    journal position, its attachments as written and, once checked, the images they are.

    The driver side's :class:`coven_codex.codex.drivers.base.TurnInput` is what reaches Codex of it.
    """

    entry_id: str
    text: str
    position: Position
    attachments: tuple[Attachment, ...] = ()
    images: tuple[ImageInput, ...] = ()
    options: ThreadOptions | None = None
    """The options of the thread the thought starts, if it starts one (checked when the session takes it)."""
    output_schema: dict[str, Any] | None = None
    """The JSON Schema its turn's final answer must match (the thought's ``output_schema``)."""


@dataclass(frozen=True, slots=True)
class ThreadOptions:
    """How a conversation's Codex thread is opened: its working directory (already checked against
    ``workspace_roots``; ``None``: the daemon's workspace), model, turn timeout and the thread it forks."""

    workspace: str | None = None
    model: str | None = None
    turn_timeout: float | None = None
    fork_from: str | None = None
    mode: str | None = None
    """The conversation's mode (``/mode``; a name of ``MODES``): Codex's approval policy and sandbox."""


class DriverFactory(Protocol):
    """Makes a conversation's CODEX driver (:mod:`coven_codex.codex.drivers`, not started yet); knows
    what the drivers it makes can do and how in-flight thoughts are resolved."""

    @property
    def plan(self) -> DriverPlan:
        """What the drivers it makes can do (:class:`~coven_codex.codex.capabilities.DriverPlan`)."""
        ...

    def __call__(self, conversation: str, options: ThreadOptions, sink: EventSink) -> CodexDriver:
        """The driver for ``conversation``'s thread, opened with ``options``, delivering its events to ``sink``."""
        ...

    async def aclose(self) -> None:
        """End the Codex processes the drivers share (shutdown, after every driver is closed)."""
        ...


class ClusterHooks(Protocol):
    """Where a session's state and rollout are mirrored when several daemons share the journal
    (:class:`coven_codex.cluster.ownership.Ownership`); every call is fenced by the conversation's lease."""

    async def save_state(self, conversation: str, data: bytes, pending: Iterable[Position]) -> None:
        """Mirror a state just saved locally; ``pending``: the journal positions of its unfinished thoughts."""
        ...

    async def copy_rollout(self, conversation: str, thread_id: str, rollout: Path, end: int) -> None:
        """Copy the rollout's first ``end`` bytes before egress translates them."""
        ...


class RolloutLocator(Protocol):
    """Finds the rollout file of a Codex thread."""

    async def __call__(self, thread_id: str) -> Path: ...


@dataclass(slots=True)
class SessionServices:
    """What every session shares: the daemon's journal, stores, pool and settings."""

    settings: Settings
    journal: Journal
    store: StateStore
    slots: SlotPool
    """The ``max_sessions`` bound (chat conversations)."""
    processes: ProcessRegistry
    make_driver: DriverFactory
    locate_rollout: RolloutLocator
    finish_thought: Callable[[Position], None]
    saved_cursor: Callable[[], Position]
    writer: DaemonWriter
    """Every daemon entry goes through it: a deterministic id is written once, by whoever is first."""
    on_append: AppendHook | None = None
    on_storage_failure: Callable[[BaseException], None] | None = None
    """A session's storage failed (see :mod:`coven_codex.agent.storage`): the daemon stops."""
    job_slots: SlotPool | None = None
    """The ``max_jobs`` bound on jobs (conversations ``job:<id>``); ``None``: they share :attr:`slots`."""

    def slots_of(self, conversation: str) -> SlotPool:
        """The slot pool bounding ``conversation``: :attr:`job_slots` for a job, else :attr:`slots`."""
        if self.job_slots is not None and conversation.startswith(JOB_PREFIX):
            return self.job_slots
        return self.slots

    cluster: ClusterHooks | None = None
    """Several daemons share the journal: mirror state and rollout (docs/distributed.md)."""
    on_lease_lost: Callable[[str], None] | None = None
    """A session's write was refused for lack of the conversation's lease: the daemon drops it."""
    instruments: Instruments | None = None
    """The process's metrics (``metrics_port``, :mod:`coven_codex.metrics`), told of thoughts and Codex failures."""
