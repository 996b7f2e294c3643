"""The hand-over of a thought to Codex, and its outcome: delivered, pending, retry after, gave up.

1. the thought is written ahead as ``in_flight`` into the conversation's state log;
2. it is handed to the driver (app-server ``turn/start`` with ``clientUserMessageId = thought
   id``, or the stdin of a ``codex exec`` process): now it is *pending*;
3. it is *delivered* (state saved again; only then is the ingress cursor told) once Codex has
   recorded it: egress sees the ``UserMessage`` line with its ``client_id`` (0.169), or, when the
   turn or the process ends first, the final rollout says so
   (:func:`~coven_codex.agent.recovery.codex_received`); otherwise it is sent again after a
   backoff (*retry after*), and after :data:`DELIVERY_ATTEMPTS` failed hand-overs it is dropped
   with an ``error`` entry (*gave up*).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coven_codex.agent.recovery import codex_received, recorded_client_id
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.services import SessionServices
from coven_codex.agent.state import SessionState, ThoughtRecord
from coven_codex.codex.drivers import CodexDriver, DriverError, Submission, killed_from_outside
from coven_codex.codex.errors import classify
from coven_codex.codex.thought import Thought
from coven_codex.conversation.admission import Admission
from coven_codex.conversation.messages import Queued
from coven_codex.conversation.outbox import Outbox
from coven_codex.entries import StatusEntry
from coven_codex.support.backoff import backoff
from coven_codex.support.limits import cut
from coven_codex.tailing import Line

log = logging.getLogger(__name__)

DELIVERY_ATTEMPTS = 3
"""Hand-overs of one thought before it is dropped with an ``error`` entry."""
THOUGHT_CANCELLED = "thought_cancelled"
"""The status a thought dropped by a ``cancel`` with ``queued`` is answered with (it never reached Codex)."""
PRUNE_DELIVERED_AT = 256
CONFIRM_LOCATE = 5.0


class Outcome(enum.Enum):
    """Where a hand-over left the thought."""

    DELIVERED = "delivered"
    """Codex recorded it: settled."""
    PENDING = "pending"
    """Codex has it; its rollout has not recorded it yet."""
    RETRY_AFTER = "retry_after"
    """Codex did not take it: it is sent again after :attr:`HandOverResult.retry_in` seconds."""
    GAVE_UP = "gave_up"
    """It failed :data:`DELIVERY_ATTEMPTS` hand-overs: dropped with one ``error`` entry."""


@dataclass(frozen=True, slots=True)
class HandOverResult:
    """The outcome of a hand-over (and, to retry, after how long)."""

    outcome: Outcome
    retry_in: float = 0.0
    how: Submission | None = None
    """Pending: how the driver took it (a new turn, steered into the running one, queued)."""


DELIVERED = HandOverResult(Outcome.DELIVERED)
GAVE_UP = HandOverResult(Outcome.GAVE_UP)


class HandOver:
    """Hands the conversation's thoughts to Codex one at a time and says what became of each."""

    def __init__(
        self,
        state: SessionState,
        services: SessionServices,
        saver: StateSaver,
        *,
        admission: Admission,
        outbox: Outbox,
        queue: deque[Queued],
    ) -> None:
        self._state = state
        self._svc = services
        self._saver = saver
        self._admission = admission
        self._outbox = outbox
        self._queue = queue
        self._name = cut(state.conversation)
        self.unconfirmed: Thought | None = None
        """The thought handed over and not yet recorded by Codex (one at a time)."""
        self._attempts: dict[str, int] = {}
        """Failed hand-overs per queued thought id."""

    async def submit(self, driver: CodexDriver, thought: Thought) -> HandOverResult | DriverError:
        """Write ``thought`` ahead as in flight, then hand it to ``driver``: pending (and how the driver
        took it), or the driver's error (the caller closes the driver, then asks :meth:`failed`)."""
        self._state.hand_over(thought)
        await self._saver.save_now()
        # Set before sending: egress may see the thought recorded before the call returns.
        self.unconfirmed = thought
        try:
            how = await driver.submit(thought)
        except DriverError as exc:
            self.unconfirmed = None
            return exc
        if self._svc.instruments is not None:
            self._svc.instruments.thought_handed_over()
        return HandOverResult(Outcome.PENDING, how=how)

    def recorded_in(self, line: Line) -> str | None:
        """The client id of the unconfirmed thought when rollout ``line`` records it (called by egress)."""
        thought = self.unconfirmed
        if thought is None or b'"client_id"' not in line.data or thought.id.encode() not in line.data:
            return None
        return recorded_client_id(line.data)

    async def recorded(self, client_id: str) -> HandOverResult | None:
        """Egress saw Codex record the user message ``client_id``: the pending thought is delivered."""
        thought = self.unconfirmed
        if thought is None or thought.id != client_id:
            return None
        self.unconfirmed = None
        return await self._delivered(thought)

    async def confirm(self, *, counts: bool = True) -> HandOverResult | None:
        """The turn is over (or its process gone) and egress did not see the pending thought recorded:
        ask the rollout. ``counts=False``: Codex was killed from outside, not the thought's fault."""
        thought, self.unconfirmed = self.unconfirmed, None
        in_flight = self._state.in_flight
        if thought is None or in_flight is None:
            return None
        rollout: Path | None = Path(self._state.rollout_path) if self._state.rollout_path else None
        if rollout is None and self._state.thread_id is not None:
            with contextlib.suppress(LookupError, OSError, TimeoutError):
                rollout = await asyncio.wait_for(self._svc.locate_rollout(self._state.thread_id), CONFIRM_LOCATE)
        if rollout is not None and await self._received(rollout, in_flight):
            return await self._delivered(thought)
        self._state.in_flight = None
        await self._saver.save_now()
        return await self._count_failure(thought, "Codex ended before it took the thought", counts=counts)

    async def failed(self, thought: Thought, exc: DriverError) -> HandOverResult:
        """The driver refused ``thought`` or died handing it over (and is closed now): count the failure
        unless the final rollout shows Codex had the thought after all."""
        in_flight, rollout = self._state.in_flight, self._state.rollout_path
        # The driver may have written the thought before it failed, and the process died after
        # the bytes left: its rollout (final now) says whether it had them.
        if in_flight is not None and rollout and await self._received(Path(rollout), in_flight):
            return await self._delivered(thought)
        self._state.in_flight = None
        await self._saver.save_now()
        # Codex killed from outside (the shared app-server lost to SIGKILL, ...): not the thought's fault.
        return await self._count_failure(thought, str(exc), counts=not killed_from_outside(exc.returncode))

    async def _received(self, rollout: Path, in_flight: ThoughtRecord) -> bool:
        by_client_id = self._svc.make_driver.plan.records_client_id
        return await asyncio.to_thread(codex_received, rollout, in_flight, by_client_id=by_client_id)

    async def _count_failure(self, thought: Thought, reason: str, *, counts: bool) -> HandOverResult:
        """One more failed hand-over of ``thought``: back off, and give up after :data:`DELIVERY_ATTEMPTS`.

        ``counts=False`` (Codex was killed from outside, e.g. ``kill -9`` of the shared app-server):
        the thought is sent again after the backoff without coming closer to being dropped.
        """
        attempts = self._attempts.get(thought.id, 0) + (1 if counts else 0)
        shown = cut(thought.id)
        if attempts >= DELIVERY_ATTEMPTS:
            log.warning(
                "conversation %r: thought %s failed %d hand-overs (%s); dropping it",
                self._name,
                shown,
                attempts,
                cut(reason),
            )
            self.forget(thought)
            c = classify(reason)
            await self._outbox.error(
                c.code,
                f"the thought could not be handed to Codex ({attempts} tries): {c.message}",
                "Send it again once `coven-codex validate` passes.",
            )
            self._svc.finish_thought(thought.position)
            return GAVE_UP
        self._attempts[thought.id] = attempts
        delay = backoff(self._svc.settings.restart_backoff, max(attempts, 1))
        log.warning(
            "conversation %r: hand-over %d of thought %s failed (%s); it will be sent again in %.1fs",
            self._name,
            attempts,
            shown,
            cut(reason),
            delay,
        )
        return HandOverResult(Outcome.RETRY_AFTER, delay)

    async def drop_queued(self, in_driver: Callable[[str], bool]) -> bool:
        """A ``cancel`` with ``queued``: the thoughts not yet handed to Codex (nor held by the driver,
        ``in_driver``) are dropped, each answered with a ``thought_cancelled`` status and recorded as
        settled (never sent after a restart). ``True`` if some were dropped and no thought is left queued."""
        dropped = [
            t for t in self._queue if isinstance(t, Thought) and t is not self.unconfirmed and not in_driver(t.id)
        ]
        if not dropped:
            return False
        for thought in dropped:
            self.forget(thought)
            self._state.delivered[thought.id] = thought.position
        await self._saver.save_now()
        for thought in dropped:
            log.info("conversation %r: queued thought %s cancelled", self._name, cut(thought.id))
            await self._outbox.emit(
                StatusEntry(
                    id=f"cancelled@{thought.position}",
                    state=THOUGHT_CANCELLED,
                    text="cancelled before it reached Codex",
                    in_reply_to=thought.id,
                )
            )
            self._svc.finish_thought(thought.position)
        return not any(isinstance(t, Thought) for t in self._queue)

    def forget(self, thought: Thought) -> None:
        """``thought`` leaves the queue (delivered, dropped, given up)."""
        self._queue.remove(thought)
        self._admission.forget(thought.id)
        self._attempts.pop(thought.id, None)

    async def _delivered(self, thought: Thought) -> HandOverResult:
        self.forget(thought)
        state = self._state
        state.in_flight = None
        state.delivered[thought.id] = thought.position
        if len(state.delivered) > PRUNE_DELIVERED_AT:
            # Thoughts before the saved ingress cursor are never read again: forget their ids.
            state.forget_delivered_before(self._svc.saved_cursor())
        state.user_messages += 1
        await self._saver.save_now()
        self._svc.finish_thought(thought.position)
        return DELIVERED
