"""Ending a conversation's turn, and its Codex: closed on purpose (idle, eviction, reset, shutdown) or died.

When the driver reports a turn's end, a thought handed over and not held by the driver any more is
settled, and the ledger writes the end unless the rollout does.

Either way the driver is closed and its slot given back, a thought handed over and not yet
confirmed is settled by the hand-over (:mod:`coven_codex.conversation.handover`), and the turn
that ran is cut short with one end by the turn ledger (:mod:`coven_codex.conversation.ledger`).
An unexpected end counts against the restart backoff: the conversation is ``BACKING_OFF``.
"""

from __future__ import annotations

import contextlib
import logging

from coven_codex.agent.services import SessionServices
from coven_codex.codex.drivers import DriverFailed, TurnFinished, killed_from_outside
from coven_codex.conversation.handover import HandOver, HandOverResult, Outcome
from coven_codex.conversation.ledger import Turn, TurnLedger
from coven_codex.conversation.link import CodexLink, OpenCodex
from coven_codex.conversation.phases import Phase, PhaseMachine
from coven_codex.rollout import TURN_ABORTED, TURN_FAILED

log = logging.getLogger(__name__)


class Closing:
    """Ends the conversation's turn or its Codex, and settles what they leave behind (module docstring)."""

    def __init__(
        self,
        services: SessionServices,
        link: CodexLink,
        *,
        handover: HandOver,
        ledger: TurnLedger,
        phases: PhaseMachine,
        name: str,
    ) -> None:
        self._svc = services
        self._link = link
        self._handover = handover
        self._ledger = ledger
        self._phases = phases
        self._name = name

    def after(self, result: HandOverResult | None) -> None:
        """What a hand-over's outcome means for the link: a delivery clears Codex's failures; a retry waits."""
        if result is None:
            return
        if result.outcome is Outcome.DELIVERED:
            self._link.retries.codex_failures = 0
        elif result.outcome is Outcome.RETRY_AFTER:
            self._link.retry_at(result.retry_in)

    def turn_finished(self) -> Turn | None:
        """No turn runs any more; returns the one that ran, if any."""
        return self._ledger.finished(codex_open=self._link.codex is not None)

    async def turn_over(self, codex: OpenCodex, event: TurnFinished) -> None:
        """The driver says the turn ended (``READY`` again): settle the thought handed over, write the end."""
        turn = self.turn_finished()
        codex.approvals.clear()  # (the driver drops a turn's unanswered requests with it)
        thought = self._handover.unconfirmed
        if thought is not None and not self._link.holds(thought.id):
            self.after(await self._handover.confirm())
        await self._ledger.over(event, turn)

    async def end(self, *, reason: str, expected: bool = True) -> None:
        """Close the open driver, if any, and end its turn (``expected=False``: a failure; resumed after a backoff)."""
        if self._link.codex is None:
            return
        log.debug("conversation %r: closing its Codex driver (%s)", self._name, reason)
        await self._link.close()
        if self._handover.unconfirmed is not None:
            self.after(await self._handover.confirm())
        if not expected:
            self._link.restart_later()
        if self._phases.is_in(Phase.READY, Phase.IN_TURN, Phase.INTERRUPTING):  # (stopping, resetting: theirs)
            self._phases.move(Phase.IDLE if expected else Phase.BACKING_OFF)
        turn = self.turn_finished()
        await self._ledger.cut_short(turn, TURN_ABORTED if expected else TURN_FAILED, reason)

    async def died(self, event: DriverFailed) -> bool:
        """The driver died (its Codex process ended or stopped answering): close it, end the turn, resume
        later. ``True`` if the conversation was stopping (the caller finishes the stop)."""
        codex = await self._link.close()
        if self._handover.unconfirmed is not None:
            self.after(await self._handover.confirm(counts=not killed_from_outside(event.returncode)))
        if self._phases.is_in(Phase.STOPPING):
            await self._ledger.cut_short(self.turn_finished(), TURN_ABORTED, "Codex stopped")
            return True
        if self._ledger.turn is None and codex is not None and codex.driver.persistent:
            # The shared app-server died while no turn of ours ran on it: nothing was lost, and
            # nothing is said in the chat; the thread is resumed on the next thought.
            log.info("conversation %r: Codex exited while idle; its thread resumes on the next thought", self._name)
            self._phases.move(Phase.IDLE)
            return False
        if self._svc.instruments is not None:
            self._svc.instruments.codex_failed()
        delay = self._link.restart_later()
        self._phases.move(Phase.BACKING_OFF)
        turn = self.turn_finished()
        await self._ledger.codex_exited(event, turn)
        await self._ledger.cut_short(turn, TURN_FAILED, "Codex ended")
        log.warning("conversation %r: Codex exited (%s); resuming in %.1fs", self._name, event.returncode, delay)
        self._link.retries.resume = True
        return False

    async def crashed(self) -> bool:
        """The conversation's task failed with a bug: close Codex, fail the running turn, start over in
        ``IDLE`` (or stay stopped: ``True``). Nothing here may fail the crash's report."""
        self._link.slot_wait = None  # (cancelled with the task group; a waiter's slot is passed on)
        self._link.starting = None  # (its task cancelled with the group closed its driver)
        with contextlib.suppress(Exception):
            await self.end(reason="session failed", expected=False)
        turn = self.turn_finished()
        stopping = self._phases.is_in(Phase.STOPPING, Phase.STOPPED)
        self._phases.start_over(stopped=stopping)
        with contextlib.suppress(Exception):
            await self._ledger.cut_short(turn, TURN_FAILED, "the session failed")
        return stopping
