"""One conversation's session: the task that owns everything of its conversation.

A :class:`Session` is one task per conversation, so there are no locks between conversations.
It is in exactly one phase (:mod:`coven_codex.conversation.phases`; every move checked against
the transition table) and reacts to one inbox of messages (:mod:`coven_codex.conversation.messages`:
thoughts, resets, cancels and approvals from ingress; the events of its CODEX driver
(:mod:`coven_codex.codex.drivers`), put there by the driver's event sink as they are emitted;
the slot pool's grant and eviction requests; the outcome of starting Codex, which runs in a child
task; "recorded" notes from its egress; the manager's stop) and to its own timers (interrupt
grace, idle release of the thread, restart backoff, the stop's deadline), which are the timeout
of that one wait. The turn deadline, the stream-idle bound and the approval timeout are the
drivers' (:mod:`coven_codex.codex.drivers`).

Delivering a thought (ingress exactly-once) is the hand-over's
(:mod:`coven_codex.conversation.handover`): written ahead as in flight, handed to Codex, delivered
once Codex recorded it, else sent again after a backoff, dropped after
:data:`~coven_codex.conversation.handover.DELIVERY_ATTEMPTS` hand-overs. After a crash the daemon
resolves the in-flight thought against the rollout before ingress re-reads the journal. A Codex
that fails to start or exits counts against the restart backoff (:mod:`coven_codex.conversation.link`).
Every retry waits :func:`~coven_codex.support.backoff.backoff`.

Every turn that started ends with exactly one turn-end ``status`` (and a failed one with one
``error``), by the turn ledger's rules (:mod:`coven_codex.conversation.ledger`): written by egress
from the rollout, or by the session when the driver reports the end and the rollout holds none,
when Codex dies, when the driver is closed mid-turn, when the session crashes, or after a restart
that found the turn cut short. Both writers use the turn's deterministic id
(:func:`~coven_codex.rollout.turn_entry_id`) through the daemon's one
:class:`~coven_codex.agent.writer.DaemonWriter`, so whichever comes first is the one written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import assert_never

from coven_codex.agent.egress_runner import EgressRunner
from coven_codex.agent.recovery import recorded_client_id
from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.services import PendingThought, SessionServices
from coven_codex.agent.state import SessionState
from coven_codex.agent.thread_options import OptionsRefused, reset_workspace
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
from coven_codex.conversation.admission import Admission
from coven_codex.conversation.handover import HandOver, HandOverResult, Outcome
from coven_codex.conversation.ledger import ERROR_DRAIN, Turn, TurnLedger
from coven_codex.conversation.link import CodexLink, OpenCodex
from coven_codex.conversation.messages import (
    CodexFailed,
    CodexOpened,
    DropQueued,
    Duplicate,
    Evict,
    LinkMessage,
    Message,
    Recorded,
    ResetRequest,
    SlotGranted,
    Stop,
)
from coven_codex.conversation.outbox import Outbox
from coven_codex.conversation.phases import Phase, PhaseMachine
from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    CancelEntry,
    DeltaEntry,
    ResetEntry,
    StatusEntry,
    ThoughtEntry,
)
from coven_codex.journal import Position
from coven_codex.rollout import TURN_ABORTED, TURN_FAILED
from coven_codex.support.backoff import RepeatFilter
from coven_codex.support.limits import cut
from coven_codex.tailing import Line

log = logging.getLogger(__name__)

SESSION_RESET = "session_reset"
"""The status a ``reset`` is answered with."""
THOUGHT_CANCELLED = "thought_cancelled"
"""The status a thought dropped by a ``cancel`` with ``queued`` is answered with (it never reached Codex)."""
THREAD_LOST = "thread_lost"
"""The status saying the conversation's thread could not be resumed and a new one started (the model
no longer sees the earlier turns)."""
STOP_GRACE_FACTOR = 2.0
"""After an interrupt, the driver ends a stuck turn within ``kill_grace``; we close the driver after twice that."""


RESET_DRAIN = 5.0
"""After the thread's last turn, how long a reset waits for egress to bring the rest of its rollout."""


