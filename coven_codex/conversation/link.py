"""A conversation's link to Codex: its driver, its turn slot, the start of Codex, the restart backoff.

The link owns what lasts as long as the driver does (approvals asked in the chat, the idle
clock) and what outlives it (failures counted for the restart backoff). Starting Codex runs in a
child task that reports :class:`~coven_codex.conversation.messages.CodexOpened` or
:class:`~coven_codex.conversation.messages.CodexFailed` on the conversation's inbox, as the slot
pool's grant comes as :class:`~coven_codex.conversation.messages.SlotGranted`: the conversation's
task decides what they mean.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coven_codex.agent.services import SessionServices
from coven_codex.agent.state import SessionState
from coven_codex.codex.drivers import CodexDriver, DriverError, DriverEvent, ThreadOptions, ThreadStarted, TurnStarted
from coven_codex.conversation.messages import CodexFailed, CodexOpened, DriverMessage, Evict, Message, SlotGranted
from coven_codex.support.backoff import backoff


@dataclass(slots=True)
class Retries:
    """What the conversation remembers of failures: when it may try again, and how often Codex failed."""

    not_before: float | None = None
    """Nothing is handed over and no Codex started before this: the restart or a hand-over's backoff."""
    codex_failures: int = 0
    """Consecutive failures of Codex itself (failed starts, unexpected exits): the restart backoff."""
    resume: bool = False
    """Codex died: start it again (resuming the thread) once the backoff is over, even with no thought waiting."""
    last_start_error: str | None = None
    """How the last start of Codex failed (a start failing the same way again is logged, not written to the chat)."""


@dataclass(eq=False, slots=True)
class OpenCodex:
    """The CODEX driver the conversation has open, and what lasts exactly as long as it does."""

    driver: CodexDriver
    approvals: set[str] = field(default_factory=set)
    """Approval requests asked in the chat and not answered yet."""
    idle_since: float | None = None
    """Since when no turn ran and no thought waited (a persistent driver: idle release, eviction)."""


@dataclass(slots=True)
class Starting:
    """A driver being started by a child task, and its events that came before the start's report."""

    driver: CodexDriver
    task: asyncio.Task[None]
    early: list[DriverEvent] = field(default_factory=list)


