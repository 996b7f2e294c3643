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
from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.services import SessionServices
from coven_codex.agent.state import SessionState
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
)
from coven_codex.codex.errors import ErrorCode
from coven_codex.codex.thought import Thought
from coven_codex.conversation.admission import Admission
from coven_codex.conversation.approvals import Approvals
from coven_codex.conversation.closing import Closing
from coven_codex.conversation.handover import HandOver
from coven_codex.conversation.ledger import TurnLedger
from coven_codex.conversation.link import CodexLink, OpenCodex
from coven_codex.conversation.messages import (
    CodexFailed,
    CodexOpened,
    DropQueued,
    Duplicate,
    Evict,
    LinkMessage,
    Message,
    Queued,
    Recorded,
    Release,
    ResetRequest,
    SlotGranted,
    Stop,
)
from coven_codex.conversation.opening import Opening
from coven_codex.conversation.outbox import Outbox
from coven_codex.conversation.phases import Phase, PhaseMachine
from coven_codex.conversation.stopping import Stopping
from coven_codex.conversation.thread import ThreadKeeper
from coven_codex.conversation.timers import Timers
from coven_codex.entries import (
    ApprovalEntry,
    CancelEntry,
    DeltaEntry,
    ResetEntry,
    SettingsEntry,
    ThoughtEntry,
)
from coven_codex.journal import Position
from coven_codex.support.backoff import RepeatFilter
from coven_codex.support.limits import cut
from coven_codex.tailing import Line

log = logging.getLogger(__name__)


