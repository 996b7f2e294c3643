"""Start-up recovery, steps 3 and 4 of :mod:`coven_codex.daemon.daemon`: where serving starts.

:meth:`Recovery.recover_in_flight` resolves each state's in-flight thought against its rollout (also
for a conversation a cluster's daemon adopts); :meth:`Recovery.start_point` then loads the ingress
cursor (finishing a rotated journal file first), reads the journal once from the oldest position
still needed, and returns the :class:`StartPoint` the sessions and the ingress start from.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from coven_codex.agent.ingress import CURSOR_NAME, STARTUP_INTEREST, Backlog
from coven_codex.agent.recovery import codex_received, find_unclaimed_rollout
from coven_codex.agent.services import DriverFactory
from coven_codex.agent.state import SessionState, StateStore
from coven_codex.entries import CODEX_SENDER
from coven_codex.journal import (
    START,
    CursorMismatch,
    FileJournal,
    Journal,
    JournalError,
    JournalItem,
    JournalRecord,
    Position,
    SegmentRemoved,
)
from coven_codex.rollout.locator import find_rollout
from coven_codex.support.limits import cut

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StartPoint:
    """Where serving starts: the states, the ingress cursor, the journal's end when recovery read it,
    the ids of the daemon's entries it may produce again, a rotated file's rest, and ingress's first read."""

    states: dict[str, SessionState]
    cursor: Position
    live_from: Position
    known_ids: set[str]
    previous: list[JournalItem] | None
    backlog: Backlog


