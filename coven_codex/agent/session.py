"""One conversation's session: its queue of thoughts, its Codex link, its egress.

A :class:`Session` is one task that owns everything of its conversation, so there are no
locks between conversations. It reacts to one inbox of messages (thoughts, cancels and
approvals from ingress; events from its Codex link; eviction requests from the slot pool;
"recorded" notes from its egress) and to timers (turn deadline, stream-idle, interrupt grace,
approval timeout, idle reaping, restart backoff), which are the timeout of that one wait.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from coven_codex.agent.egress_runner import EgressRunner
from coven_codex.agent.link import (
    ApprovalAsked,
    ApprovalSettled,
    CodexLink,
    Delta,
    LinkError,
    LinkEvent,
    ProcessExited,
    ThreadReady,
    TurnEnded,
    TurnStarted,
)
from coven_codex.agent.recovery import codex_received, recorded_client_id
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.services import PendingThought, SessionServices
from coven_codex.agent.state import InFlight, SessionState
from coven_codex.codex.errors import ErrorCode, classify, shorten
from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    BaseEntry,
    CancelEntry,
    DeltaEntry,
    ErrorEntry,
    StatusEntry,
    ThoughtEntry,
)
from coven_codex.rollout import TURN_ABORTED, TURN_COMPLETED, TURN_FAILED
from coven_codex.tailing import Line

log = logging.getLogger(__name__)

MAX_BACKOFF = 60.0
DELIVERY_ATTEMPTS = 3
ERROR_DRAIN = 1.0
TURN_END_STATE_OF = {"completed": TURN_COMPLETED, "failed": TURN_FAILED, "interrupted": TURN_ABORTED}
"""The status a driver's turn outcome becomes when the rollout does not record the turn's end."""
PRUNE_DELIVERED_AT = 256
CONFIRM_LOCATE = 5.0
STOP_GRACE_FACTOR = 2.0
"""After an interrupt, the driver ends a stuck turn within ``kill_grace``; we end the link after twice that."""


@dataclass(frozen=True, slots=True)
class _LinkMessage:
    generation: int
    event: LinkEvent


@dataclass(frozen=True, slots=True)
class _Evict:
    pass


@dataclass(frozen=True, slots=True)
class _Recorded:
    """Egress saw Codex record a user message carrying this client id."""

    client_id: str


_Message = PendingThought | CancelEntry | ApprovalEntry | _LinkMessage | _Evict | _Recorded


class Session:
    def __init__(self, state: SessionState, services: SessionServices) -> None:
        self.state = state
        self.conversation = state.conversation
        self._svc = services
        self._settings = services.settings
        self._inbox: asyncio.Queue[_Message] = asyncio.Queue()
        self._queue: deque[PendingThought] = deque()
        self._queued_ids: set[str] = set()
        self._link: CodexLink | None = None
        self._generation = 0
        self._turn_active = False
        self._interrupt_sent_at: float | None = None
        self._idle_since: float | None = None
        self._restart_at: float | None = None
        self._restart_wanted = False
        self._failures = 0
        self._approvals: set[str] = set()
        self._stopping = False
        self._saver = StateSaver(state, services.store)
        self._group: asyncio.TaskGroup | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._told_waiting = False
        self._unconfirmed: PendingThought | None = None
        self._steer_refused = False
        self._last_open_error: str | None = None
        self._errors_at_turn_start = 0
        self._turn_ends_at_turn_start = 0
        self._no_turn = asyncio.Event()
        self._no_turn.set()
        self._egress = EgressRunner(state, services, self._saver, on_line=self._on_rollout_line)

    # -- routing (called synchronously by ingress) -------------------------------------------
    def offer_thought(self, entry: ThoughtEntry, position: int) -> bool:
        """Queue a thought unless it was delivered before; ``True`` if it is now pending."""
        assert entry.id is not None
        if entry.id in self.state.delivered or entry.id in self._queued_ids:
            return False
        self._queued_ids.add(entry.id)
        self._inbox.put_nowait(PendingThought(entry.id, entry.text, position))
        return True

    def offer_cancel(self, entry: CancelEntry) -> None:
        self._inbox.put_nowait(entry)

    def offer_approval(self, entry: ApprovalEntry) -> None:
        self._inbox.put_nowait(entry)

    @property
    def busy(self) -> bool:
        return self._turn_active or bool(self._queue)

    @property
    def live(self) -> bool:
        return self._link is not None

    # -- the task ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the conversation until cancelled (:meth:`shutdown` ends processes first)."""
        async with asyncio.TaskGroup() as group:
            self._group = group
            group.create_task(self._saver.run(), name=f"state-saver:{self.conversation}")
            self._start_egress()
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
            return await asyncio.wait_for(self._inbox.get(), timeout=max(timeout, 0.0))
        except TimeoutError:
            return None

    def _next_timeout(self) -> float | None:
        now = time.monotonic()
        deadlines: list[float] = []
        if self._interrupt_sent_at is not None:
            deadlines.append(self._interrupt_sent_at + STOP_GRACE_FACTOR * self._settings.kill_grace)
        if self._idle_since is not None and self._link is not None:
            deadlines.append(self._idle_since + self._settings.idle_reap)
        if self._restart_at is not None:
            deadlines.append(self._restart_at)
        return min(deadlines) - now if deadlines else None

    # -- messages ------------------------------------------------------------------------------
    async def _handle(self, message: _Message) -> None:
        if isinstance(message, PendingThought):
            self._queue.append(message)
        elif isinstance(message, CancelEntry):
            await self._cancel()
        elif isinstance(message, ApprovalEntry):
            await self._approval(message)
        elif isinstance(message, _Evict):
            if self._link is not None and not self.busy:
                log.info("conversation %r: ending its idle Codex process for another conversation",
                         self.conversation)
                await self._end_link(reason="slot needed by another conversation")
        elif isinstance(message, _Recorded):
            thought = self._unconfirmed
            if thought is not None and thought.entry_id == message.client_id:
                self._unconfirmed = None
                await self._delivered(thought, steer=False, start_turn=False)
        elif message.generation == self._generation:
            await self._link_event(message.event)

    async def _cancel(self) -> None:
        if self._link is None or not self._turn_active:
            await self._emit(StatusEntry(state="cancel_ignored", text="nothing is running to cancel"))
            return
        log.info("conversation %r: interrupting the running turn", self.conversation)
        try:
            await self._link.interrupt()
        except LinkError as exc:
            log.warning("conversation %r: interrupt failed: %s", self.conversation, exc)
            return
        self._interrupt_sent_at = time.monotonic()

    async def _approval(self, entry: ApprovalEntry) -> None:
        if entry.request_id not in self._approvals or self._link is None:
            log.info("conversation %r: approval for unknown or expired request %s ignored",
                     self.conversation, entry.request_id)
            return
        self._approvals.discard(entry.request_id)
        try:
            await self._link.answer(entry.request_id, entry.decision == "approve")
        except LinkError as exc:
            await self._error(classify(str(exc)).code, f"could not pass the approval on to Codex: {exc}",
                              "The Codex process may have ended; the session will be resumed.")

    async def _link_event(self, event: LinkEvent) -> None:
        if isinstance(event, ThreadReady):
            await self._thread_ready(event)
        elif isinstance(event, TurnStarted):
            self._set_turn_active()
        elif isinstance(event, TurnEnded):
            self._turn_finished()
            if self._unconfirmed is not None and not self._waiting_in_driver(self._unconfirmed):
                await self._confirm_unconfirmed()
            await self._turn_over(event)
        elif isinstance(event, Delta):
            if self._settings.stream_deltas and event.text:
                await self._emit(DeltaEntry(item_id=event.item_id, text=event.text))
        elif isinstance(event, ApprovalAsked):
            await self._approval_asked(event)
        elif isinstance(event, ApprovalSettled):
            self._approvals.discard(event.request_id)
            if event.by == "timeout":
                text = f"no answer to approval {event.request_id} within {self._settings.approval_timeout:.0f}s; denied"
                await self._emit(StatusEntry(state="approval_timeout", text=text))
        else:
            await self._process_exited(event)

    async def _turn_over(self, event: TurnEnded) -> None:
        """Tell the conversation that the turn is over, and why it failed, unless the rollout did.

        Codex 0.169 records a turn's end (and a failed turn's error) in the rollout, which egress
        writes; 0.47 records neither, and a dying process records nothing. A failed turn's error
        is written here if egress, once caught up, produced none during this turn. A turn's end is
        written here only for versions whose rollout does not record completed turns (0.47 records
        only ``turn_aborted``), again if egress produced none: where the rollout does record it,
        app-server's notification can come before the rollout line, so "egress has not written
        it yet" does not mean it will not.
        """
        if any(self._missing_from_rollout(event)):
            await self.drain_egress(ERROR_DRAIN)  # only when the rollout may still bring it
        error_missing, end_missing = self._missing_from_rollout(event)
        if error_missing:
            c = event.classified or classify(event.error or "")
            await self._error(c.code, c.message, c.hint)
        if end_missing:
            state = TURN_END_STATE_OF[event.status]
            await self._emit(StatusEntry(state=state, text=state.replace("_", " "), thread_id=self.state.thread_id,
                                         turn_id=event.turn_id))

    def _missing_from_rollout(self, event: TurnEnded) -> tuple[bool, bool]:
        """(the failed turn's error, the turn's end): which egress has not written during this turn.

        A turn's end counts as missing only for versions whose rollout does not record it.
        """
        egress = self._egress.egress
        failed = event.status == "failed" and bool(event.error)
        error_missing = failed and egress.errors_seen == self._errors_at_turn_start
        end_missing = (not self._svc.make_link.records_turn_end
                       and egress.turn_ends_seen == self._turn_ends_at_turn_start)
        return error_missing, end_missing

    async def _thread_ready(self, event: ThreadReady) -> None:
        changed = event.thread_id != self.state.thread_id
        if changed:
            if self.state.thread_id is not None:
                log.warning("conversation %r: Codex thread %s replaced by %s", self.conversation,
                            self.state.thread_id, event.thread_id)
            await self._egress.stop()
            self.state.thread_id = event.thread_id
            self.state.rollout_path = None
            self.state.egress_offset = 0
            self.state.user_messages = 0
        if event.rollout_path is not None:
            self.state.rollout_path = str(event.rollout_path)
        if changed or event.rollout_path is not None:
            await self._save_now()
        self._start_egress()

    async def _approval_asked(self, event: ApprovalAsked) -> None:
        policy = self._settings.approval_policy
        if policy == "ask":
            self._approvals.add(event.request_id)
            text = event.action
        else:
            text = f"{event.action} (answered by approval_policy = {policy!r}; nothing to do)"
        await self._emit(ApprovalRequestEntry(request_id=event.request_id, action=event.action,
                                              call_id=event.call_id, text=text))

    async def _process_exited(self, event: ProcessExited) -> None:
        link = self._link
        self._link = None
        self._generation += 1
        self._approvals.clear()
        if link is not None:
            await link.close()
            self._svc.processes.forget(self.conversation)
        self._svc.slots.release(self.conversation)
        self._idle_since = None
        if self._unconfirmed is not None:
            await self._confirm_unconfirmed()
        was_turn = self._turn_active
        self._turn_finished()
        if event.expected or self._stopping:
            return
        self._failures += 1
        delay = min(self._settings.restart_backoff * 2 ** (self._failures - 1), MAX_BACKOFF)
        where = " during a turn" if was_turn else ""
        if event.classified is not None:
            code, message = event.classified.code, event.classified.message
        elif event.returncode is not None and event.returncode < 0:
            # Killed by a signal: whatever it last wrote on stderr is not the reason.
            code = ErrorCode.PROCESS_EXITED
            message = f"Codex was killed{where} by signal {-event.returncode}"
        else:
            c = classify(event.detail or "the Codex process ended", event.returncode)
            code = c.code if c.code is not ErrorCode.UNKNOWN else ErrorCode.PROCESS_EXITED
            message = f"Codex exited{where} (exit {event.returncode}): {c.message}"
        await self._error(code, shorten(message),
                          "The session will be resumed in a moment; send the thought again if its reply is "
                          "missing. Run `coven-codex validate` if this repeats.")
        log.warning("conversation %r: Codex exited (%s); resuming in %.1fs", self.conversation,
                    event.returncode, delay)
        self._restart_at = time.monotonic() + delay
        self._restart_wanted = True

    def _set_turn_active(self) -> None:
        self._turn_active = True
        self._no_turn.clear()

    def _turn_finished(self) -> None:
        self._steer_refused = False
        self._no_turn.set()
        self._turn_active = False
        self._interrupt_sent_at = None

    # -- timers ------------------------------------------------------------------------------------
    async def _check_timers(self) -> None:
        """Turn and stream-idle timeouts, approval timeouts and policy are the driver's; these are ours."""
        now = time.monotonic()
        if (self._interrupt_sent_at is not None and self._link is not None
                and now >= self._interrupt_sent_at + STOP_GRACE_FACTOR * self._settings.kill_grace):
            log.warning("conversation %r: the turn did not stop after interrupt; ending Codex", self.conversation)
            await self._end_link(reason="turn did not stop")
        await self._check_idle(now)

    async def _check_idle(self, now: float) -> None:
        if (self._idle_since is not None and self._link is not None and not self.busy
                and now >= self._idle_since + self._settings.idle_reap):
            log.info("conversation %r: idle for %.0fs; ending its Codex process", self.conversation,
                     self._settings.idle_reap)
            await self._end_link(reason="idle")
            await self._emit(StatusEntry(state="session_ended", thread_id=self.state.thread_id,
                                         text="idle: Codex was stopped; the next thought resumes the session"))

    # -- progress ----------------------------------------------------------------------------------
    async def _advance(self) -> None:
        if self._restart_at is not None:
            if time.monotonic() < self._restart_at:
                return
            self._restart_at = None
        if self._turn_active:
            waiting = [t for t in self._queue if t is not self._unconfirmed]
            if waiting and self._can_steer():
                await self._deliver(waiting[0], steer=True)
            return
        if self._queue:
            self._mark_busy()
            if self._unconfirmed is not None:
                return  # the driver is starting it as its next turn
            if self._link is None and not await self._open_link():
                return
            await self._deliver(self._queue[0])
            return
        if self._restart_wanted and self._link is None:
            self._restart_wanted = False
            await self._open_link()
        if self._link is not None and self._link.persistent and self._idle_since is None:
            self._idle_since = time.monotonic()
            self._svc.slots.mark_idle(self.conversation, self._request_evict)
        elif self._link is not None and not self._link.persistent:
            await self._end_link(reason="turn over")

    def _can_steer(self) -> bool:
        # One thought in flight at a time: steer only once the running turn's thought is recorded.
        return (self._settings.mid_turn == "steer" and self._link is not None and self._link.supports_steer
                and self._interrupt_sent_at is None and not self._steer_refused and self._unconfirmed is None)

    def _waiting_in_driver(self, thought: PendingThought) -> bool:
        """The driver still has ``thought``: queued as its next turn, or already running it."""
        link = self._link
        return link is not None and (thought.entry_id in link.queued_ids or link.busy)

    def _mark_busy(self) -> None:
        self._idle_since = None
        self._svc.slots.mark_busy(self.conversation)

    def _request_evict(self) -> None:
        self._inbox.put_nowait(_Evict())

    async def _open_link(self) -> bool:
        slots = self._svc.slots
        if not slots.try_acquire(self.conversation):
            if not self._told_waiting:
                self._told_waiting = True
                await self._emit(StatusEntry(
                    state="session_waiting",
                    text=f"waiting for a free Codex process slot ({slots.size} in use); your thought is "
                         "queued and will be delivered in order",
                ))
            await slots.acquire(self.conversation)
        self._told_waiting = False
        link = self._svc.make_link(self.conversation)
        resume = self.state.thread_id
        try:
            await link.open(resume)
        except asyncio.CancelledError:
            await link.close()  # shutdown while Codex was starting: do not leave it running
            slots.release(self.conversation)
            raise
        except LinkError as exc:
            await link.close()
            slots.release(self.conversation)
            self._failures += 1
            delay = min(self._settings.restart_backoff * 2 ** (self._failures - 1), MAX_BACKOFF)
            self._restart_at = time.monotonic() + delay
            c = classify(str(exc))
            if str(exc) != self._last_open_error:
                # Retries that fail the same way are logged, not written to the chat each time.
                self._last_open_error = str(exc)
                await self._error(c.code, f"could not start Codex: {c.message}", c.hint)
            else:
                log.warning("conversation %r: Codex still fails to start (%s); next try in %.1fs",
                            self.conversation, exc, delay)
            return False
        self._last_open_error = None
        self._link = link
        self._generation += 1
        self._svc.processes.record(self.conversation, link.pids)
        generation = self._generation
        assert self._group is not None
        self._pump_task = self._group.create_task(self._pump(link, generation),
                                                  name=f"link-events:{self.conversation}")
        if link.persistent:
            state = "session_resumed" if resume is not None and link.thread_id == resume else "session_started"
            await self._emit(StatusEntry(state=state, thread_id=link.thread_id or resume))
        if link.thread_id is not None and link.thread_id != self.state.thread_id:
            await self._thread_ready(ThreadReady(link.thread_id, None))
        return True

    async def _pump(self, link: CodexLink, generation: int) -> None:
        async for event in link.events():
            self._inbox.put_nowait(_LinkMessage(generation, event))
            if link.persistent and isinstance(event, ThreadReady | TurnStarted):
                self._svc.processes.record(self.conversation, link.pids)

    async def _deliver(self, thought: PendingThought, *, steer: bool = False) -> None:
        link = self._link
        assert link is not None
        self.state.in_flight = InFlight(thought_id=thought.entry_id, position=thought.position, text=thought.text,
                                        thread_id=self.state.thread_id,
                                        user_messages_before=self.state.user_messages)
        await self._save_now()
        # Set before sending: egress may see the thought recorded before the call returns.
        self._unconfirmed = thought
        try:
            if steer:
                how = await link.steer(thought.entry_id, thought.text)
            else:
                await link.send(thought.entry_id, thought.text)
        except LinkError as exc:
            self._unconfirmed = None
            await self._delivery_failed(thought, exc)
            return
        if steer:
            # Accepted into the turn ("steered"), or the turn had just ended and the driver started
            # it as a new turn or queued it as the next one. Either way it stays in flight until
            # Codex records it (the UserMessage line with its client id): accepted pending input
            # can still be dropped when the turn is cut short.
            if how == "queued":
                self._steer_refused = True
            return
        # Codex has the bytes, but only its rollout proves it recorded them (a process may die
        # first). The thought stays in flight until egress sees it recorded (app-server: the
        # UserMessage with client_id = thought id) or, when the turn is over, the rollout says so.
        if not link.persistent:
            self._svc.processes.record(self.conversation, link.pids)
        self._start_turn()

    def _start_turn(self) -> None:
        self._errors_at_turn_start = self._egress.egress.errors_seen
        self._turn_ends_at_turn_start = self._egress.egress.turn_ends_seen
        self._set_turn_active()

    async def _confirm_unconfirmed(self) -> None:
        """The turn is over (or its process gone) and egress did not see the thought recorded: ask the rollout."""
        thought, self._unconfirmed = self._unconfirmed, None
        in_flight = self.state.in_flight
        if thought is None or in_flight is None:
            return
        by_client_id = self._svc.make_link.records_client_id
        rollout: Path | None = Path(self.state.rollout_path) if self.state.rollout_path else None
        if rollout is None and self.state.thread_id is not None:
            with contextlib.suppress(LookupError, OSError, TimeoutError):
                rollout = await asyncio.wait_for(self._svc.locate_rollout(self.state.thread_id), CONFIRM_LOCATE)
        received = rollout is not None and await asyncio.to_thread(
            codex_received, rollout, in_flight, by_client_id=by_client_id)
        if received:
            await self._delivered(thought, steer=False, start_turn=False)
            return
        log.warning("conversation %r: Codex ended before recording thought %s; it will be sent again",
                    self.conversation, thought.entry_id)
        self.state.in_flight = None
        await self._save_now()
        await self._count_failure(thought, "Codex ended before it took the thought")

    async def _count_failure(self, thought: PendingThought, reason: str) -> None:
        """One more failed hand-over of ``thought``: back off, and give up after a few."""
        self._failures += 1
        if self._failures >= DELIVERY_ATTEMPTS:
            self._queue.remove(thought)
            self._queued_ids.discard(thought.entry_id)
            self._failures = 0
            c = classify(reason)
            await self._error(c.code, f"the thought could not be handed to Codex: {c.message}",
                              "Send it again once `coven-codex validate` passes.")
            self._svc.finish_thought(thought.position)
            return
        delay = min(self._settings.restart_backoff * 2 ** (self._failures - 1), MAX_BACKOFF)
        self._restart_at = time.monotonic() + delay

    async def _delivered(self, thought: PendingThought, *, steer: bool, start_turn: bool = True) -> None:
        self._queue.remove(thought)
        self._queued_ids.discard(thought.entry_id)
        self.state.in_flight = None
        self.state.delivered[thought.entry_id] = thought.position
        if len(self.state.delivered) > PRUNE_DELIVERED_AT:
            # Thoughts before the saved ingress cursor are never read again: forget their ids.
            self.state.forget_delivered_before(self._svc.saved_cursor())
        self.state.user_messages += 1
        self._failures = 0
        if start_turn and not steer:
            self._start_turn()
        await self._save_now()
        self._svc.finish_thought(thought.position)

    async def _delivery_failed(self, thought: PendingThought, exc: LinkError) -> None:
        log.warning("conversation %r: handing thought %s to Codex failed: %s", self.conversation,
                    thought.entry_id, exc)
        link = self._link
        by_client_id = link.records_client_id if link is not None else False
        await self._end_link(reason="delivery failed", expected=False)
        in_flight = self.state.in_flight
        if exc.delivered and in_flight is not None and self.state.rollout_path:
            # The process died after the bytes left: its rollout (final now) says whether it had them.
            rollout = Path(self.state.rollout_path)
            if await asyncio.to_thread(codex_received, rollout, in_flight, by_client_id=by_client_id):
                await self._delivered(thought, steer=False, start_turn=False)
                return
        self.state.in_flight = None
        await self._save_now()
        await self._count_failure(thought, str(exc))

    async def _end_link(self, *, reason: str, expected: bool = True) -> None:
        link = self._link
        if link is None:
            return
        self._link = None
        self._generation += 1
        self._approvals.clear()
        self._idle_since = None
        log.debug("conversation %r: closing Codex link (%s)", self.conversation, reason)
        await link.close()
        self._svc.processes.forget(self.conversation)
        self._svc.slots.release(self.conversation)
        if self._unconfirmed is not None:
            await self._confirm_unconfirmed()
        if self._turn_active:
            self._turn_finished()
        if not expected:
            delay = min(self._settings.restart_backoff * 2 ** max(self._failures - 1, 0), MAX_BACKOFF)
            self._restart_at = time.monotonic() + delay

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
    async def _emit(self, entry: BaseEntry) -> None:
        entry.conversation = self.conversation
        await self._svc.journal.append(entry)

    async def _error(self, code: str, message: str, hint: str) -> None:
        log.warning("conversation %r: %s: %s", self.conversation, code, message)
        await self._emit(ErrorEntry(code=str(code), text=shorten(message), hint=hint))

    async def report_crash(self, exc: BaseException) -> None:
        """After :meth:`run` failed with a bug: end the process, reset, tell the conversation."""
        self._egress.forget()
        self._pump_task = None
        self._group = None
        with contextlib.suppress(Exception):
            await self._end_link(reason="session failed", expected=False)
        self._turn_finished()
        with contextlib.suppress(Exception):
            await self._error(ErrorCode.UNKNOWN, f"internal error in the session: {exc!r}",
                              "The session restarts by itself; please report this with the daemon log.")

    # -- shutdown ----------------------------------------------------------------------------------
    async def stop_turn(self) -> None:
        """Shutdown step 1: no new turns; interrupt a running one."""
        self._stopping = True
        if self._link is not None and self._turn_active:
            with contextlib.suppress(LinkError):
                await self._link.interrupt()

    async def wait_turn_over(self, limit: float) -> None:
        if self._link is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._no_turn.wait(), limit)

    async def close(self) -> None:
        """Shutdown step 2: end the Codex process tree."""
        self._stopping = True
        await self._end_link(reason="shutdown")

    async def final_save(self) -> None:
        """Shutdown step 4 (after the tasks are cancelled): save the state one last time."""
        self._saver.save_blocking()
