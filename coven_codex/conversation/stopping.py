"""The stop sequence of a conversation: no new turns, the running one interrupted, then Codex closed.

``STOPPING`` lasts until the running turn ends or the stop's deadline passes (whichever comes
first), then Codex is closed and the conversation is ``STOPPED``. A conversation another daemon
took over (its lease lost) is abandoned instead: its Codex is let go and its pending journal
positions given back, nothing written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from coven_codex.codex.drivers import DriverError
from coven_codex.codex.thought import Thought
from coven_codex.conversation.admission import Admission
from coven_codex.conversation.closing import Closing
from coven_codex.conversation.ledger import TurnLedger
from coven_codex.conversation.link import CodexLink
from coven_codex.conversation.messages import ResetRequest
from coven_codex.conversation.phases import Phase, PhaseMachine


class Stopping:
    """The conversation's stop: its deadline, its end (module docstring)."""

    def __init__(
        self,
        link: CodexLink,
        ledger: TurnLedger,
        *,
        closing: Closing,
        phases: PhaseMachine,
        admission: Admission,
        queue: deque[Thought | ResetRequest],
    ) -> None:
        self._link = link
        self._ledger = ledger
        self._closing = closing
        self._phases = phases
        self._admission = admission
        self._queue = queue
        self._by: float | None = None
        """When stopping: when Codex is closed even if the turn has not ended."""
        self.stopped = asyncio.Event()
        """Set once the conversation is ``STOPPED``."""

    @property
    def stopping(self) -> bool:
        """The stop began and has not finished."""
        return self._phases.is_in(Phase.STOPPING)

    def deadline(self) -> float | None:
        """While stopping: when Codex is closed even if the turn has not ended."""
        return self._by if self._phases.is_in(Phase.STOPPING) else None

    async def begin(self, by: float) -> None:
        """No new turns; a start under way is cancelled; the running turn is interrupted (its end, or
        ``by``, finishes the stop); with none running, the stop finishes now."""
        if self._phases.is_in(Phase.STOPPING, Phase.STOPPED):
            return
        self._phases.move(Phase.STOPPING)
        self._by = by
        self._link.stop_waiting()
        await self._link.abort_start(by)
        if self._link.codex is not None and self._ledger.turn is not None:
            with contextlib.suppress(DriverError):
                await self._link.codex.driver.cancel()
            return  # the turn's end (or the deadline) finishes the stop
        await self.finish()

    async def finish(self) -> None:
        """The turn is over, or the stop's deadline passed: close Codex; stopped."""
        await self._closing.end(reason="shutdown")
        self._phases.move(Phase.STOPPED)
        self.stopped.set()

    async def abandon(self) -> None:
        """Another daemon serves the conversation now: let its Codex thread go and give back its pending
        journal positions, writing nothing (its writes would be refused)."""
        if not self._phases.is_in(Phase.STOPPING, Phase.STOPPED):
            self._phases.move(Phase.STOPPING)
        with contextlib.suppress(Exception):
            await self._link.close()
        self._ledger.finished(codex_open=False)
        self._phases.move(Phase.STOPPED)
        self.stopped.set()
        self._admission.give_back()
        self._queue.clear()
