"""One conversation's replay window: where a restart must look for entries it may write again.

After a crash, egress re-reads a rollout from its saved ``egress_offset`` and produces again
the entries of every line after it; the ones already in the journal must be recognised by
their deterministic ids (:mod:`coven_codex.agent.writer`). Instead of reading the journal from
the oldest position any conversation ever saved, each conversation keeps, in its saved state:

- ``replay_from``: a journal position at or before every entry of this conversation that a
  restart may produce again, or ``None`` when there is none (the window is *closed*);
- ``own_ids``: the ids of the newest entries the session wrote itself (a turn's end or error
  written from the driver's report), which egress may later produce from the rollout.

The rules that keep that true, even across ``kill -9``:

1. *open before writing*: before the first id-bearing entry of a closed window is appended,
   ``replay_from`` is set to the journal's end and that state saved durably (one save per
   burst of writing, not per entry);
2. *close only between lines*: the window is closed (``replay_from = None``, saved with the
   session's next save) only while nothing is being written: every entry egress wrote is then
   of a line before ``egress_offset`` (never produced again) and every entry the session wrote
   is in ``own_ids``. While the session is idle it is closed whenever that holds: at once, or
   after the write in progress, and again after every write egress still makes;
3. a write cut short (cancelled, failed) leaves the window open for the rest of the run: an
   entry may be in the journal whose line egress has not passed;
4. a window a previous run left open (it was killed while writing) closes only once egress has
   passed every line the rollout held when egress started (the previous run's Codex is gone by
   then, so those are all the lines whose entries that run may have written), or the thread ended.

At start-up the daemon reads the journal only from the oldest open window (and the ingress
cursor), so a conversation idle for months costs nothing, and memory is bounded by the open
windows, not by the journal's length.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from coven_codex.agent.saver import StateSaver
from coven_codex.agent.state import SessionState
from coven_codex.journal import Journal


class ReplayWindow:
    """Keeps ``state.replay_from`` true for one conversation (module docstring)."""

    def __init__(self, state: SessionState, saver: StateSaver, journal: Journal) -> None:
        self._state = state
        self._saver = saver
        self._journal = journal
        self._lock = asyncio.Lock()
        self._durable = state.replay_from is not None
        """The window is open in a saved state (a restored open window was saved by the previous run)."""
        self._writers = 0
        self._idle = False
        """The session asked for the window to close whenever it may (it is idle)."""
        self._stuck = False
        """A write was cut short: the window stays open until the daemon restarts (rule 3)."""
        self._restored = state.replay_from is not None and state.thread_id is not None
        """Left open by a previous run, with a rollout whose lines may have been written (rule 4)."""
        self._replayed_to: int | None = None
        """The rollout's length when egress started: a restored window closes once egress passed it."""

    @property
    def is_open(self) -> bool:
        """Whether the conversation has entries a restart may produce again."""
        return self._state.replay_from is not None

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Around appending entries (egress: one rollout line and its offset): the window is open
        and durable inside; while the session is idle it closes again at the end."""
        self._writers += 1
        try:
            await self._open()
            yield
        except BaseException:
            self._stuck = True
            raise
        finally:
            self._writers -= 1
        self.progress()

    def egress_started(self, length: int) -> None:
        """Egress starts on a rollout of ``length`` bytes (complete lines): a restored window may
        close once egress passed them."""
        if self._restored and self._replayed_to is None:
            self._replayed_to = length
            self.progress()

    def thread_ended(self) -> None:
        """The thread is over (reset, replaced): lines of its rollout are never produced again."""
        self._restored = False
        self.progress()

    def progress(self) -> None:
        """Egress moved on: while the session is idle, the window closes now if it may."""
        if self._idle:
            self._close()

    def idle(self) -> None:
        """The session has nothing running or waiting: close the window now, or as soon as it may,
        and again after each write while it stays idle (egress may still bring the turn's last lines)."""
        self._idle = True
        self._close()

    def busy(self) -> None:
        """The session has work again: the window stays open across its writes."""
        self._idle = False

    async def _open(self) -> None:
        if self._durable and self._state.replay_from is not None:
            return
        async with self._lock:
            if self._durable and self._state.replay_from is not None:
                return
            if self._state.replay_from is None:
                self._state.replay_from = await self._journal.end_position()
            await self._saver.save_now()
            self._durable = True

    def _close(self) -> None:
        """Close the window if nothing is being written (rule 2, 4); saved with the next save."""
        if self._state.replay_from is None or self._stuck or self._writers:
            return
        if self._restored and (self._replayed_to is None or self._state.egress_offset < self._replayed_to):
            return
        self._restored = False
        self._state.replay_from = None
        self._durable = False
        self._saver.request()