class Recovery:
    """Start-up recovery over the journal, the state store and ``CODEX_HOME``."""

    def __init__(
        self, journal: Journal, store: StateStore, codex_home: Path, make_driver: DriverFactory, cursor_name: str
    ) -> None:
        self._journal = journal
        self._store = store
        self._codex_home = codex_home
        self._make_driver = make_driver
        self._cursor_name = cursor_name
        self._previous_path: Path | None = None

    async def start_point(self, states: dict[str, SessionState]) -> StartPoint:
        """Step 4 (after :meth:`recover_in_flight` for every state): the cursor, and one read of the journal."""
        previous: list[JournalItem] | None = None
        try:
            cursor = await self._journal.load_cursor(self._cursor_name) or START
        except CursorMismatch as exc:
            cursor = exc.position
            previous = await self._previous_file(exc)
        live_from = await self._journal.end_position()
        if previous is None and cursor > live_from:
            raise JournalError(
                f"the saved ingress cursor ({cursor}) is past the end of the journal ({live_from}):"
                " the journal was truncated or replaced while the daemon was stopped, and this cursor, saved"
                " by an older coven-codex, does not say which file it belongs to. Delete the cursor"
                f" {CURSOR_NAME!r} (for a file journal, <journal>.cursors/{CURSOR_NAME}.json) to read the"
                " journal from its beginning"
            )
        known_ids, backlog = await self.read_backlog(states, cursor if previous is None else START, live_from)
        if previous is not None:
            known_ids |= await self._previous_known_ids(states, cursor)
        for state in states.values():
            state.forget_delivered_before(cursor)
        return StartPoint(states, cursor, live_from, known_ids, previous, backlog)

    async def recover_in_flight(self, state: SessionState, states: dict[str, SessionState]) -> None:
        """Step 3 for one state: did its in-flight thought reach Codex (then it counts as delivered) or not
        (then it is sent again)? ``states``: every known one (their threads are claimed)."""
        in_flight = state.in_flight
        if in_flight is None:
            return
        rollout: Path | None = Path(state.rollout_path) if state.rollout_path else None
        if state.thread_id is None:
            claimed = {s.thread_id for s in states.values() if s.thread_id}
            found = await asyncio.to_thread(find_unclaimed_rollout, self._codex_home, in_flight.digest, claimed)
            if found is not None:
                state.thread_id, rollout = found
                state.rollout_path = str(rollout)
                state.egress_offset = 0
                state.user_messages = 0
        elif rollout is None:
            # No Codex of the previous run is alive, so the file exists now or never will.
            rollout = await asyncio.to_thread(find_rollout, self._codex_home, state.thread_id)
            if rollout is not None:
                state.rollout_path = str(rollout)
        received = (
            rollout is not None
            and rollout.exists()
            and await asyncio.to_thread(
                codex_received, rollout, in_flight, by_client_id=self._make_driver.plan.records_client_id
            )
        )
        if received:
            log.info(
                "conversation %r: thought %s reached Codex before the restart; not sending it again",
                cut(state.conversation),
                cut(in_flight.thought_id),
            )
            assert in_flight.position is not None  # (an in-flight record has one: only old reply targets lack it)
            state.delivered[in_flight.thought_id] = in_flight.position
            state.user_messages = max(state.user_messages, in_flight.ordinal + 1)
        else:
            log.info(
                "conversation %r: thought %s had not reached Codex; it will be sent",
                cut(state.conversation),
                cut(in_flight.thought_id),
            )
        state.in_flight = None
        self._store.save(state)

    async def _previous_file(self, mismatch: CursorMismatch) -> list[JournalItem]:
        """The items after the saved cursor in the file it belongs to; refuses when it is gone."""
        if mismatch.previous is None:
            raise JournalError(
                f"{mismatch} (thoughts of that file that were never answered are then skipped), or put that"
                " file back beside the journal, under any name, and start again: the daemon finishes it,"
                " then reads the new one (docs/operations.md, 'Rotating the journal')"
            ) from None
        self._previous_path = mismatch.previous
        old = FileJournal(mismatch.previous, durability="never")
        try:
            items = await old.read(mismatch.position)
        finally:
            await old.aclose()
        log.warning(
            "the journal was rotated while the daemon was stopped: finishing %d entr%s of %s after"
            " %s, then reading %s from its start",
            len(items),
            "y" if len(items) == 1 else "ies",
            mismatch.previous,
            mismatch.position,
            getattr(self._journal, "path", "the new journal"),
        )
        return items

    async def _previous_known_ids(self, states: dict[str, SessionState], cursor: Position) -> set[str]:
        """Ids of our entries in the previous file after its saved cursor or the sessions' open replay windows."""
        assert self._previous_path is not None
        start = min([cursor, *(state.replay_from for state in states.values() if state.replay_from is not None)])
        old = FileJournal(self._previous_path, durability="never")
        try:
            return ours(await old.read(start, interest=STARTUP_INTEREST))
        finally:
            await old.aclose()

    async def read_backlog(
        self, states: dict[str, SessionState], cursor: Position, end: Position
    ) -> tuple[set[str], Backlog]:
        """Start-up step 4 and ingress's first read, in one pass over the journal up to ``end``: the
        ids of entries the daemon wrote that it may produce again, and the items from ``cursor`` on
        for ingress. Only the lines :data:`~coven_codex.agent.ingress.STARTUP_INTEREST` admits are
        decoded and kept, so a backlog of other traffic costs a search of its bytes, not memory."""
        start = min([cursor, *(state.replay_from for state in states.values() if state.replay_from is not None)])
        try:
            items = await self._journal.read(start, end, interest=STARTUP_INTEREST)
        except SegmentRemoved as exc:
            # A replay window lies in a segment compaction removed (behind the ingress cursor,
            # which load_cursor checked); every cursor read its entries. Read what is left
            # (docs/journal-protocol.md, Segments: what retention assumes).
            log.info("journal segments before %s were compacted away; reading from there", exc.oldest)
            start = exc.oldest
            items = await self._journal.read(start, end, interest=STARTUP_INTEREST)
        ids: set[str] = set()
        routed: list[JournalItem] = []
        for item in items:
            if isinstance(item, JournalRecord) and item.entry.sender == CODEX_SENDER:
                if item.entry.id:
                    ids.add(item.entry.id)
            elif item.start >= cursor:
                routed.append(item)
        del items
        found = len(ids)
        for state in states.values():
            ids.update(state.own_ids)
        log.info(
            "recovery: read the journal from %s (%d entr%s of ours, %d for ingress) up to %s, %d id(s) kept by"
            " %d conversation(s)",
            start,
            found,
            "y" if found == 1 else "ies",
            len(routed),
            end,
            len(ids) - found,
            len(states),
        )
        return ids, Backlog(routed, end)


def ours(items: list[JournalItem]) -> set[str]:
    """The ids of the entries the daemon wrote among ``items``."""
    return {
        item.entry.id
        for item in items
        if isinstance(item, JournalRecord) and item.entry.sender == CODEX_SENDER and item.entry.id
    }
