"""One conversation's session: its queue of thoughts, its Codex driver, its egress.

A :class:`Session` is one task that owns everything of its conversation, so there are no
locks between conversations. It reacts to one inbox of messages (thoughts, cancels and
approvals from ingress; the events of its CODEX driver (:mod:`coven_codex.codex.drivers`), put
there by the driver's event sink as they are emitted; eviction requests from the slot pool;
"recorded" notes from its egress) and to its own timers (interrupt grace, idle release of the
thread, restart backoff), which are the timeout of that one wait. The turn deadline, the stream-idle
bound and the approval timeout are the drivers' (:mod:`coven_codex.codex.drivers`).

Delivering a thought (ingress exactly-once):

1. the thought is written ahead as ``in_flight`` into the session's state log;
2. it is handed to Codex (app-server ``turn/start`` with ``clientUserMessageId = thought id``,
   or the stdin of a ``codex exec`` process);
3. it becomes ``delivered`` (state saved again; only then is the ingress cursor told) once Codex
   has *recorded* it: egress sees the ``UserMessage`` line with its ``client_id`` (0.169), or,
   when the turn or the process ends first, the final rollout says so
   (:func:`~coven_codex.agent.recovery.codex_received`); otherwise it is sent again.

After a crash between 1 and 3 the daemon resolves the in-flight thought against the rollout
before ingress re-reads the journal.

A failed hand-over counts against that thought (:data:`DELIVERY_ATTEMPTS` hand-overs, then it
is dropped with an ``error`` entry); a Codex that fails to start or exits counts against the
restart backoff. Every retry waits :func:`~coven_codex.agent.backoff.backoff`.

Every turn that started ends with exactly one turn-end ``status`` (and a failed one with one
``error``): written by egress from the rollout, or by the session when the driver reports the
end and the rollout holds none, when Codex dies, when the driver is closed mid-turn, or when the
session crashes. Both writers use the turn's deterministic id
(:func:`~coven_codex.rollout.turn_entry_id`) through the daemon's one
:class:`~coven_codex.agent.writer.DaemonWriter`, so whichever comes first is the one written.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import assert_never

from coven_codex.agent.attachments import AttachmentRefused, check_images, uploads_dir
from coven_codex.agent.backoff import RepeatFilter, backoff
from coven_codex.agent.egress import Egress
from coven_codex.agent.egress_runner import EgressRunner
from coven_codex.agent.limits import MAX_ID_CHARS, REFUSED_CODE, cut
from coven_codex.agent.recovery import codex_received, recorded_client_id
from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.services import PendingThought, SessionServices, ThreadOptions
from coven_codex.agent.state import InFlight, SessionState
from coven_codex.agent.thread_options import REFUSED_HINT, OptionsRefused, reset_workspace, thought_options
from coven_codex.codex.drivers import (
    AgentMessageCompleted,
    ApprovalRequested,
    ApprovalResolved,
    CodexDriver,
    Delta,
    DriverError,
    DriverEvent,
    DriverFailed,
    ThreadStarted,
    TurnExpired,
    TurnFinished,
    TurnStarted,
    killed_from_outside,
)
from coven_codex.codex.errors import ErrorCode, classify, shorten
from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    BaseEntry,
    CancelEntry,
    DeltaEntry,
    ErrorEntry,
    ResetEntry,
    StatusEntry,
    ThoughtEntry,
    TokenUsage,
)
from coven_codex.journal import Position
from coven_codex.journal.opening import local_base
from coven_codex.rollout import TURN_ABORTED, TURN_COMPLETED, TURN_FAILED, turn_entry_id
from coven_codex.settings import state_root
from coven_codex.tailing import Line

log = logging.getLogger(__name__)

DELIVERY_ATTEMPTS = 3
"""Hand-overs of one thought before it is dropped with an ``error`` entry."""
ERROR_DRAIN = 1.0
TURN_END_STATE_OF = {"completed": TURN_COMPLETED, "failed": TURN_FAILED, "interrupted": TURN_ABORTED}
"""The status a driver's turn outcome becomes when the rollout does not record the turn's end."""
SESSION_RESET = "session_reset"
"""The status a ``reset`` is answered with."""
THOUGHT_CANCELLED = "thought_cancelled"
"""The status a thought dropped by a ``cancel`` with ``queued`` is answered with (it never reached Codex)."""
PRUNE_DELIVERED_AT = 256
CONFIRM_LOCATE = 5.0
STOP_GRACE_FACTOR = 2.0
"""After an interrupt, the driver ends a stuck turn within ``kill_grace``; we close the driver after twice that."""


@dataclass(frozen=True, slots=True)
class _DriverMessage:
    """An event of a driver (handled only if that driver is still the session's open one)."""

    driver: CodexDriver
    event: DriverEvent


@dataclass(frozen=True, slots=True)
class _Evict:
    pass


@dataclass(frozen=True, slots=True)
class _Recorded:
    """Egress saw Codex record a user message carrying this client id."""

    client_id: str


@dataclass(frozen=True, slots=True)
class _Duplicate:
    """A thought reused the id of an earlier, different thought (at another journal position)."""

    entry_id: str
    position: Position


@dataclass(frozen=True, slots=True)
class _Reset:
    """A ``reset`` entry routed to this session: end the thread once what came before it is done."""

    entry_id: str
    position: Position
    cwd: str | None = None
    """The next thread's working directory as the reset names it (checked when the reset arrives)."""


@dataclass(frozen=True, slots=True)
class _DropQueued:
    """A ``cancel`` with ``queued`` written before this run: drop the thoughts queued before it (no interrupt)."""


@dataclass(frozen=True, slots=True)
class _SlotGranted:
    """The slot this session waited for is its own now."""


RESET_DRAIN = 5.0
"""After the thread's last turn, how long a reset waits for egress to bring the rest of its rollout."""


@dataclass(slots=True)
class _Turn:
    """The turn running in Codex, as far as this session knows."""

    key: str
    """Names the turn in its entry ids: the driver's turn id, else the thought that started it."""
    keyed_by_turn_id: bool
    egress: Egress
    """The egress that was running when the turn started, and what it had produced by then."""
    errors_before: int
    ends_before: int
    starts_before: int
    interrupt_sent_at: float | None = None
    """When the session asked the driver to interrupt the turn (it closes the driver if the turn
    has not ended :data:`STOP_GRACE_FACTOR` ``* kill_grace`` later)."""
    steer_refused: bool = False
    """A thought meant to join the turn came too late: the driver holds it as its next turn."""


@dataclass(slots=True)
class _Retries:
    """What the session remembers of failures: when it may try again, and how often each thing failed."""

    not_before: float | None = None
    """Nothing is handed over and no Codex started before this: the restart or a hand-over's backoff."""
    codex_failures: int = 0
    """Consecutive failures of Codex itself (failed starts, unexpected exits): the restart backoff."""
    hand_overs: dict[str, int] = field(default_factory=dict)
    """Failed hand-overs per queued thought id (:data:`DELIVERY_ATTEMPTS`, then the thought is dropped)."""
    resume: bool = False
    """Codex died: start it again (resuming the thread) once the backoff is over, even with no thought waiting."""
    last_start_error: str | None = None
    """How the last start of Codex failed (a start failing the same way again is logged, not written to the chat)."""


@dataclass(eq=False, slots=True)
class _Codex:
    """The CODEX driver the session has open, and what lasts exactly as long as it does."""

    driver: CodexDriver
    approvals: set[str] = field(default_factory=set)
    """Approval requests asked in the chat and not answered yet."""
    idle_since: float | None = None
    """Since when no turn ran and no thought waited (a persistent driver: idle release, eviction)."""


_Message = (
    PendingThought
    | _Reset
    | CancelEntry
    | ApprovalEntry
    | _DriverMessage
    | _Evict
    | _Recorded
    | _Duplicate
    | _SlotGranted
    | _DropQueued
)


class Session:
    """One conversation: its queue of thoughts, its Codex driver, its egress (module docstring)."""

    def __init__(self, state: SessionState, services: SessionServices) -> None:
        self.state = state
        self.conversation = state.conversation
        self._name = cut(state.conversation)
        """The conversation's name as log lines show it (cut)."""
        self._svc = services
        self._settings = services.settings
        self._slots = services.slots_of(state.conversation)
        """The slot pool bounding this conversation (``max_jobs`` for a job, else ``max_sessions``)."""
        self._slot_wait: asyncio.Task[None] | None = None
        """Waiting for a slot (the session keeps reading its inbox meanwhile: a cancel can drop the thought)."""
        self._requested: dict[str, ThoughtEntry] = {}
        """Queued thoughts that give thread options, by id (checked when the session takes them)."""
        self._inbox: asyncio.Queue[_Message] = asyncio.Queue()
        self._queue: deque[PendingThought | _Reset] = deque()
        self._queued_ids: dict[str, Position] = {}
        """Ids of the thoughts in the inbox or the queue, with their journal positions."""
        self._codex: _Codex | None = None
        """The open CODEX driver, while the conversation has one."""
        self._turn: _Turn | None = None
        self._retries = _Retries()
        self._crashes = RepeatFilter()
        self._stopping = False
        self._saver = StateSaver(state, services.store, mirror=self._mirror if services.cluster is not None else None)
        self._group: asyncio.TaskGroup | None = None
        self._told_waiting = False
        self._unconfirmed: PendingThought | None = None
        self._no_turn = asyncio.Event()
        self._no_turn.set()
        self._window = ReplayWindow(state, self._saver, services.journal)
        self._egress = EgressRunner(state, services, self._saver, self._window, on_line=self._on_rollout_line)

    # -- routing (called synchronously by ingress) -------------------------------------------
    def offer_thought(self, entry: ThoughtEntry, position: Position) -> bool:
        """Queue a thought unless it was delivered before; ``True`` if it is now pending.

        The same thought read again (after a restart) is passed over; a *different* thought (at
        another journal position) reusing an earlier one's id is reported once and dropped.
        """
        assert entry.id is not None
        earlier = self.state.delivered.get(entry.id)
        if earlier is None:
            earlier = self._queued_ids.get(entry.id)
        if earlier is not None:
            if earlier != position:
                self._inbox.put_nowait(_Duplicate(entry.id, position))
            return False
        self._queued_ids[entry.id] = position
        if entry.cwd is not None or entry.model is not None or entry.resume_thread is not None or entry.timeout:
            self._requested[entry.id] = entry
        self._inbox.put_nowait(PendingThought(entry.id, entry.text, position, tuple(entry.attachments)))
        if self._svc.instruments is not None:
            self._svc.instruments.thought_received(entry.id)
        return True

    def offer_reset(self, entry: ResetEntry, position: Position) -> bool:
        """Queue a ``reset`` unless it was acted on before; ``True`` if it is now pending.

        It takes its place among the thoughts: those before it still go to the current thread,
        then the thread ends (a running turn is interrupted as soon as the reset arrives) and the
        next thought starts a new one.
        """
        assert entry.id is not None
        earlier = self.state.delivered.get(entry.id)
        if earlier is None:
            earlier = self._queued_ids.get(entry.id)
        if earlier is not None:
            if earlier != position:
                self._inbox.put_nowait(_Duplicate(entry.id, position))
            return False
        self._queued_ids[entry.id] = position
        self._inbox.put_nowait(_Reset(entry.id, position, entry.cwd))
        return True

    def offer_cancel(self, entry: CancelEntry) -> None:
        """Pass a ``cancel`` on (the running turn is interrupted; with ``queued``, queued thoughts are dropped)."""
        self._inbox.put_nowait(entry)

    def offer_drop_queued(self) -> None:
        """Drop the thoughts queued so far without interrupting anything (a ``cancel`` with ``queued``
        from before this run: the turn it meant did not survive the restart)."""
        self._inbox.put_nowait(_DropQueued())

    def offer_approval(self, entry: ApprovalEntry) -> None:
        """Pass an ``approval`` on to the request it answers."""
        self._inbox.put_nowait(entry)

    @property
    def pending_positions(self) -> list[Position]:
        """Journal positions of the thoughts and resets routed here and not finished yet."""
        return list(self._queued_ids.values())

    async def _mirror(self, data: bytes) -> None:
        """The cluster's copy of a state just saved (with what is still pending: the conversation's floor)."""
        assert self._svc.cluster is not None
        await self._svc.cluster.save_state(self.conversation, data, self._queued_ids.values())

    @property
    def busy(self) -> bool:
        """A turn is running or thoughts are waiting."""
        return self._turn is not None or bool(self._queue)

    @property
    def live(self) -> bool:
        """A CODEX driver is open."""
        return self._codex is not None

    @property
    def turn_running(self) -> bool:
        """A Codex turn is running."""
        return self._turn is not None

    # -- the task ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the conversation until cancelled (:meth:`shutdown` ends processes first)."""
        async with asyncio.TaskGroup() as group:
            self._group = group
            group.create_task(self._saver.run(), name=f"state-saver:{self.conversation}")
            self._start_egress()
            if self._queue and not self._stopping:
                await self._advance()  # restarted after a crash: the queued thoughts go on
            elif not self.busy:
                self._window.idle()  # (a window left open by a killed run: once egress is past it)
            while True:
                message = await self._next_message()
                if message is not None:
                    await self._handle(message)
                await self._check_timers()
                if not self._stopping:
                    await self._advance()

    async def _next_message(self) -> _Message | None:
        timeout = self._next_timeout()
        if timeout is None:
            return await self._inbox.get()
        try:
            # Not asyncio.wait_for: on Python 3.11 it returns the message instead of raising when the
            # get completes in the same step as a cancel, and the session would not stop.
            async with asyncio.timeout(max(timeout, 0.0)):
                return await self._inbox.get()
        except TimeoutError:
            return None

    def _next_timeout(self) -> float | None:
        now = time.monotonic()
        deadlines: list[float] = []
        interrupted = self._interrupted_at()
        if interrupted is not None:
            deadlines.append(interrupted + STOP_GRACE_FACTOR * self._settings.kill_grace)
        if self._codex is not None and self._codex.idle_since is not None:
            deadlines.append(self._codex.idle_since + self._settings.release_thread_after)
        if self._retries.not_before is not None:
            deadlines.append(self._retries.not_before)
        return min(deadlines) - now if deadlines else None

    # -- messages ------------------------------------------------------------------------------
    async def _handle(self, message: _Message) -> None:
        if isinstance(message, PendingThought):
            await self._take_thought(message)
        elif isinstance(message, _Reset):
            if not await self._reset_accepted(message):
                return
            self._queue.append(message)
            if self._turn is not None and self._codex is not None and self._turn.interrupt_sent_at is None:
                await self._cancel()
        elif isinstance(message, CancelEntry):
            if message.queued:
                await self._drop_queued()
            await self._cancel()
        elif isinstance(message, _DropQueued):
            await self._drop_queued()
        elif isinstance(message, _SlotGranted):
            self._slot_wait = None
            if not self._queue:  # the thoughts it was for were cancelled meanwhile
                self._slots.release(self.conversation)
        elif isinstance(message, ApprovalEntry):
            await self._approval(message)
        elif isinstance(message, _Evict):
            if self._codex is not None and not self.busy:
                log.info("conversation %r: ending its idle Codex process for another conversation", self._name)
                await self._end_codex(reason="slot needed by another conversation")
        elif isinstance(message, _Recorded):
            thought = self._unconfirmed
            if thought is not None and thought.entry_id == message.client_id:
                self._unconfirmed = None
                await self._delivered(thought, steer=False, start_turn=False)
        elif isinstance(message, _Duplicate):
            await self._duplicate(message)
        elif self._codex is not None and message.driver is self._codex.driver:
            await self._driver_event(self._codex, message.event)

    async def _take_thought(self, thought: PendingThought) -> None:
        """Queue ``thought``, its thread options and attachments checked first: one that cannot go to
        Codex refuses it."""
        requested = self._requested.pop(thought.entry_id, None)
        if requested is not None:
            try:
                options = await asyncio.to_thread(
                    thought_options,
                    requested,
                    self._settings.cwd_roots,
                    turn_timeout=self._settings.turn_timeout,
                    forks_threads=self._svc.make_driver.forks_threads,
                )
            except OptionsRefused as exc:
                await self._refuse(thought, str(exc), REFUSED_HINT)
                return
            thought = dataclasses.replace(thought, options=options)
        if thought.attachments and not self._svc.make_driver.takes_images:
            await self._refuse_attachments(
                thought,
                # (Codex 0.47's `exec --image ... resume <thread> -` sent the image without the text)
                "images need the app-server driver, which this Codex does not offer (docs/rollout.md); it runs on exec",
            )
            return
        if thought.attachments:
            journal = self._settings.journal
            try:
                images = await asyncio.to_thread(
                    check_images,
                    thought.attachments,
                    folder=uploads_dir(local_base(journal, state_root())) if journal is not None else None,
                    max_bytes=self._settings.max_attachment_bytes,
                    urls=self._svc.make_driver.image_urls,
                )
            except AttachmentRefused as exc:
                await self._refuse_attachments(thought, str(exc))
                return
            thought = dataclasses.replace(thought, images=images)
        self._queue.append(thought)

    async def _refuse_attachments(self, thought: PendingThought, why: str) -> None:
        await self._refuse(
            thought,
            why,
            "Attach PNG, JPEG, GIF or WebP images stored by the adapter in the journal's attachments "
            "folder (within max_attachment_bytes), and send it again.",
        )

    async def _refuse(self, thought: PendingThought, why: str, hint: str) -> None:
        """``thought`` is not handed to Codex: one ``REFUSED`` error (its id from the position), and it is settled."""
        self._queued_ids.pop(thought.entry_id, None)
        log.warning("conversation %r: thought at journal position %s refused: %s", self._name, thought.position, why)
        await self._emit(
            ErrorEntry(
                id=f"refused@{thought.position}",
                code=REFUSED_CODE,
                text=shorten(f"The thought at journal position {thought.position} was not handed to Codex: {why}."),
                hint=hint,
                in_reply_to=thought.entry_id,
            )
        )
        self._svc.finish_thought(thought.position)

    async def _reset_accepted(self, reset: _Reset) -> bool:
        """A reset naming a ``cwd`` outside the workspace roots is refused (one error; nothing changes)."""
        if reset.cwd is None:
            return True
        try:
            await asyncio.to_thread(reset_workspace, ResetEntry(cwd=reset.cwd), self._settings.cwd_roots)
        except OptionsRefused as exc:
            self._queued_ids.pop(reset.entry_id, None)
            log.warning("conversation %r: reset at journal position %s refused: %s", self._name, reset.position, exc)
            await self._emit(
                ErrorEntry(
                    id=f"refused@{reset.position}",
                    code=REFUSED_CODE,
                    text=shorten(f"The reset at journal position {reset.position} was not acted on: {exc}."),
                    hint=REFUSED_HINT,
                )
            )
            self._svc.finish_thought(reset.position)
            return False
        return True

    async def _drop_queued(self) -> None:
        """A ``cancel`` with ``queued``: the thoughts not yet handed to Codex are dropped, each answered
        with a ``thought_cancelled`` status and recorded as settled (never sent after a restart)."""
        dropped = [
            t
            for t in self._queue
            if isinstance(t, PendingThought)
            and t is not self._unconfirmed
            and (self._codex is None or t.entry_id not in self._codex.driver.queued)
        ]
        if not dropped:
            return
        for thought in dropped:
            self._forget_thought(thought)
            self.state.delivered[thought.entry_id] = thought.position
        await self._save_now()
        for thought in dropped:
            log.info("conversation %r: queued thought %s cancelled", self._name, cut(thought.entry_id))
            await self._emit(
                StatusEntry(
                    id=f"cancelled@{thought.position}",
                    state=THOUGHT_CANCELLED,
                    text="cancelled before it reached Codex",
                    in_reply_to=thought.entry_id,
                )
            )
            self._svc.finish_thought(thought.position)
        if not any(isinstance(t, PendingThought) for t in self._queue) and self._slot_wait is not None:
            self._slot_wait.cancel()
            self._slot_wait = None

    async def _duplicate(self, message: _Duplicate) -> None:
        shown = cut(message.entry_id, MAX_ID_CHARS)
        log.warning(
            "conversation %r: thought at journal position %s reuses the id %s of an earlier thought; dropped",
            self._name,
            message.position,
            cut(message.entry_id),
        )
        await self._emit(
            ErrorEntry(
                id=f"duplicate-id@{message.position}",
                code=REFUSED_CODE,
                text=shorten(
                    f"The thought at journal position {message.position} was dropped: its id {shown!r} "
                    "is the id of an earlier thought."
                ),
                hint="Give every thought its own id (or none: the journal assigns one) and send it again.",
            )
        )

    async def _cancel(self) -> None:
        turn = self._turn
        if self._codex is None or turn is None:
            await self._emit(StatusEntry(state="cancel_ignored", text="nothing is running to cancel"))
            return
        log.info("conversation %r: interrupting the running turn", self._name)
        try:
            await self._codex.driver.cancel()
        except DriverError as exc:
            log.warning("conversation %r: interrupt failed: %s", self._name, exc)
            return
        turn.interrupt_sent_at = time.monotonic()

    def _interrupted_at(self) -> float | None:
        """When the running turn was asked to stop, if it was (and a driver is open to stop it)."""
        if self._turn is None or self._codex is None:
            return None
        return self._turn.interrupt_sent_at

    async def _approval(self, entry: ApprovalEntry) -> None:
        codex = self._codex
        if codex is None or entry.request_id not in codex.approvals:
            log.info(
                "conversation %r: approval for unknown or expired request %s ignored", self._name, cut(entry.request_id)
            )
            return
        codex.approvals.discard(entry.request_id)
        try:
            await codex.driver.answer_approval(
                entry.request_id, entry.decision != "deny", for_session=entry.decision == "approve_for_session"
            )
        except DriverError as exc:
            await self._error(
                classify(str(exc)).code,
                f"could not pass the approval on to Codex: {exc}",
                "The Codex process may have ended; the session will be resumed.",
            )

    async def _driver_event(self, codex: _Codex, event: DriverEvent) -> None:
        """Act on an event of the open driver ``codex`` (see :mod:`coven_codex.codex.drivers.base`)."""
        if isinstance(event, ThreadStarted):
            if event.note:
                log.warning("conversation %r: %s", self._name, event.note)
            await self._thread_ready(event.thread_id)
        elif isinstance(event, TurnStarted):
            self._turn_started(event.turn_id)
        elif isinstance(event, TurnFinished):
            turn = self._turn_finished()
            codex.approvals.clear()  # (the driver drops a turn's unanswered requests with it)
            if self._unconfirmed is not None and not self._waiting_in_driver(self._unconfirmed):
                await self._confirm_unconfirmed()
            await self._turn_over(event, turn)
        elif isinstance(event, TurnExpired):
            # Written now, before the turn's end (which the rollout may bring first): a reader
            # stopping at the end knows why. _turn_over writes it with the same id: once.
            turn = self._turn
            if turn is not None:  # (else the turn's end writes it, once)
                c = event.error
                await self._error(
                    c.code,
                    c.message,
                    c.hint,
                    entry_id=self._turn_entry_id(turn.key, "error"),
                    in_reply_to=self.state.reply_to,
                )
        elif isinstance(event, Delta):
            if self._settings.stream_deltas and event.text:
                await self._emit(DeltaEntry(item_id=event.item_id, text=event.text, in_reply_to=self.state.reply_to))
        elif isinstance(event, ApprovalRequested):
            await self._approval_asked(codex, event)
        elif isinstance(event, ApprovalResolved):
            codex.approvals.discard(event.request_id)
            if event.by == "timeout":
                text = f"no answer to approval {event.request_id} within {self._settings.approval_timeout:.0f}s; denied"
                await self._emit(StatusEntry(state="approval_timeout", text=text, in_reply_to=self.state.reply_to))
        elif isinstance(event, DriverFailed):
            await self._driver_failed(event)
        elif isinstance(event, AgentMessageCompleted):
            pass  # the rollout is the record of replies: egress writes them
        else:
            assert_never(event)

    async def _turn_over(self, event: TurnFinished, turn: _Turn | None) -> None:
        """Tell the conversation that the turn is over, and why it failed, unless the rollout did.

        Codex 0.169 records a turn's end (and a failed turn's error) in the rollout, which egress
        writes; 0.47 records neither, and a dying process records nothing. A failed turn's error
        is written here if egress, once caught up, produced none during this turn. A turn's end is
        written here unless the driver's plan says the rollout records every turn's end with the
        driver's turn id (the app-server plan), again if egress produced none. Either entry
        carries the turn's deterministic id (:meth:`_turn_key`: for exec on 0.104 and later, the
        id the rollout gave the turn), so if egress writes it too (its rollout line came after the
        drain), the journal gets it once.
        """
        failed = event.status == "failed" and event.error is not None and bool(event.error.message)
        wants_end = not self._svc.make_driver.records_turn_end

        def missing() -> tuple[bool, bool]:
            errors, ends = self._seen_since(turn)
            return failed and errors == 0, wants_end and ends == 0

        if any(missing()):
            await self.drain_egress(ERROR_DRAIN)  # only when the rollout may still bring it
        error_missing, end_missing = missing()
        key = event.turn_id or self._turn_key(turn)
        if error_missing:
            c = event.error
            assert c is not None  # (failed says so)
            await self._error(
                c.code, c.message, c.hint, entry_id=self._turn_entry_id(key, "error"), in_reply_to=self.state.reply_to
            )
        if end_missing:
            turn_id = event.turn_id or (key if turn is not None and key != turn.key else None)
            await self._write_turn_end(TURN_END_STATE_OF[event.status], key, turn_id, usage=event.usage)

    def _turn_key(self, turn: _Turn | None) -> str | None:
        """The name of ``turn`` in its entry ids: the driver's turn id; else, when the rollout
        records turn starts (exec on 0.104 and later), the id it gave the turn, which is the id
        egress uses when it closes a turn the rollout never ended; else the thought that started it."""
        if turn is None:
            return None
        if turn.keyed_by_turn_id:
            return turn.key
        egress = self._egress.egress
        started_since = egress.turn_starts_seen > (turn.starts_before if turn.egress is egress else 0)
        if started_since and egress.last_turn_id is not None:
            return egress.last_turn_id
        return turn.key

    def _seen_since(self, turn: _Turn | None) -> tuple[int, int]:
        """(errors, turn ends) egress produced from the rollout since ``turn`` started."""
        egress = self._egress.egress
        if turn is None:
            return 0, 0
        if turn.egress is not egress:  # egress was replaced: everything it produced is since then
            return egress.errors_seen, egress.turn_ends_seen
        return egress.errors_seen - turn.errors_before, egress.turn_ends_seen - turn.ends_before

    def _turn_entry_id(self, key: str | None, what: str) -> str | None:
        """The deterministic id of this conversation's turn ``key``'s error or end (``None``: unknown turn)."""
        if key is None:
            return None
        scope = self.state.thread_id
        if scope is None:
            scope = "conversation-" + hashlib.sha256(self.conversation.encode()).hexdigest()[:16]
        return turn_entry_id(scope, key, what)

    async def _write_turn_end(
        self, state: str, key: str | None, turn_id: str | None, text: str | None = None, usage: TokenUsage | None = None
    ) -> None:
        await self._emit(
            StatusEntry(
                id=self._turn_entry_id(key, "end"),
                state=state,
                text=text or state.replace("_", " "),
                thread_id=self.state.thread_id,
                turn_id=turn_id,
                usage=usage,
                in_reply_to=self.state.reply_to,
            )
        )

    async def _turn_cut_short(self, turn: _Turn | None, state: str, why: str) -> None:
        """The turn ended without the driver reporting it (Codex died, the driver or the session was closed):
        write its end unless egress, once caught up, brought one."""
        if turn is None:
            return
        if self._seen_since(turn)[1] == 0:
            await self.drain_egress(ERROR_DRAIN)
        if self._seen_since(turn)[1] == 0:
            key = self._turn_key(turn)
            turn_id = key if turn.keyed_by_turn_id or key != turn.key else None
            await self._write_turn_end(state, key, turn_id, f"{state.replace('_', ' ')}: {why}")

    async def _thread_ready(self, thread_id: str) -> None:
        """Codex told the thread id: a new one replaces the old thread (its egress, its state)."""
        changed = thread_id != self.state.thread_id
        if changed:
            if self.state.thread_id is not None:
                old = self.state.thread_id
                log.warning("conversation %r: Codex thread %s replaced by %s", self._name, old, thread_id)
            await self._egress.stop()
            self.state.forget_thread()
            self._window.thread_ended()
            self.state.thread_id = thread_id
            self.state.fork_from = None
            in_flight = self.state.in_flight
            if in_flight is not None:  # the thought being handed over is the new thread's first message
                self.state.expect_reply(in_flight.thought_id, in_flight.text, 0)
            await self._save_now()
        self._start_egress()

    async def _approval_asked(self, codex: _Codex, event: ApprovalRequested) -> None:
        policy = self._settings.approval_policy
        if policy == "ask":
            codex.approvals.add(event.request_id)
            text = event.action
        else:
            text = f"{event.action} (answered by approval_policy = {policy!r}; nothing to do)"
        await self._emit(
            ApprovalRequestEntry(
                request_id=event.request_id,
                action=event.action,
                call_id=event.call_id,
                text=text,
                in_reply_to=self.state.reply_to,
            )
        )

    async def _driver_failed(self, event: DriverFailed) -> None:
        """The driver died (its Codex process ended or stopped answering): close it, end the turn, resume later."""
        codex = await self._close_codex()
        if self._unconfirmed is not None:
            await self._confirm_unconfirmed(counts=not killed_from_outside(event.returncode))
        turn = self._turn_finished()
        if self._stopping:
            await self._turn_cut_short(turn, TURN_ABORTED, "Codex stopped")
            return
        if turn is None and codex is not None and codex.driver.persistent:
            # The shared app-server died while no turn of ours ran on it: nothing was lost, and
            # nothing is said in the chat; the thread is resumed on the next thought.
            log.info("conversation %r: Codex exited while idle; its thread resumes on the next thought", self._name)
            return
        if self._svc.instruments is not None:
            self._svc.instruments.codex_failed()
        delay = self._restart_later()
        where = " during a turn" if turn is not None else ""
        if event.returncode is not None and event.returncode < 0:
            # Killed by a signal: whatever it last wrote on stderr is not the reason.
            code = ErrorCode.PROCESS_EXITED
            message = f"Codex was killed{where} by signal {-event.returncode}"
        elif event.error.code is not ErrorCode.PROCESS_EXITED:
            code, message = event.error.code, event.error.message
        else:
            # Nothing on stderr said why (its lines are warnings, or about something else).
            code = ErrorCode.PROCESS_EXITED
            message = f"Codex exited{where} (exit {event.returncode})"
        if turn is not None and self._seen_since(turn)[1] == 0:
            await self.drain_egress(ERROR_DRAIN)  # the rollout's name for the turn, for the ids
        key = self._turn_key(turn)
        await self._error(
            code,
            shorten(message),
            "The session will be resumed in a moment; send the thought again if its reply is "
            "missing. Run `coven-codex validate` if this repeats.",
            entry_id=self._turn_entry_id(key, "error"),
            in_reply_to=self.state.reply_to if turn is not None else None,
        )
        await self._turn_cut_short(turn, TURN_FAILED, "Codex ended")
        log.warning("conversation %r: Codex exited (%s); resuming in %.1fs", self._name, event.returncode, delay)
        self._retries.resume = True

    def _restart_later(self) -> float:
        """Codex failed (again): the next start waits the restart backoff; returns the delay."""
        self._retries.codex_failures += 1
        delay = backoff(self._settings.restart_backoff, self._retries.codex_failures)
        self._retry_at(delay)
        return delay

    def _retry_at(self, delay: float) -> None:
        at = time.monotonic() + delay
        retries = self._retries
        retries.not_before = at if retries.not_before is None else max(retries.not_before, at)

    def _start_turn(self, thought_id: str) -> None:
        """We handed ``thought_id`` to Codex as a new turn."""
        self._begin_turn(thought_id, keyed_by_turn_id=False)

    def _turn_started(self, turn_id: str | None) -> None:
        """The driver says a turn started (ours, or one it started from its own queue)."""
        turn = self._turn
        if turn is None:
            thought = self._unconfirmed
            key = turn_id or (thought.entry_id if thought is not None else None)
            if key is not None:
                self._begin_turn(key, keyed_by_turn_id=turn_id is not None)
            return
        if turn_id is not None and not turn.keyed_by_turn_id:
            turn.key, turn.keyed_by_turn_id = turn_id, True

    def _begin_turn(self, key: str, *, keyed_by_turn_id: bool) -> None:
        egress = self._egress.egress
        self._turn = _Turn(
            key, keyed_by_turn_id, egress, egress.errors_seen, egress.turn_ends_seen, egress.turn_starts_seen
        )
        self._no_turn.clear()

    def _turn_finished(self) -> _Turn | None:
        """No turn runs any more; returns the one that ran, if any."""
        turn, self._turn = self._turn, None
        self._no_turn.set()
        return turn

    # -- timers ------------------------------------------------------------------------------------
    async def _check_timers(self) -> None:
        """Turn and stream-idle timeouts, approval timeouts and policy are the driver's; these are ours."""
        now = time.monotonic()
        interrupted = self._interrupted_at()
        if interrupted is not None and now >= interrupted + STOP_GRACE_FACTOR * self._settings.kill_grace:
            log.warning("conversation %r: the turn did not stop after interrupt; ending Codex", self._name)
            await self._end_codex(reason="turn did not stop")
        await self._check_idle(now)

    async def _check_idle(self, now: float) -> None:
        """Let the thread go once the conversation has been idle for ``release_thread_after``: no
        turn running, nothing queued, no approval pending. Its state (thread id, rollout, cursor)
        stays; the next thought resumes the thread (``thread/resume``), on the Codex process the
        pool keeps warm when it is still running (docs/architecture.md, "Timeouts and limits")."""
        codex = self._codex
        if (
            codex is not None
            and codex.idle_since is not None
            and not self.busy
            and not codex.approvals
            and not codex.driver.busy
            and self._unconfirmed is None
            and now >= codex.idle_since + self._settings.release_thread_after
        ):
            log.info(
                "conversation %r: idle for %gs; letting its Codex thread go (the next thought resumes it)",
                self._name,
                self._settings.release_thread_after,
            )
            await self._end_codex(reason="idle")
            await self._emit(
                StatusEntry(
                    state="session_ended",
                    thread_id=self.state.thread_id,
                    text="idle: the Codex thread was let go; the next thought resumes it",
                )
            )

    # -- progress ----------------------------------------------------------------------------------
    async def _advance(self) -> None:
        if self._retries.not_before is not None:
            if time.monotonic() < self._retries.not_before:
                return
            self._retries.not_before = None
        if self._turn is not None:
            waiting = [t for t in self._queue if t is not self._unconfirmed]
            if waiting and isinstance(waiting[0], PendingThought) and self._can_steer():
                await self._deliver(waiting[0], steer=True)
            return
        if self._queue:
            self._mark_busy()
            if self._unconfirmed is not None:
                return  # the driver is starting it as its next turn
            head = self._queue[0]
            if isinstance(head, _Reset):
                await self._reset(head)
                return
            if self._codex is None and self.state.thread_id is None and self._slot_wait is None:
                await self._take_options(head)
            if self._codex is None and not await self._open_codex():
                return
            await self._deliver(head)
            return
        if self._retries.resume and self._codex is None:
            self._retries.resume = False
            await self._open_codex()
        # Idle: nothing of this conversation needs replaying after a restart once egress is between lines.
        self._window.idle()
        codex = self._codex
        if codex is not None and codex.driver.persistent and codex.idle_since is None:
            codex.idle_since = time.monotonic()
            self._slots.mark_idle(self.conversation, self._request_evict)
        elif codex is not None and not codex.driver.persistent:
            await self._end_codex(reason="turn over")

    def _can_steer(self) -> bool:
        # One thought in flight at a time: steer only once the running turn's thought is recorded.
        turn = self._turn
        return (
            self._settings.mid_turn == "steer"
            and self._codex is not None
            and self._codex.driver.supports_steer
            and turn is not None
            and turn.interrupt_sent_at is None
            and not turn.steer_refused
            and self._unconfirmed is None
        )

    def _waiting_in_driver(self, thought: PendingThought) -> bool:
        """The driver still has ``thought``: queued as its next turn, or already running it."""
        codex = self._codex
        return codex is not None and (thought.entry_id in codex.driver.queued or codex.driver.busy)

    def _mark_busy(self) -> None:
        if self._codex is not None:
            self._codex.idle_since = None
        self._window.busy()
        self._slots.mark_busy(self.conversation)

    def _request_evict(self) -> None:
        self._inbox.put_nowait(_Evict())

    async def _open_codex(self) -> bool:
        """Start a driver for the conversation's thread (a slot first); ``False`` if there is none yet."""
        slots = self._slots
        if not slots.try_acquire(self.conversation):
            # Wait in a task of our own: the inbox is still read meanwhile (a cancel may drop the thought).
            if not self._told_waiting:
                self._told_waiting = True
                bound = "max_jobs" if slots is self._svc.job_slots else "max_sessions"
                await self._emit(
                    StatusEntry(
                        state="session_waiting",
                        text=f"waiting for a free turn slot ({bound} = {slots.size}, all in use); your thought is "
                        "queued and will be delivered in order",
                    )
                )
            if self._slot_wait is None and self._group is not None:
                self._slot_wait = self._group.create_task(self._wait_for_slot(), name=f"slot:{self.conversation}")
            return False
        self._told_waiting = False
        driver = self._new_driver()
        resume = self.state.thread_id
        try:
            await driver.start(resume)
        except DriverError as exc:
            await driver.aclose()
            slots.release(self.conversation)
            if self._stopping:
                # Shutdown ended the Codex that was starting: not a failure the chat needs to see.
                log.debug("conversation %r: Codex start cut short by shutdown (%s)", self._name, exc)
                return False
            delay = self._restart_later()
            c = classify(str(exc))
            if str(exc) != self._retries.last_start_error:
                # Retries that fail the same way are logged, not written to the chat each time.
                self._retries.last_start_error = str(exc)
                await self._error(c.code, f"could not start Codex: {c.message}", c.hint)
            else:
                log.warning(
                    "conversation %r: Codex still fails to start (%s); next try in %.1fs", self._name, c.message, delay
                )
            return False
        except BaseException:
            await driver.aclose()  # shutdown (or a bug) while Codex was starting: do not leave it running
            slots.release(self.conversation)
            raise
        self._retries.last_start_error = None
        if self._stopping:
            # Shutdown began while Codex was starting: end it here, it will never get a turn.
            await driver.aclose()
            slots.release(self.conversation)
            return False
        self._codex = _Codex(driver)
        self._svc.processes.record(self.conversation, driver.pids)
        if driver.persistent:
            resumed = resume is not None and driver.thread_id == resume
            thread = driver.thread_id or resume
            text = f"Codex session resumed (thread {thread})" if resumed else f"Codex session started (thread {thread})"
            await self._emit(
                StatusEntry(state="session_resumed" if resumed else "session_started", thread_id=thread, text=text)
            )
        if driver.thread_id is not None and driver.thread_id != self.state.thread_id:
            await self._thread_ready(driver.thread_id)
        return True

    def _new_driver(self) -> CodexDriver:
        """A driver for this conversation's thread whose events come to the inbox (not started yet)."""
        driver: CodexDriver

        async def sink(event: DriverEvent) -> None:
            # Called by the driver's dispatcher task, one event at a time and in order.
            self._inbox.put_nowait(_DriverMessage(driver, event))
            # The persistent driver's processes (exec: recorded when a turn's process starts).
            started = isinstance(event, ThreadStarted | TurnStarted)
            codex = self._codex
            if started and driver.persistent and codex is not None and codex.driver is driver:
                self._svc.processes.record(self.conversation, driver.pids)

        driver = self._svc.make_driver(self.conversation, self._thread_options(), sink)
        return driver

    async def _wait_for_slot(self) -> None:
        await self._slots.acquire(self.conversation)
        self._inbox.put_nowait(_SlotGranted())

    def _thread_options(self) -> ThreadOptions:
        """How this conversation's thread is opened (its saved options; a fork only for a new thread)."""
        state = self.state
        return ThreadOptions(
            workspace=state.workspace,
            model=state.model,
            turn_timeout=state.turn_timeout,
            fork_from=state.fork_from if state.thread_id is None else None,
        )

    async def _take_options(self, thought: PendingThought) -> None:
        """``thought`` starts a new thread: its options become the thread's (saved before Codex starts)."""
        options = thought.options
        if options is None:
            return
        if options.workspace is not None:
            self.state.workspace = options.workspace
        if options.model is not None:
            self.state.model = options.model
        if options.turn_timeout is not None:
            self.state.turn_timeout = options.turn_timeout
        self.state.fork_from = options.fork_from
        await self._save_now()

    async def _deliver(self, thought: PendingThought, *, steer: bool = False) -> None:
        """Hand ``thought`` to the open driver (written ahead as in flight): a new turn, or with
        ``steer`` into the running one."""
        codex = self._codex
        assert codex is not None
        driver = codex.driver
        self.state.in_flight = InFlight(
            thought_id=thought.entry_id,
            position=thought.position,
            text=thought.text,
            thread_id=self.state.thread_id,
            user_messages_before=self.state.user_messages,
        )
        self.state.expect_reply(thought.entry_id, thought.text, self.state.user_messages)
        await self._save_now()
        # Set before sending: egress may see the thought recorded before the call returns.
        self._unconfirmed = thought
        try:
            how = await driver.submit(thought.text, thought.entry_id, thought.images)
        except DriverError as exc:
            self._unconfirmed = None
            await self._delivery_failed(thought, exc)
            return
        if self._svc.instruments is not None:
            self._svc.instruments.thought_handed_over()
        if steer:
            # Accepted into the turn ("steered"), or the turn had just ended and the driver started
            # it as a new turn or queued it as the next one. Either way it stays in flight until
            # Codex records it (the UserMessage line with its client id): accepted pending input
            # can still be dropped when the turn is cut short.
            if how != "steered":
                shown = cut(thought.entry_id)
                log.info("conversation %r: thought %s did not join a running turn: %s", self._name, shown, how)
            if how == "queued" and self._turn is not None:
                self._turn.steer_refused = True
            return
        # Codex has the bytes, but only its rollout proves it recorded them (a process may die
        # first). The thought stays in flight until egress sees it recorded (app-server: the
        # UserMessage with client_id = thought id) or, when the turn is over, the rollout says so.
        if not driver.persistent:
            self._svc.processes.record(self.conversation, driver.pids)
        if self._turn is None:  # (the driver may have said so already)
            self._start_turn(thought.entry_id)

    async def _confirm_unconfirmed(self, *, counts: bool = True) -> None:
        """The turn is over (or its process gone) and egress did not see the thought recorded: ask the
        rollout. ``counts=False``: Codex was killed from outside, a failure not counted against the thought."""
        thought, self._unconfirmed = self._unconfirmed, None
        in_flight = self.state.in_flight
        if thought is None or in_flight is None:
            return
        by_client_id = self._svc.make_driver.records_client_id
        rollout: Path | None = Path(self.state.rollout_path) if self.state.rollout_path else None
        if rollout is None and self.state.thread_id is not None:
            with contextlib.suppress(LookupError, OSError, TimeoutError):
                rollout = await asyncio.wait_for(self._svc.locate_rollout(self.state.thread_id), CONFIRM_LOCATE)
        received = rollout is not None and await asyncio.to_thread(
            codex_received, rollout, in_flight, by_client_id=by_client_id
        )
        if received:
            await self._delivered(thought, steer=False, start_turn=False)
            return
        self.state.in_flight = None
        await self._save_now()
        await self._count_failure(thought, "Codex ended before it took the thought", counts=counts)

    async def _count_failure(self, thought: PendingThought, reason: str, *, counts: bool = True) -> None:
        """One more failed hand-over of ``thought``: back off, and give up after :data:`DELIVERY_ATTEMPTS`.

        ``counts=False`` (Codex was killed from outside, e.g. ``kill -9`` of the shared app-server):
        the thought is sent again after the backoff without coming closer to being dropped.
        """
        attempts = self._retries.hand_overs.get(thought.entry_id, 0) + (1 if counts else 0)
        if attempts >= DELIVERY_ATTEMPTS:
            log.warning(
                "conversation %r: thought %s failed %d hand-overs (%s); dropping it",
                self._name,
                cut(thought.entry_id),
                attempts,
                cut(reason),
            )
            self._forget_thought(thought)
            c = classify(reason)
            await self._error(
                c.code,
                f"the thought could not be handed to Codex ({attempts} tries): {c.message}",
                "Send it again once `coven-codex validate` passes.",
            )
            self._svc.finish_thought(thought.position)
            return
        self._retries.hand_overs[thought.entry_id] = attempts
        delay = backoff(self._settings.restart_backoff, max(attempts, 1))
        log.warning(
            "conversation %r: hand-over %d of thought %s failed (%s); it will be sent again in %.1fs",
            self._name,
            attempts,
            cut(thought.entry_id),
            cut(reason),
            delay,
        )
        self._retry_at(delay)

    async def _reset(self, reset: _Reset) -> None:
        """End the thread (everything before the reset is done): the next thought starts a new one.

        Its status has an id of the reset's journal position and is written before the state
        records the reset as done (in the same save that forgets the thread): a daemon killed in
        between acts on it again, which ends the same thread again and finds the status written.
        """
        old = self.state.thread_id
        log.info("conversation %r: reset; thread %s ends", self._name, old)
        await self._end_codex(reason="reset")
        await self.drain_egress(RESET_DRAIN)  # the old thread's last entries first
        await self._egress.stop()
        if old is None:
            text = "no Codex thread was open; a new thread starts with the next thought"
        else:
            text = f"Codex thread {old} ended; a new thread starts with the next thought"
        await self._emit(StatusEntry(id=f"reset@{reset.position}", state=SESSION_RESET, thread_id=old, text=text))
        self._queue.remove(reset)
        self._queued_ids.pop(reset.entry_id, None)
        self.state.forget_thread()
        self._window.thread_ended()
        self.state.reply_to = None
        # The thread's options end with it; the reset may name the next thread's directory.
        workspace = None
        if reset.cwd is not None:
            try:
                workspace = await asyncio.to_thread(
                    reset_workspace, ResetEntry(cwd=reset.cwd), self._settings.cwd_roots
                )
            except OptionsRefused as exc:  # (checked on arrival; it changed since)
                log.warning("conversation %r: the reset's cwd is no longer usable (%s)", self._name, exc)
        self.state.workspace = workspace
        self.state.model = self.state.turn_timeout = self.state.fork_from = None
        self.state.delivered[reset.entry_id] = reset.position
        await self._save_now()
        self._svc.finish_thought(reset.position)

    def _forget_thought(self, thought: PendingThought) -> None:
        self._queue.remove(thought)
        self._queued_ids.pop(thought.entry_id, None)
        self._retries.hand_overs.pop(thought.entry_id, None)

    async def _delivered(self, thought: PendingThought, *, steer: bool, start_turn: bool = True) -> None:
        self._forget_thought(thought)
        self.state.in_flight = None
        self.state.delivered[thought.entry_id] = thought.position
        if len(self.state.delivered) > PRUNE_DELIVERED_AT:
            # Thoughts before the saved ingress cursor are never read again: forget their ids.
            self.state.forget_delivered_before(self._svc.saved_cursor())
        self.state.user_messages += 1
        self._retries.codex_failures = 0
        if start_turn and not steer and self._turn is None:
            self._start_turn(thought.entry_id)
        await self._save_now()
        self._svc.finish_thought(thought.position)

    async def _delivery_failed(self, thought: PendingThought, exc: DriverError) -> None:
        """The driver refused ``thought`` or died handing it over: close it, and count the failure
        unless the final rollout shows Codex had the thought after all."""
        log.warning("conversation %r: handing thought %s to Codex failed: %s", self._name, cut(thought.entry_id), exc)
        await self._end_codex(reason="delivery failed", expected=False)
        in_flight = self.state.in_flight
        if in_flight is not None and self.state.rollout_path:
            # The driver may have written the thought before it failed, and the process died after
            # the bytes left: its rollout (final now) says whether it had them.
            rollout = Path(self.state.rollout_path)
            by_client_id = self._svc.make_driver.records_client_id
            if await asyncio.to_thread(codex_received, rollout, in_flight, by_client_id=by_client_id):
                await self._delivered(thought, steer=False, start_turn=False)
                return
        self.state.in_flight = None
        await self._save_now()
        # Codex killed from outside (the shared app-server lost to SIGKILL, ...): not the thought's fault.
        killed = killed_from_outside(exc.returncode)
        await self._count_failure(thought, str(exc), counts=not killed)

    async def _close_codex(self) -> _Codex | None:
        """Close the open driver (its every process tree) and give the slot back; returns what was open."""
        codex, self._codex = self._codex, None
        try:
            if codex is not None:
                await codex.driver.aclose()
        finally:
            if codex is not None:
                self._svc.processes.forget(self.conversation)
            self._slots.release(self.conversation)
        return codex

    async def _end_codex(self, *, reason: str, expected: bool = True) -> None:
        """Close the open driver, if any, and end its turn (``expected=False``: a failure; resumed after a backoff)."""
        if self._codex is None:
            return
        log.debug("conversation %r: closing its Codex driver (%s)", self._name, reason)
        await self._close_codex()
        if self._unconfirmed is not None:
            await self._confirm_unconfirmed()
        turn = self._turn_finished()
        if not expected:
            self._restart_later()
        await self._turn_cut_short(turn, TURN_ABORTED if expected else TURN_FAILED, reason)

    # -- egress ------------------------------------------------------------------------------------
    def _on_rollout_line(self, line: Line) -> None:
        thought = self._unconfirmed
        if thought is None or b'"client_id"' not in line.data or thought.entry_id.encode() not in line.data:
            return
        client_id = recorded_client_id(line.data)
        if client_id is not None:
            self._inbox.put_nowait(_Recorded(client_id))

    def _start_egress(self) -> None:
        if self._group is not None:
            self._egress.start(self._group)

    async def drain_egress(self, limit: float) -> None:
        """Wait (up to ``limit`` seconds) until egress has every complete line of the rollout."""
        await self._egress.drain(limit)

    async def _save_now(self) -> None:
        await self._saver.save_now()

    async def save_state(self) -> None:
        """Save the state now (the daemon moved its journal positions to a new journal file)."""
        await self._saver.save_now()

    # -- output ------------------------------------------------------------------------------------
    async def _emit(self, entry: BaseEntry) -> bool:
        """Append ``entry`` to this conversation; ``False`` if its id was written before."""
        entry.conversation = self.conversation
        if entry.id is None:
            return await self._svc.writer.append(entry) is not None
        async with self._window.writing():  # egress may produce this id again from the rollout
            if await self._svc.writer.append(entry) is None:
                return False
            self.state.wrote(entry.id)
        return True

    async def _error(
        self, code: str, message: str, hint: str, *, entry_id: str | None = None, in_reply_to: str | None = None
    ) -> None:
        entry = ErrorEntry(id=entry_id, code=str(code), text=shorten(message), hint=hint, in_reply_to=in_reply_to)
        if await self._emit(entry):
            log.warning("conversation %r: %s: %s", self._name, code, shorten(message))

    async def report_crash(self, exc: BaseException) -> None:
        """After :meth:`run` failed with a bug: end the process, reset, tell the conversation.

        The running turn ends (``turn_failed``). A crash like the previous one is not written
        again; a summary of the repeats follows every few minutes.
        """
        self._egress.forget()
        self._slot_wait = None  # (cancelled with the task group; a waiter's slot is passed on)
        self._group = None
        with contextlib.suppress(Exception):
            await self._end_codex(reason="session failed", expected=False)
        turn = self._turn_finished()
        with contextlib.suppress(Exception):
            await self._turn_cut_short(turn, TURN_FAILED, "the session failed")
        summary = self._crashes.note(repr(exc)[:500])  # (a task group's error shows what failed inside)
        if summary is None:
            return
        with contextlib.suppress(Exception):
            await self._error(
                ErrorCode.UNKNOWN,
                f"internal error in the session: {exc!r} {summary}",
                "The session restarts by itself; please report this with the daemon log.",
            )

    def ran_well(self) -> None:
        """The session ran long enough after a crash: a new crash is reported at once."""
        self._crashes.clear()

    # -- shutdown ----------------------------------------------------------------------------------
    async def stop_turn(self) -> None:
        """Shutdown step 1: no new turns; interrupt a running one."""
        self._stopping = True
        if self._codex is not None and self._turn is not None:
            with contextlib.suppress(DriverError):
                await self._codex.driver.cancel()

    async def wait_turn_over(self, limit: float) -> None:
        """Shutdown: wait up to ``limit`` seconds for the running turn, if any, to end."""
        if self._codex is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._no_turn.wait(), limit)

    async def close(self) -> None:
        """Shutdown step 2: end the Codex process tree."""
        self._stopping = True
        await self._end_codex(reason="shutdown")

    async def abandon(self) -> None:
        """Another daemon serves the conversation now (this one lost its lease): let its Codex thread
        go and give back its pending journal positions, writing nothing (its writes would be refused).
        The session's task is cancelled before."""
        self._stopping = True
        with contextlib.suppress(Exception):
            await self._close_codex()
        self._turn_finished()
        for position in self._queued_ids.values():
            self._svc.finish_thought(position)
        self._queued_ids.clear()
        self._queue.clear()

    async def final_save(self) -> None:
        """Shutdown step 4 (after the tasks are cancelled): save the state one last time, the
        replay window closed unless a write was cut short (so the next start need not read it)."""
        self._window.idle()
        self._saver.save_blocking()