class Session:
    """One conversation: its queue of thoughts, its Codex driver, its egress (module docstring)."""

    def __init__(self, state: SessionState, services: SessionServices) -> None:
        self.state = state
        self.conversation = state.conversation
        self._name = cut(state.conversation)
        """The conversation's name as log lines show it (cut)."""
        self._svc = services
        self._settings = services.settings
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._link = CodexLink(state, services, self._inbox.put_nowait)
        self._queue: deque[PendingThought | ResetRequest] = deque()
        self._crashes = RepeatFilter()
        self._saver = StateSaver(state, services.store, mirror=self._mirror if services.cluster is not None else None)
        self._group: asyncio.TaskGroup | None = None
        self._phases = PhaseMachine(self._name)
        self._stop_by: float | None = None
        """When stopping: when Codex is closed even if the turn has not ended."""
        self._stopped = asyncio.Event()
        self._running = False
        self._window = ReplayWindow(state, self._saver, services.journal)
        self._egress = EgressRunner(state, services, self._saver, self._window, on_line=self._on_rollout_line)
        self._outbox = Outbox(state, services.writer, self._window, self._name)
        self._admission = Admission(state, services, self._outbox, self._inbox.put_nowait)
        self._handover = HandOver(
            state, services, self._saver, admission=self._admission, outbox=self._outbox, queue=self._queue
        )
        self._ledger = TurnLedger(
            state,
            self._egress,
            self._outbox,
            self._saver,
            records_turn_end=services.make_driver.records_turn_end,
            name=self._name,
        )

    # -- routing (called synchronously by ingress) -------------------------------------------
    def offer_thought(self, entry: ThoughtEntry, position: Position) -> bool:
        """Queue a thought unless it was delivered before; ``True`` if it is now pending.

        The same thought read again (after a restart) is passed over; a *different* thought (at
        another journal position) reusing an earlier one's id is reported once and dropped.
        """
        return self._admission.offer_thought(entry, position)

    def offer_reset(self, entry: ResetEntry, position: Position) -> bool:
        """Queue a ``reset`` unless it was acted on before; ``True`` if it is now pending.

        It takes its place among the thoughts: those before it still go to the current thread,
        then the thread ends (a running turn is interrupted as soon as the reset arrives) and the
        next thought starts a new one.
        """
        return self._admission.offer_reset(entry, position)

    def offer_cancel(self, entry: CancelEntry) -> None:
        """Pass a ``cancel`` on (the running turn is interrupted; with ``queued``, queued thoughts are dropped)."""
        self._inbox.put_nowait(entry)

    def offer_drop_queued(self) -> None:
        """Drop the thoughts queued so far without interrupting anything (a ``cancel`` with ``queued``
        from before this run: the turn it meant did not survive the restart)."""
        self._inbox.put_nowait(DropQueued())

    def offer_approval(self, entry: ApprovalEntry) -> None:
        """Pass an ``approval`` on to the request it answers."""
        self._inbox.put_nowait(entry)

    @property
    def pending_positions(self) -> list[Position]:
        """Journal positions of the thoughts and resets routed here and not finished yet."""
        return list(self._admission.positions)

    async def _mirror(self, data: bytes) -> None:
        """The cluster's copy of a state just saved (with what is still pending: the conversation's floor)."""
        assert self._svc.cluster is not None
        await self._svc.cluster.save_state(self.conversation, data, self._admission.positions)

    @property
    def busy(self) -> bool:
        """A turn is running or thoughts are waiting."""
        return self._ledger.turn is not None or bool(self._queue)

    @property
    def live(self) -> bool:
        """A CODEX driver is open."""
        return self._link.codex is not None

    @property
    def turn_running(self) -> bool:
        """A Codex turn is running."""
        return self._ledger.turn is not None

    # -- the task ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the conversation until cancelled (:meth:`stop` ends its Codex first)."""
        self._running = True
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                group.create_task(self._saver.run(), name=f"state-saver:{self.conversation}")
                self._start_egress()
                if await self._ledger.end_cut_by_restart():
                    await self._save_now()
                if self._queue:
                    await self._advance()  # restarted after a crash: the queued thoughts go on
                elif not self.busy:
                    self._window.idle()  # (a window left open by a killed run: once egress is past it)
                while True:
                    message = await self._next_message()
                    if message is not None:
                        await self._handle(message)
                    await self._check_timers()
                    await self._advance()
        finally:
            self._running = False

    async def _next_message(self) -> Message | None:
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
        if self._link.codex is not None and self._link.codex.idle_since is not None:
            deadlines.append(self._link.codex.idle_since + self._settings.release_thread_after)
        if self._link.retries.not_before is not None:
            deadlines.append(self._link.retries.not_before)
        if self._stop_by is not None and self._phases.is_in(Phase.STOPPING):
            deadlines.append(self._stop_by)
        return min(deadlines) - now if deadlines else None

    # -- messages ------------------------------------------------------------------------------
    async def _handle(self, message: Message) -> None:
        if isinstance(message, PendingThought):
            await self._take_thought(message)
        elif isinstance(message, ResetRequest):
            if not await self._admission.take_reset(message):
                return
            self._queue.append(message)
            if self._phases.is_in(Phase.IN_TURN):
                await self._cancel()
        elif isinstance(message, CancelEntry):
            if message.queued:
                await self._drop_queued()
            await self._cancel()
        elif isinstance(message, DropQueued):
            await self._drop_queued()
        elif isinstance(message, ApprovalEntry):
            await self._approval(message)
        elif isinstance(message, Recorded):
            self._after(await self._handover.recorded(message.client_id))
        elif isinstance(message, Duplicate):
            await self._admission.report_duplicate(message)
        else:
            await self._link_message(message)

    async def _link_message(self, message: LinkMessage) -> None:
        """A message about the link to Codex: a slot, a start's outcome, an eviction, a stop, a driver's event."""
        if isinstance(message, SlotGranted):
            await self._slot_granted()
        elif isinstance(message, CodexOpened):
            await self._codex_opened(message.driver)
        elif isinstance(message, CodexFailed):
            await self._codex_failed(message.driver, message.error)
        elif isinstance(message, Evict):
            if self._phases.is_in(Phase.READY) and not self.busy:
                log.info("conversation %r: ending its idle Codex process for another conversation", self._name)
                await self._end_codex(reason="slot needed by another conversation")
                # As when it is let go for being idle: the chat, and whoever waits for every thread to
                # be let go (benchmarks/bench_scale.py above max_sessions), learn it from the journal.
                await self._outbox.emit(
                    StatusEntry(
                        state="session_ended",
                        thread_id=self.state.thread_id,
                        text="idle: the Codex thread was let go for a conversation waiting for a turn slot"
                        f" ({self._link.slot_bound()}); the next thought resumes it",
                    )
                )
        elif isinstance(message, Stop):
            await self._stop(message.by)
        elif self._link.codex is not None and message.driver is self._link.codex.driver:
            await self._driver_event(self._link.codex, message.event)
        elif self._link.starting is not None and message.driver is self._link.starting.driver:
            self._link.starting.early.append(message.event)  # handled once the start is reported

    async def _take_thought(self, thought: PendingThought) -> None:
        """Queue ``thought``, its thread options and attachments checked first (one that cannot go to
        Codex is refused)."""
        taken = await self._admission.take_thought(thought)
        if taken is not None:
            self._queue.append(taken)

    async def _drop_queued(self) -> None:
        """A ``cancel`` with ``queued``: the thoughts not yet handed to Codex are dropped, each answered
        with a ``thought_cancelled`` status and recorded as settled (never sent after a restart)."""
        dropped = [
            t
            for t in self._queue
            if isinstance(t, PendingThought)
            and t is not self._handover.unconfirmed
            and (self._link.codex is None or t.entry_id not in self._link.codex.driver.queued)
        ]
        if not dropped:
            return
        for thought in dropped:
            self._handover.forget(thought)
            self.state.delivered[thought.entry_id] = thought.position
        await self._save_now()
        for thought in dropped:
            log.info("conversation %r: queued thought %s cancelled", self._name, cut(thought.entry_id))
            await self._outbox.emit(
                StatusEntry(
                    id=f"cancelled@{thought.position}",
                    state=THOUGHT_CANCELLED,
                    text="cancelled before it reached Codex",
                    in_reply_to=thought.entry_id,
                )
            )
            self._svc.finish_thought(thought.position)
        if not any(isinstance(t, PendingThought) for t in self._queue) and self._link.slot_wait is not None:
            self._link.stop_waiting()
            self._phases.move(Phase.IDLE)

    async def _cancel(self) -> None:
        turn = self._ledger.turn
        if self._link.codex is None or turn is None:
            await self._outbox.emit(StatusEntry(state="cancel_ignored", text="nothing is running to cancel"))
            return
        log.info("conversation %r: interrupting the running turn", self._name)
        try:
            await self._link.codex.driver.cancel()
        except DriverError as exc:
            log.warning("conversation %r: interrupt failed: %s", self._name, exc)
            return
        turn.interrupt_sent_at = time.monotonic()
        if self._phases.is_in(Phase.IN_TURN):
            self._phases.move(Phase.INTERRUPTING)

    def _interrupted_at(self) -> float | None:
        """When the running turn was asked to stop, if it was (and a driver is open to stop it)."""
        if self._ledger.turn is None or self._link.codex is None:
            return None
        return self._ledger.turn.interrupt_sent_at

    async def _approval(self, entry: ApprovalEntry) -> None:
        codex = self._link.codex
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
            await self._outbox.error(
                classify(str(exc)).code,
                f"could not pass the approval on to Codex: {exc}",
                "The Codex process may have ended; the session will be resumed.",
            )

    async def _driver_event(self, codex: OpenCodex, event: DriverEvent) -> None:
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
            if self._handover.unconfirmed is not None and not self._waiting_in_driver(self._handover.unconfirmed):
                self._after(await self._handover.confirm())
            await self._ledger.over(event, turn)
            if self._phases.is_in(Phase.STOPPING):
                await self._finish_stop()
        elif isinstance(event, TurnExpired):
            await self._ledger.expired(event)
        elif isinstance(event, Delta):
            if self._settings.stream_deltas and event.text:
                await self._outbox.emit(
                    DeltaEntry(item_id=event.item_id, text=event.text, in_reply_to=self.state.reply_to)
                )
        elif isinstance(event, ApprovalRequested):
            await self._approval_asked(codex, event)
        elif isinstance(event, ApprovalResolved):
            codex.approvals.discard(event.request_id)
            if event.by == "timeout":
                text = f"no answer to approval {event.request_id} within {self._settings.approval_timeout:.0f}s; denied"
                await self._outbox.emit(
                    StatusEntry(state="approval_timeout", text=text, in_reply_to=self.state.reply_to)
                )
        elif isinstance(event, DriverFailed):
            await self._driver_failed(event)
        elif isinstance(event, AgentMessageCompleted):
            pass  # the rollout is the record of replies: egress writes them
        else:
            assert_never(event)

    async def _thread_ready(self, thread_id: str) -> None:
        """Codex told the thread id: a new one replaces the old thread (its egress, its state)."""
        old = self.state.thread_id
        changed = thread_id != old
        if changed:
            if old is not None:
                # Only a failed resume replaces a thread (a reset forgets it first): say so in the chat.
                log.warning("conversation %r: Codex thread %s replaced by %s", self._name, old, thread_id)
                await self._outbox.emit(
                    StatusEntry(
                        id=f"thread-lost@{old}",
                        state=THREAD_LOST,
                        thread_id=thread_id,
                        text=f"Codex could not resume thread {old} and started thread {thread_id}: "
                        "the model no longer sees the earlier turns of this conversation",
                    )
                )
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

    async def _approval_asked(self, codex: OpenCodex, event: ApprovalRequested) -> None:
        policy = self._settings.approval_policy
        if policy == "ask":
            codex.approvals.add(event.request_id)
            text = event.action
        else:
            text = f"{event.action} (answered by approval_policy = {policy!r}; nothing to do)"
        await self._outbox.emit(
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
        codex = await self._link.close()
        if self._handover.unconfirmed is not None:
            self._after(await self._handover.confirm(counts=not killed_from_outside(event.returncode)))
        if self._phases.is_in(Phase.STOPPING):
            await self._ledger.cut_short(self._turn_finished(), TURN_ABORTED, "Codex stopped")
            await self._finish_stop()
            return
        if self._ledger.turn is None and codex is not None and codex.driver.persistent:
            # The shared app-server died while no turn of ours ran on it: nothing was lost, and
            # nothing is said in the chat; the thread is resumed on the next thought.
            log.info("conversation %r: Codex exited while idle; its thread resumes on the next thought", self._name)
            self._phases.move(Phase.IDLE)
            return
        if self._svc.instruments is not None:
            self._svc.instruments.codex_failed()
        delay = self._link.restart_later()
        self._phases.move(Phase.BACKING_OFF)
        turn = self._turn_finished()
        await self._report_exit(event, turn)
        await self._ledger.cut_short(turn, TURN_FAILED, "Codex ended")
        log.warning("conversation %r: Codex exited (%s); resuming in %.1fs", self._name, event.returncode, delay)
        self._link.retries.resume = True

    async def _report_exit(self, event: DriverFailed, turn: Turn | None) -> None:
        """One ``error`` saying how Codex ended (for the running turn, with its deterministic id)."""
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
        if turn is not None and self._ledger.seen_since(turn)[1] == 0:
            await self.drain_egress(ERROR_DRAIN)  # the rollout's name for the turn, for the ids
        await self._ledger.turn_error(
            turn,
            code,
            shorten(message),
            "The session will be resumed in a moment; send the thought again if its reply is "
            "missing. Run `coven-codex validate` if this repeats.",
        )

    def _turn_started(self, turn_id: str | None) -> None:
        """The driver says a turn started (ours, or one it started from its own queue)."""
        if self._ledger.turn is not None:
            if turn_id is not None:
                self._ledger.named(turn_id)
            return
        thought = self._handover.unconfirmed
        key = turn_id or (thought.entry_id if thought is not None else None)
        if key is not None:
            self._begin_turn(key, keyed_by_turn_id=turn_id is not None)

    def _begin_turn(self, key: str, *, keyed_by_turn_id: bool) -> None:
        self._ledger.begin(key, keyed_by_turn_id=keyed_by_turn_id)
        if self._phases.is_in(Phase.READY):
            self._phases.move(Phase.IN_TURN)

    def _turn_finished(self) -> Turn | None:
        """No turn runs any more; returns the one that ran, if any."""
        turn = self._ledger.finished()
        if self._link.codex is not None and self._phases.is_in(Phase.IN_TURN, Phase.INTERRUPTING):
            self._phases.move(Phase.READY)  # (whoever closes Codex moves the phase itself)
        return turn

    # -- timers ------------------------------------------------------------------------------------
    async def _check_timers(self) -> None:
        """Turn and stream-idle timeouts, approval timeouts and policy are the driver's; these are ours."""
        now = time.monotonic()
        if self._phases.is_in(Phase.STOPPING):
            if self._stop_by is not None and now >= self._stop_by:
                await self._finish_stop()
            return
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
        codex = self._link.codex
        if (
            codex is not None
            and codex.idle_since is not None
            and not self.busy
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
            await self._end_codex(reason="idle")
            await self._outbox.emit(
                StatusEntry(
                    state="session_ended",
                    thread_id=self.state.thread_id,
                    text="idle: the Codex thread was let go; the next thought resumes it",
                )
            )

    # -- progress ----------------------------------------------------------------------------------
    async def _advance(self) -> None:
        """One step of the phase the conversation is in (after every message and timer)."""
        phase = self._phases.phase
        if phase in (Phase.WAITING_FOR_SLOT, Phase.STARTING, Phase.RESETTING, Phase.STOPPING, Phase.STOPPED):
            return  # (each waits for its message)
        if self._link.retries.not_before is not None:
            if time.monotonic() < self._link.retries.not_before:
                return
            self._link.retries.not_before = None
        if phase is Phase.BACKING_OFF:
            self._phases.move(Phase.IDLE)
        if phase in (Phase.IN_TURN, Phase.INTERRUPTING):
            waiting = [t for t in self._queue if t is not self._handover.unconfirmed]
            if waiting and isinstance(waiting[0], PendingThought) and self._can_steer():
                await self._deliver(waiting[0], steer=True)
            return
        if self._queue:
            await self._next_in_queue()
        elif self._phases.is_in(Phase.IDLE):
            if self._link.retries.resume:
                self._link.retries.resume = False
                await self._open_codex()
                return
            # Idle: nothing of this conversation needs replaying after a restart once egress is between lines.
            self._window.idle()
        else:
            await self._ready_and_idle()

    async def _next_in_queue(self) -> None:
        """IDLE or READY with something queued: a reset ends the thread; a thought opens Codex or goes to it."""
        self._mark_busy()
        if self._handover.unconfirmed is not None:
            return  # the driver is starting it as its next turn
        head = self._queue[0]
        if isinstance(head, ResetRequest):
            await self._reset(head)
        elif self._phases.is_in(Phase.READY):
            await self._deliver(head)
        else:
            if self.state.thread_id is None:
                await self._take_options(head)
            await self._open_codex()

    async def _ready_and_idle(self) -> None:
        """READY with nothing to do: a persistent driver waits for the idle release; exec's ends."""
        self._window.idle()
        codex = self._link.codex
        assert codex is not None
        if codex.driver.persistent:
            self._link.mark_idle()
        else:
            await self._end_codex(reason="turn over")

    def _can_steer(self) -> bool:
        # One thought in flight at a time: steer only once the running turn's thought is recorded.
        turn = self._ledger.turn
        return (
            self._settings.mid_turn == "steer"
            and self._link.codex is not None
            and self._link.codex.driver.supports_steer
            and turn is not None
            and turn.interrupt_sent_at is None
            and not turn.steer_refused
            and self._handover.unconfirmed is None
        )

    def _waiting_in_driver(self, thought: PendingThought) -> bool:
        """The driver still has ``thought``: queued as its next turn, or already running it."""
        return self._link.holds(thought.entry_id)

    def _mark_busy(self) -> None:
        self._link.mark_busy()
        self._window.busy()

    async def _open_codex(self) -> None:
        """Start a driver for the conversation's thread once it has a slot (both reported back as messages)."""
        if self._link.try_slot():
            self._start_codex()
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
        if self._group is not None:
            self._link.wait_for_slot(self._group)

    async def _slot_granted(self) -> None:
        self._link.slot_wait = None
        if not self._phases.is_in(Phase.WAITING_FOR_SLOT) or not self._queue:
            self._link.release_slot()  # the thoughts it was for were cancelled meanwhile
            return
        self._start_codex()

    def _start_codex(self) -> None:
        """The slot is ours: start Codex in a child task, which reports :class:`CodexOpened` or
        :class:`CodexFailed` (a cancel of the session does not wait for the start)."""
        assert self._group is not None
        self._phases.move(Phase.STARTING)
        self._link.start(self._group)

    async def _codex_failed(self, driver: CodexDriver, exc: DriverError) -> None:
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

    async def _codex_opened(self, driver: CodexDriver) -> None:
        if not self._phases.is_in(Phase.STARTING):
            # Shutdown began while Codex was starting: end it here, it will never get a turn.
            await self._link.start_failed(driver)
            return
        resume = self.state.thread_id
        early = self._link.opened(driver)
        self._phases.move(Phase.READY)
        if driver.persistent:
            resumed = resume is not None and driver.thread_id == resume
            thread = driver.thread_id or resume
            text = f"Codex session resumed (thread {thread})" if resumed else f"Codex session started (thread {thread})"
            await self._outbox.emit(
                StatusEntry(state="session_resumed" if resumed else "session_started", thread_id=thread, text=text)
            )
        if driver.thread_id is not None and driver.thread_id != self.state.thread_id:
            await self._thread_ready(driver.thread_id)
        for event in early:
            codex = self._link.codex
            if codex is None or codex.driver is not driver:
                break
            await self._driver_event(codex, event)

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
        codex = self._link.codex
        assert codex is not None
        driver = codex.driver
        result = await self._handover.submit(driver, thought)
        if isinstance(result, DriverError):
            shown = cut(thought.entry_id)
            log.warning("conversation %r: handing thought %s to Codex failed: %s", self._name, shown, result)
            await self._end_codex(reason="delivery failed", expected=False)
            self._after(await self._handover.failed(thought, result))
            return
        if steer:
            # Accepted into the turn ("steered"), or the turn had just ended and the driver started
            # it as a new turn or queued it as the next one. Either way it stays in flight until
            # Codex records it (the UserMessage line with its client id): accepted pending input
            # can still be dropped when the turn is cut short.
            if result.how != "steered":
                shown = cut(thought.entry_id)
                log.info("conversation %r: thought %s did not join a running turn: %s", self._name, shown, result.how)
            if result.how == "queued" and self._ledger.turn is not None:
                self._ledger.turn.steer_refused = True
            return
        # Codex has the bytes, but only its rollout proves it recorded them (a process may die
        # first). The thought stays in flight until egress sees it recorded (app-server: the
        # UserMessage with client_id = thought id) or, when the turn is over, the rollout says so.
        if not driver.persistent:
            self._svc.processes.record(self.conversation, driver.pids)
        if self._ledger.turn is None:  # (the driver may have said so already)
            self._begin_turn(thought.entry_id, keyed_by_turn_id=False)

    def _after(self, result: HandOverResult | None) -> None:
        """What a hand-over's outcome means for the link: a delivery clears Codex's failures; a retry waits."""
        if result is None:
            return
        if result.outcome is Outcome.DELIVERED:
            self._link.retries.codex_failures = 0
        elif result.outcome is Outcome.RETRY_AFTER:
            self._link.retry_at(result.retry_in)

    async def _reset(self, reset: ResetRequest) -> None:
        """End the thread (everything before the reset is done): the next thought starts a new one.

        Its status has an id of the reset's journal position and is written before the state
        records the reset as done (in the same save that forgets the thread): a daemon killed in
        between acts on it again, which ends the same thread again and finds the status written.
        """
        old = self.state.thread_id
        log.info("conversation %r: reset; thread %s ends", self._name, old)
        await self._end_codex(reason="reset")
        self._phases.move(Phase.RESETTING)
        await self.drain_egress(RESET_DRAIN)  # the old thread's last entries first
        await self._egress.stop()
        if old is None:
            text = "no Codex thread was open; a new thread starts with the next thought"
        else:
            text = f"Codex thread {old} ended; a new thread starts with the next thought"
        await self._outbox.emit(
            StatusEntry(id=f"reset@{reset.position}", state=SESSION_RESET, thread_id=old, text=text)
        )
        self._queue.remove(reset)
        self._admission.forget(reset.entry_id)
        self.state.forget_thread()
        self._window.thread_ended()
        self.state.reply_to = None
        self.state.workspace = await self._reset_workspace(reset)
        self.state.model = self.state.turn_timeout = self.state.fork_from = None
        self.state.delivered[reset.entry_id] = reset.position
        await self._save_now()
        self._svc.finish_thought(reset.position)
        self._phases.move(Phase.IDLE)

    async def _reset_workspace(self, reset: ResetRequest) -> str | None:
        """The next thread's directory, as the reset names it (``None``: the daemon's)."""
        if reset.cwd is None:
            return None
        try:
            return await asyncio.to_thread(reset_workspace, ResetEntry(cwd=reset.cwd), self._settings.cwd_roots)
        except OptionsRefused as exc:  # (checked on arrival; it changed since)
            log.warning("conversation %r: the reset's cwd is no longer usable (%s)", self._name, exc)
            return None

    async def _end_codex(self, *, reason: str, expected: bool = True) -> None:
        """Close the open driver, if any, and end its turn (``expected=False``: a failure; resumed after a backoff)."""
        if self._link.codex is None:
            return
        log.debug("conversation %r: closing its Codex driver (%s)", self._name, reason)
        await self._link.close()
        if self._handover.unconfirmed is not None:
            self._after(await self._handover.confirm())
        if not expected:
            self._link.restart_later()
        if self._phases.is_in(Phase.READY, Phase.IN_TURN, Phase.INTERRUPTING):  # (stopping, resetting: theirs)
            self._phases.move(Phase.IDLE if expected else Phase.BACKING_OFF)
        turn = self._turn_finished()
        await self._ledger.cut_short(turn, TURN_ABORTED if expected else TURN_FAILED, reason)

    # -- egress ------------------------------------------------------------------------------------
    def _on_rollout_line(self, line: Line) -> None:
        thought = self._handover.unconfirmed
        if thought is None or b'"client_id"' not in line.data or thought.entry_id.encode() not in line.data:
            return
        client_id = recorded_client_id(line.data)
        if client_id is not None:
            self._inbox.put_nowait(Recorded(client_id))

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
    async def report_crash(self, exc: BaseException) -> None:
        """After :meth:`run` failed with a bug: end the process, reset, tell the conversation.

        The running turn ends (``turn_failed``). A crash like the previous one is not written
        again; a summary of the repeats follows every few minutes. The conversation starts over
        in ``idle`` (or stays stopped), as a new session would.
        """
        self._egress.forget()
        self._link.slot_wait = None  # (cancelled with the task group; a waiter's slot is passed on)
        self._link.starting = None  # (its task cancelled with the group closed its driver)
        self._group = None
        with contextlib.suppress(Exception):
            await self._end_codex(reason="session failed", expected=False)
        turn = self._turn_finished()
        stopping = self._phases.is_in(Phase.STOPPING, Phase.STOPPED)
        self._phases = PhaseMachine(self._name, Phase.STOPPED if stopping else Phase.IDLE)
        if stopping:
            self._stopped.set()
        with contextlib.suppress(Exception):
            await self._ledger.cut_short(turn, TURN_FAILED, "the session failed")
        summary = self._crashes.note(repr(exc)[:500])  # (a task group's error shows what failed inside)
        if summary is None:
            return
        with contextlib.suppress(Exception):
            await self._outbox.error(
                ErrorCode.UNKNOWN,
                f"internal error in the session: {exc!r} {summary}",
                "The session restarts by itself; please report this with the daemon log.",
            )

    def ran_well(self) -> None:
        """The session ran long enough after a crash: a new crash is reported at once."""
        self._crashes.clear()

    async def stop(self, limit: float) -> None:
        """Shutdown: no new turns; the running one is interrupted and given ``limit`` seconds; then
        Codex is closed. Asked of the session's own task (a message); returns once it is done."""
        if not self._running:  # (between runs after a crash: nothing else changes the state now)
            await self._stop(time.monotonic() + limit)
            return
        self._inbox.put_nowait(Stop(time.monotonic() + limit))
        await self._stopped.wait()

    async def _stop(self, by: float) -> None:
        if self._phases.is_in(Phase.STOPPING, Phase.STOPPED):
            return
        self._phases.move(Phase.STOPPING)
        self._stop_by = by
        self._link.stop_waiting()
        await self._link.abort_start(by)
        if self._link.codex is not None and self._ledger.turn is not None:
            with contextlib.suppress(DriverError):
                await self._link.codex.driver.cancel()
            return  # the turn's end (or the deadline) finishes the stop
        await self._finish_stop()

    async def _finish_stop(self) -> None:
        """The turn is over, or the stop's deadline passed: close Codex; stopped."""
        await self._end_codex(reason="shutdown")
        self._phases.move(Phase.STOPPED)
        self._stopped.set()

    async def abandon(self) -> None:
        """Another daemon serves the conversation now (this one lost its lease): let its Codex thread
        go and give back its pending journal positions, writing nothing (its writes would be refused).
        The session's task is cancelled before."""
        if not self._phases.is_in(Phase.STOPPING, Phase.STOPPED):
            self._phases.move(Phase.STOPPING)
        with contextlib.suppress(Exception):
            await self._link.close()
        self._turn_finished()
        self._phases.move(Phase.STOPPED)
        self._stopped.set()
        self._admission.give_back()
        self._queue.clear()

    async def final_save(self) -> None:
        """Shutdown step 4 (after the tasks are cancelled): save the state one last time, the
        replay window closed unless a write was cut short (so the next start need not read it)."""
        self._window.idle()
        self._saver.save_blocking()
