"""A conversation's turn ledger: the turn running in Codex and the one end status each turn gets.

Every turn that started ends with exactly one turn-end ``status`` (and a failed one with one
``error``): written by egress from the rollout, or here when the driver reports the end and the
rollout holds none, when the turn is cut short (Codex died, the driver or the session was
closed), or after a restart that found the turn still recorded as running (``open_turn``). Both
writers use the turn's deterministic id (:func:`~coven_codex.rollout.turn_entry_id`) through
the daemon's one writer, so whichever comes first is the one written.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from coven_codex.agent.egress import Egress
from coven_codex.agent.egress_runner import EgressRunner
from coven_codex.agent.recovery import last_turn
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.state import OpenTurn, SessionState
from coven_codex.codex.drivers import (
    CodexDriver,
    DriverError,
    DriverFailed,
    Submission,
    TurnExpired,
    TurnFinished,
)
from coven_codex.codex.errors import ErrorCode, shorten
from coven_codex.conversation.outbox import Outbox
from coven_codex.conversation.phases import Phase, PhaseMachine
from coven_codex.entries import StatusEntry, TokenUsage
from coven_codex.rollout import TURN_ABORTED, TURN_COMPLETED, TURN_FAILED, turn_entry_id
from coven_codex.support.limits import cut

log = logging.getLogger(__name__)

ERROR_DRAIN = 1.0
"""How long the ledger waits for egress to bring a turn's end or error before writing it itself."""
TURN_END_STATE_OF = {"completed": TURN_COMPLETED, "failed": TURN_FAILED, "interrupted": TURN_ABORTED}
"""The status a driver's turn outcome becomes when the rollout does not record the turn's end."""
INTERRUPTED_BY_A_RESTART = "turn aborted: interrupted by a restart"
"""The text of the end a restart writes for a turn the previous run left running."""


@dataclass(slots=True)
class Turn:
    """The turn running in Codex, as far as the conversation knows."""

    key: str
    """Names the turn in its entry ids: the driver's turn id, else the thought that started it."""
    keyed_by_turn_id: bool
    egress: Egress
    """The egress that was running when the turn started, and what it had produced by then."""
    errors_before: int
    ends_before: int
    starts_before: int
    interrupt_sent_at: float | None = None
    """When the conversation asked the driver to interrupt the turn."""
    steer_refused: bool = False
    """A thought meant to join the turn came too late: the driver holds it as its next turn."""