class Session:
    """One conversation: its queue of thoughts, its Codex driver, its egress (module docstring)."""

    def __init__(self, state: SessionState, services: SessionServices) -> None:
        self.state = state
        self.conversation = state.conversation
        self._name = cut(state.conversation)  # (as log lines show it)
        self._svc = services
        self._settings = services.settings
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._link = CodexLink(state, services, self._inbox.put_nowait)
        self._queue: deque[Queued] = deque()
        self._crashes = RepeatFilter()
        self._saver = StateSaver(state, services.store, mirror=self._mirror if services.cluster is not None else None)
        self._group: asyncio.TaskGroup | None = None
        self._phases = PhaseMachine(self._name)
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
            phases=self._phases,
            records_turn_end=services.make_driver.plan.records_turn_end,
            name=self._name,
        )
        self._closing = Closing(
            services, self._link, handover=self._handover, ledger=self._ledger, phases=self._phases, name=self._name
        )
        self._wire(state, services)

    def _wire(self, state: SessionState, services: SessionServices) -> None:
        """The parts that act on the ones above: the stop, the timers, opening Codex, approvals, the thread."""
        self._stopping = Stopping(
            self._link,
            self._ledger,
            closing=self._closing,
            phases=self._phases,
            admission=self._admission,
            queue=self._queue,
        )
        self._timers = Timers(
            state,
            services.settings,
            link=self._link,
            ledger=self._ledger,
            handover=self._handover,
            closing=self._closing,
            stopping=self._stopping,
            outbox=self._outbox,
            busy=lambda: self.busy,
            name=self._name,
        )
        self._opening = Opening(state, self._link, self._outbox, self._phases, self._name)
        self._approvals = Approvals(state, services.settings, self._outbox, self._name)
        self._thread = ThreadKeeper(
            state,
            services,
            self._saver,
            egress=self._egress,
            window=self._window,
            outbox=self._outbox,
            admission=self._admission,
            queue=self._queue,
            closing=self._closing,
            phases=self._phases,
            name=self._name,
        )

    # -- routing (called synchronously by ingress) -------------------------------------------
    def offer_thought(self, entry: ThoughtEntry, position: Position) -> bool:
        """Queue a thought unless it was delivered before; ``True`` if it is now pending.

        The same thought read again (after a restart) is passed over; a *different* thought (at
        another journal position) reusing an earlier one's id is reported once and dropped.
        """
        return self._admission.offer_thought(entry, position)

    def offer_reset(self, entry: ResetEntry | SettingsEntry, position: Position) -> bool:
        """Queue a ``reset`` unless it was acted on before; ``True`` if it is now pending.

        It takes its place among the thoughts: those before go to the current thread, then the thread
        ends (a running turn is interrupted at once) and the next thought starts a new one. A
        ``settings`` entry takes the same place, interrupting nothing (:mod:`~coven_codex.conversation.thread`)."""
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

    def offer_release(self, release: Release) -> None:
        """Another conversation takes this one's thread over (the manager asks; ``release.done`` is set)."""
        self._inbox.put_nowait(release)

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
                    await self._saver.save_now()
                if self._queue:
                    await self._advance()  # restarted after a crash: the queued thoughts go on
                elif not self.busy:
                    self._window.idle()  # (a window left open by a killed run: once egress is past it)
                while True:
                    message = await self._timers.next_message(self._inbox)
                    if message is not None:
                        await self._handle(message)
                    await self._timers.check()
                    await self._advance()
        finally:
            self._running = False

    # -- messages ------------------------------------------------------------------------------
    async def _handle(self, message: Message) -> None:
        if isinstance(message, Thought):  # (its options and attachments checked first)
            taken = await self._admission.take_thought(message)
            if taken is not None:
                self._queue.append(taken)
        elif isinstance(message, ResetRequest | Release):
            if await self._thread.queue_end(message, self._handover.unconfirmed) and self._phases.is_in(Phase.IN_TURN):
                await self._ledger.interrupt(self._link.driver)
        elif isinstance(message, CancelEntry):
            if message.queued:
                await self._drop_queued()
            await self._ledger.interrupt(self._link.driver)
        elif isinstance(message, DropQueued):
            await self._drop_queued()
        elif isinstance(message, ApprovalEntry):
            await self._approvals.answer(self._link.codex, message)
        elif isinstance(message, Recorded):
            self._closing.after(await self._handover.recorded(message.client_id))
        elif isinstance(message, Duplicate):
            await self._admission.report_duplicate(message)
        else:
            await self._link_message(message)

    async def _link_message(self, message: LinkMessage) -> None:
        """A message about the link to Codex: a slot, a start's outcome, an eviction, a stop, a driver's event."""
        if isinstance(message, SlotGranted):
            self._opening.slot_granted(self._group, wanted=bool(self._queue))
        elif isinstance(message, CodexOpened):
            await self._codex_opened(message.driver)
        elif isinstance(message, CodexFailed):
            await self._opening.failed(message.driver, message.error)
        elif isinstance(message, Evict):
            if self._phases.is_in(Phase.READY) and not self.busy:
                await self._timers.evicted()
        elif isinstance(message, Stop):
            await self._stopping.begin(message.by)
        elif self._link.codex is not None and message.driver is self._link.codex.driver:
            await self._driver_event(self._link.codex, message.event)
        elif self._link.starting is not None and message.driver is self._link.starting.driver:
            self._link.starting.early.append(message.event)  # handled once the start is reported

    async def _drop_queued(self) -> None:
        """A ``cancel`` with ``queued``: the thoughts not handed to Codex yet are dropped (the hand-over's);
        with none left, a wait for a slot ends."""
        codex = self._link.codex
        none_left = await self._handover.drop_queued(lambda i: i in (codex.driver.queued if codex else ()))
        if none_left:
            self._opening.not_wanted()

    async def _driver_event(self, codex: OpenCodex, event: DriverEvent) -> None:
        """Act on an event of the open driver ``codex`` (see :mod:`coven_codex.codex.drivers.base`)."""
        if isinstance(event, ThreadStarted):
            if event.note:
                log.warning("conversation %r: %s", self._name, event.note)
            await self._thread_ready(event.thread_id)
        elif isinstance(event, TurnStarted):
            thought = self._handover.unconfirmed
            self._ledger.started(event.turn_id, thought.id if thought is not None else None)
        elif isinstance(event, TurnFinished):
            await self._closing.turn_over(codex, event)
            if self._phases.is_in(Phase.STOPPING):
                await self._stopping.finish()
        elif isinstance(event, TurnExpired):
            await self._ledger.expired(event)
        elif isinstance(event, Delta):
            if self._settings.stream_deltas and event.text:
                await self._outbox.emit(
                    DeltaEntry(item_id=event.item_id, text=event.text, in_reply_to=self.state.reply_to)
                )
        elif isinstance(event, ApprovalRequested):
            await self._approvals.asked(codex, event)
        elif isinstance(event, ApprovalResolved):
            await self._approvals.resolved(codex, event)
        elif isinstance(event, DriverFailed):
            if await self._closing.died(event):
                await self._stopping.finish()
        elif isinstance(event, AgentMessageCompleted):
            pass  # the rollout is the record of replies: egress writes them
        else:
            assert_never(event)

    async def _thread_ready(self, thread_id: str) -> None:
        """Codex told the thread id (a new one replaces the old thread); egress follows it."""
        await self._thread.named(thread_id)
        self._start_egress()

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
            if (
                waiting
                and isinstance(waiting[0], Thought)
                and self._ledger.can_steer(
                    self._link.driver,
                    mid_turn=self._settings.mid_turn,
                    thought_in_flight=self._handover.unconfirmed is not None,
                )
            ):
                await self._deliver(waiting[0], steer=True)
            return
        if self._queue:
            await self._next_in_queue()
        elif self._phases.is_in(Phase.IDLE):
            if self._link.retries.resume:
                self._link.retries.resume = False
                await self._opening.open(self._group)
                return
            # Idle: nothing of this conversation needs replaying after a restart once egress is between lines.
            self._window.idle()
        else:  # READY with nothing to do
            self._window.idle()
            await self._timers.ready_and_idle()

    async def _next_in_queue(self) -> None:
        """IDLE or READY with something queued: a reset ends the thread; a thought opens Codex or goes to it."""
        self._link.mark_busy()
        self._window.busy()
        if self._handover.unconfirmed is not None:
            return  # the driver is starting it as its next turn
        head = self._queue[0]
        while isinstance(head, ResetRequest | Release):  # (what waits behind one goes on: no message may come for it)
            await self._thread.end(head)
            if not self._queue or not self._phases.is_in(Phase.IDLE, Phase.READY):
                return
            head = self._queue[0]
        if self._phases.is_in(Phase.READY):
            await self._deliver(head)
        else:
            if self.state.thread_id is None and not await self._thread.take_options(head):
                return  # (its thread could not be taken over: refused, nothing opened)
            await self._opening.open(self._group)

    async def _codex_opened(self, driver: CodexDriver) -> None:
        early = await self._opening.opened(driver)
        if early is None:
            return
        if driver.thread_id is not None and driver.thread_id != self.state.thread_id:
            await self._thread_ready(driver.thread_id)
        for event in early:
            codex = self._link.codex
            if codex is None or codex.driver is not driver:
                break
            await self._driver_event(codex, event)

    async def _deliver(self, thought: Thought, *, steer: bool = False) -> None:
        """Hand ``thought`` to the open driver (written ahead as in flight): a new turn, or with
        ``steer`` into the running one."""
        codex = self._link.codex
        assert codex is not None
        driver = codex.driver
        result = await self._handover.submit(driver, thought)
        if isinstance(result, DriverError):
            shown = cut(thought.id)
            log.warning("conversation %r: handing thought %s to Codex failed: %s", self._name, shown, result)
            await self._closing.end(reason="delivery failed", expected=False)
            self._closing.after(await self._handover.failed(thought, result))
            return
        # Codex has the bytes, but only its rollout proves it recorded them (a process may die
        # first). The thought stays in flight until egress sees it recorded (app-server: the
        # UserMessage with client_id = thought id) or, when the turn is over, the rollout says so.
        if not steer and not driver.persistent:
            self._svc.processes.record(self.conversation, driver.pids)
        self._ledger.handed_over(thought.id, result.how, steer=steer)

    # -- egress ------------------------------------------------------------------------------------
    def _on_rollout_line(self, line: Line) -> None:
        client_id = self._handover.recorded_in(line)
        if client_id is not None:
            self._inbox.put_nowait(Recorded(client_id))

    def _start_egress(self) -> None:
        if self._group is not None:
            self._egress.start(self._group)

    async def drain_egress(self, limit: float) -> None:
        """Wait (up to ``limit`` seconds) until egress has every complete line of the rollout."""
        await self._egress.drain(limit)

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
        self._group = None
        if await self._closing.crashed():
            self._stopping.stopped.set()
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
            await self._stopping.begin(time.monotonic() + limit)
            return
        self._inbox.put_nowait(Stop(time.monotonic() + limit))
        await self._stopping.stopped.wait()

    async def abandon(self) -> None:
        """Another daemon serves the conversation now (this one lost its lease): let its Codex thread
        go and give back its pending journal positions, writing nothing (its writes would be refused).
        The session's task is cancelled before."""
        await self._stopping.abandon()

    async def final_save(self) -> None:
        """Shutdown step 4 (after the tasks are cancelled): save the state one last time, the
        replay window closed unless a write was cut short (so the next start need not read it)."""
        self._window.idle()
        self._saver.save_blocking()