class CodexLink:
    """The driver, slot, start and backoff of one conversation (module docstring)."""

    def __init__(self, state: SessionState, services: SessionServices, post: Callable[[Message], None]) -> None:
        self._state = state
        self._svc = services
        self._settings = services.settings
        self._post = post
        self._name = state.conversation
        self._slots = services.slots_of(state.conversation)
        """The slot pool bounding this conversation (``max_jobs`` for a job, else ``max_sessions``)."""
        self.codex: OpenCodex | None = None
        """The open CODEX driver, while the conversation has one."""
        self.starting: Starting | None = None
        """The driver being started, while its start runs."""
        self.slot_wait: asyncio.Task[None] | None = None
        """Waiting for a slot (the conversation keeps reading its inbox meanwhile: a cancel can drop the thought)."""
        self.retries = Retries()

    @property
    def driver(self) -> CodexDriver | None:
        """The open driver, if any."""
        return self.codex.driver if self.codex is not None else None

    def slot_bound(self) -> str:
        """The bound this conversation waits on, as the chat is told (``max_sessions = 4``)."""
        bound = "max_jobs" if self._slots is self._svc.job_slots else "max_sessions"
        return f"{bound} = {self._slots.size}"

    def try_slot(self) -> bool:
        """Take a slot if one is free now."""
        return self._slots.try_acquire(self._name)

    def wait_for_slot(self, group: asyncio.TaskGroup) -> None:
        """Wait for a slot in a child task, which reports :class:`SlotGranted`."""
        if self.slot_wait is None:
            self.slot_wait = group.create_task(self._wait_for_slot(), name=f"slot:{self._name}")

    async def _wait_for_slot(self) -> None:
        await self._slots.acquire(self._name)
        self._post(SlotGranted())

    def stop_waiting(self) -> None:
        """No thought needs the slot waited for any more."""
        if self.slot_wait is not None:
            self.slot_wait.cancel()
            self.slot_wait = None

    def release_slot(self) -> None:
        """Give the slot back (to the next waiter)."""
        self._slots.release(self._name)

    def start(self, group: asyncio.TaskGroup) -> None:
        """The slot is ours: start Codex for the conversation's thread in a child task."""
        driver = self._new_driver()
        task = group.create_task(self._run_start(driver, self._state.thread_id), name=f"start:{self._name}")
        self.starting = Starting(driver, task)

    async def _run_start(self, driver: CodexDriver, resume: str | None) -> None:
        try:
            await driver.start(resume)
        except DriverError as exc:
            self._post(CodexFailed(driver, exc))
            return
        except BaseException:
            await driver.aclose()  # shutdown (or a bug) while Codex was starting: do not leave it running
            self.release_slot()
            raise
        self._post(CodexOpened(driver))

    async def start_failed(self, driver: CodexDriver) -> None:
        """The start failed (or came after a stop): close what it left and give the slot back."""
        if self.starting is not None and self.starting.driver is driver:
            self.starting = None
        await driver.aclose()
        self.release_slot()

    def opened(self, driver: CodexDriver) -> list[DriverEvent]:
        """The start succeeded: ``driver`` is the open one; returns its events that came before."""
        starting, self.starting = self.starting, None
        self.retries.last_start_error = None
        self.codex = OpenCodex(driver)
        self._svc.processes.record(self._name, driver.pids)
        return starting.early if starting is not None and starting.driver is driver else []

    async def abort_start(self, by: float) -> None:
        """Shutdown: cancel a start under way (waiting until ``by`` at most) and close its driver."""
        starting, self.starting = self.starting, None
        if starting is None:
            return
        starting.task.cancel()
        await asyncio.wait({starting.task}, timeout=max(0.0, by - time.monotonic()))
        await starting.driver.aclose()  # (also when it had started: its report comes too late)
        self.release_slot()

    def _new_driver(self) -> CodexDriver:
        """A driver for this conversation's thread whose events come to the inbox (not started yet)."""
        driver: CodexDriver

        async def sink(event: DriverEvent) -> None:
            # Called by the driver's dispatcher task, one event at a time and in order.
            self._post(DriverMessage(driver, event))
            # The persistent driver's processes (exec: recorded when a turn's process starts).
            started = isinstance(event, ThreadStarted | TurnStarted)
            codex = self.codex
            if started and driver.persistent and codex is not None and codex.driver is driver:
                self._svc.processes.record(self._name, driver.pids)

        driver = self._svc.make_driver(self._name, self._thread_options(), sink)
        return driver

    def _thread_options(self) -> ThreadOptions:
        """How this conversation's thread is opened (its saved options; a fork only for a new thread)."""
        state = self._state
        return ThreadOptions(
            workspace=state.workspace,
            model=state.model,
            turn_timeout=state.turn_timeout,
            fork_from=state.fork_from if state.thread_id is None else None,
            mode=state.chat.mode,
        )

    async def close(self) -> OpenCodex | None:
        """Close the open driver (its every process tree) and give the slot back; returns what was open."""
        codex, self.codex = self.codex, None
        try:
            if codex is not None:
                await codex.driver.aclose()
        finally:
            if codex is not None:
                self._svc.processes.forget(self._name)
            self.release_slot()
        return codex

    def restart_later(self) -> float:
        """Codex failed (again): the next start waits the restart backoff; returns the delay."""
        self.retries.codex_failures += 1
        delay = backoff(self._settings.restart_backoff, self.retries.codex_failures)
        self.retry_at(delay)
        return delay

    def retry_at(self, delay: float) -> None:
        """Nothing is handed over and no Codex started for ``delay`` seconds."""
        at = time.monotonic() + delay
        retries = self.retries
        retries.not_before = at if retries.not_before is None else max(retries.not_before, at)

    def mark_busy(self) -> None:
        """Something waits: the driver is not idle, the slot not to be taken."""
        if self.codex is not None:
            self.codex.idle_since = None
        self._slots.mark_busy(self._name)

    def mark_idle(self) -> None:
        """Nothing runs or waits: the idle clock starts; the pool may ask for the slot back (:class:`Evict`)."""
        codex = self.codex
        if codex is not None and codex.idle_since is None:
            codex.idle_since = time.monotonic()
            self._slots.mark_idle(self._name, lambda: self._post(Evict()))

    def holds(self, thought_id: str) -> bool:
        """The driver still has the thought: queued as its next turn, or already running it."""
        codex = self.codex
        return codex is not None and (thought_id in codex.driver.queued or codex.driver.busy)