class TurnLedger:
    """The running turn, its name in entry ids, and the end (and error) the conversation writes for it."""

    def __init__(
        self,
        state: SessionState,
        egress: EgressRunner,
        outbox: Outbox,
        saver: StateSaver,
        *,
        phases: PhaseMachine,
        records_turn_end: bool,
        name: str,
    ) -> None:
        self._state = state
        self._egress = egress
        self._outbox = outbox
        self._saver = saver
        self._phases = phases
        self._records_turn_end = records_turn_end
        self._name = name
        self.turn: Turn | None = None
        """The turn running in Codex, if any."""

    def started(self, turn_id: str | None, thought_id: str | None) -> None:
        """The driver says a turn started (ours, handing over ``thought_id``, or one it started from its own queue)."""
        if self.turn is not None:
            if turn_id is not None:
                self.named(turn_id)
            return
        key = turn_id or thought_id
        if key is not None:
            self.begin(key, keyed_by_turn_id=turn_id is not None)

    def begin(self, key: str, *, keyed_by_turn_id: bool) -> None:
        """A turn started (recorded as ``open_turn`` with the next save): ``READY`` becomes ``IN_TURN``."""
        egress = self._egress.egress
        self.turn = Turn(
            key, keyed_by_turn_id, egress, egress.errors_seen, egress.turn_ends_seen, egress.turn_starts_seen
        )
        self._state.open_turn = OpenTurn(key=key, turn_id=key if keyed_by_turn_id else None)
        self._saver.request()
        if self._phases.is_in(Phase.READY):
            self._phases.move(Phase.IN_TURN)

    def can_steer(self, driver: CodexDriver | None, *, mid_turn: str, thought_in_flight: bool) -> bool:
        """A thought may join the running turn: ``mid_turn = "steer"``, the driver can, the turn is not
        being interrupted nor refused a steer, and (one thought in flight at a time) the turn's own
        thought is recorded (not ``thought_in_flight``)."""
        turn = self.turn
        return (
            mid_turn == "steer"
            and driver is not None
            and driver.supports_steer
            and turn is not None
            and turn.interrupt_sent_at is None
            and not turn.steer_refused
            and not thought_in_flight
        )

    def handed_over(self, thought_id: str, how: Submission | None, *, steer: bool) -> None:
        """The driver took ``thought_id`` (``how``): a new turn (unless the driver said so already), or with
        ``steer`` into the running one.

        Accepted into the turn ("steered"), or the turn had just ended and the driver started it as
        a new turn or queued it as the next one. Either way it stays in flight until Codex records it
        (the UserMessage line with its client id): accepted pending input can still be dropped when
        the turn is cut short."""
        if not steer:
            if self.turn is None:  # (the driver may have said so already)
                self.begin(thought_id, keyed_by_turn_id=False)
            return
        if how != "steered":
            log.info("conversation %r: thought %s did not join a running turn: %s", self._name, cut(thought_id), how)
        if how == "queued" and self.turn is not None:
            self.turn.steer_refused = True

    async def interrupt(self, driver: CodexDriver | None) -> None:
        """A ``cancel`` (or a reset): ask ``driver`` to interrupt the running turn (``INTERRUPTING``);
        with none running, the chat is told nothing was."""
        turn = self.turn
        if driver is None or turn is None:
            await self._outbox.emit(StatusEntry(state="cancel_ignored", text="nothing is running to cancel"))
            return
        log.info("conversation %r: interrupting the running turn", self._name)
        try:
            await driver.cancel()
        except DriverError as exc:
            log.warning("conversation %r: interrupt failed: %s", self._name, exc)
            return
        turn.interrupt_sent_at = time.monotonic()
        if self._phases.is_in(Phase.IN_TURN):
            self._phases.move(Phase.INTERRUPTING)

    def named(self, turn_id: str) -> None:
        """The driver told the running turn's id: it names the turn from now on."""
        turn = self.turn
        if turn is None or turn.keyed_by_turn_id:
            return
        turn.key, turn.keyed_by_turn_id = turn_id, True
        if self._state.open_turn is not None:
            self._state.open_turn.turn_id = turn_id
            self._saver.request()

    def finished(self, *, codex_open: bool) -> Turn | None:
        """No turn runs any more; returns the one that ran, if any. With Codex still open (``codex_open``)
        the conversation is ``READY`` again (whoever closes Codex moves the phase itself)."""
        if codex_open and self._phases.is_in(Phase.IN_TURN, Phase.INTERRUPTING):
            self._phases.move(Phase.READY)
        turn, self.turn = self.turn, None
        if self._state.open_turn is not None:
            self._state.open_turn = None
            self._saver.request()
        return turn

    def key(self, turn: Turn | None) -> str | None:
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

    def seen_since(self, turn: Turn | None) -> tuple[int, int]:
        """(errors, turn ends) egress produced from the rollout since ``turn`` started."""
        egress = self._egress.egress
        if turn is None:
            return 0, 0
        if turn.egress is not egress:  # egress was replaced: everything it produced is since then
            return egress.errors_seen, egress.turn_ends_seen
        return egress.errors_seen - turn.errors_before, egress.turn_ends_seen - turn.ends_before

    def entry_id(self, key: str | None, what: str) -> str | None:
        """The deterministic id of this conversation's turn ``key``'s error or end (``None``: unknown turn)."""
        if key is None:
            return None
        scope = self._state.thread_id
        if scope is None:
            scope = "conversation-" + hashlib.sha256(self._state.conversation.encode()).hexdigest()[:16]
        return turn_entry_id(scope, key, what)

    async def turn_error(self, turn: Turn | None, code: str, message: str, hint: str) -> None:
        """``turn``'s one ``error`` (with its deterministic id; a plain one when no turn ran)."""
        await self._outbox.error(
            code,
            message,
            hint,
            entry_id=self.entry_id(self.key(turn), "error"),
            in_reply_to=self._state.reply_to if turn is not None else None,
        )

    async def write_end(
        self, state: str, key: str | None, turn_id: str | None, text: str | None = None, usage: TokenUsage | None = None
    ) -> None:
        """The turn's end ``status`` (once: its id is the turn's)."""
        await self._outbox.emit(
            StatusEntry(
                id=self.entry_id(key, "end"),
                state=state,
                text=text or state.replace("_", " "),
                thread_id=self._state.thread_id,
                turn_id=turn_id,
                usage=usage,
                in_reply_to=self._state.reply_to,
            )
        )

    async def expired(self, event: TurnExpired) -> None:
        """Written now, before the turn's end (which the rollout may bring first): a reader stopping
        at the end knows why. :meth:`over` writes it with the same id: once."""
        turn = self.turn
        if turn is not None:  # (else the turn's end writes it, once)
            c = event.error
            await self._outbox.error(
                c.code, c.message, c.hint, entry_id=self.entry_id(turn.key, "error"), in_reply_to=self._state.reply_to
            )

    async def over(self, event: TurnFinished, turn: Turn | None) -> None:
        """Tell the conversation that the turn is over, and why it failed, unless the rollout did.

        Codex 0.169 records a turn's end (and a failed turn's error) in the rollout, which egress
        writes; 0.47 records neither, and a dying process records nothing. A failed turn's error
        is written here if egress, once caught up, produced none during this turn. A turn's end is
        written here unless the driver's plan says the rollout records every turn's end with the
        driver's turn id (the app-server plan), again if egress produced none. Either entry
        carries the turn's deterministic id (:meth:`key`: for exec on 0.104 and later, the id the
        rollout gave the turn), so if egress writes it too (its rollout line came after the
        drain), the journal gets it once.
        """
        failed = event.status == "failed" and event.error is not None and bool(event.error.message)
        wants_end = not self._records_turn_end

        def missing() -> tuple[bool, bool]:
            errors, ends = self.seen_since(turn)
            return failed and errors == 0, wants_end and ends == 0

        if any(missing()):
            await self._egress.drain(ERROR_DRAIN)  # only when the rollout may still bring it
        error_missing, end_missing = missing()
        key = event.turn_id or self.key(turn)
        if error_missing:
            c = event.error
            assert c is not None  # (failed says so)
            await self._outbox.error(
                c.code, c.message, c.hint, entry_id=self.entry_id(key, "error"), in_reply_to=self._state.reply_to
            )
        if end_missing:
            turn_id = event.turn_id or (key if turn is not None and key != turn.key else None)
            await self.write_end(TURN_END_STATE_OF[event.status], key, turn_id, usage=event.usage)

    async def cut_short(self, turn: Turn | None, state: str, why: str) -> None:
        """The turn ended without the driver reporting it (Codex died, the driver or the session was closed):
        write its end unless egress, once caught up, brought one."""
        if turn is None:
            return
        if self.seen_since(turn)[1] == 0:
            await self._egress.drain(ERROR_DRAIN)
        if self.seen_since(turn)[1] == 0:
            key = self.key(turn)
            turn_id = key if turn.keyed_by_turn_id or key != turn.key else None
            await self.write_end(state, key, turn_id, f"{state.replace('_', ' ')}: {why}")

    async def codex_exited(self, event: DriverFailed, turn: Turn | None) -> None:
        """One ``error`` saying how Codex ended (for ``turn``, the one it cut short, with its deterministic id)."""
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
        if turn is not None and self.seen_since(turn)[1] == 0:
            await self._egress.drain(ERROR_DRAIN)  # the rollout's name for the turn, for the ids
        await self.turn_error(
            turn,
            code,
            shorten(message),
            "The session will be resumed in a moment; send the thought again if its reply is "
            "missing. Run `coven-codex validate` if this repeats.",
        )

    async def end_cut_by_restart(self) -> bool:
        """A turn the previous run left running (the daemon was killed) ends now, ``turn_aborted``
        "interrupted by a restart", with its deterministic id, unless the rollout (final: no Codex
        of that run is alive) records its end. A turn named by a thought that goes to Codex again
        is not ended: the thought's new turn has that name. ``True`` if the state changed (to save)."""
        state = self._state
        cut_off = state.open_turn
        if cut_off is None or self.turn is not None:
            return False
        state.open_turn = None
        key, turn_id = cut_off.key, cut_off.turn_id
        last = None
        if state.thread_id is not None and state.rollout_path is not None:
            last = await asyncio.to_thread(last_turn, Path(state.rollout_path), state.conversation, state.thread_id)
        if last is not None and last.turn_id is not None:
            if last.ended:
                return True
            key = turn_id = last.turn_id
        elif turn_id is None and key not in state.delivered:
            return True
        log.info("conversation %r: its turn %s was cut short by a restart", self._name, cut(key))
        await self.write_end(TURN_ABORTED, key, turn_id, INTERRUPTED_BY_A_RESTART)
        return True
