"""Ingress: one journal tail that routes chat entries to the sessions.

The reader starts at the saved ingress cursor and follows the journal live. For each item:

- a bad line becomes one ``error`` entry naming its position (its id is derived from the
  position, so a re-read after a restart does not report it twice);
- entries written by the daemon itself (``sender == "codex"``) are passed over;
- a thought that can never be answered (conversation name, id or text beyond the limits of
  :mod:`coven_codex.support.limits`) is refused with one ``error`` entry (id ``refused@<position>``);
- ``thought``, ``reset``, ``cancel`` and ``approval`` entries go to the :class:`Router` (a
  ``reset`` is pending, like a thought, until its session has acted on it);
- every other kind is passed over.

The cursor is a :class:`~coven_codex.agent.cursor.LowWaterCursor`; a thought stays pending
until its session reports it delivered (or dropped), and the saved position never passes a
pending thought. Saving is coalesced: a background task saves the newest position whenever it
changed, so a burst of deliveries costs one durable write, and shutdown saves the final one.

At start-up the daemon reads the journal written before it started, from the saved cursor (or
an older open replay window) to the end it found, in one pass, decoding only the lines that may
matter (:data:`STARTUP_INTEREST`, :mod:`coven_codex.journal.interest`): the ids of its own entries
go to the writers, and the items from the cursor on come here as the ``backlog``, routed first;
the tail then starts at the backlog's end, so no line is read twice and a long backlog of other
traffic is neither decoded nor held.

Positions belong to one journal file, so a new file (rotation, truncation) is switched to only
once everything read from the old one is finished: when the tail reports the journal replaced
(:class:`~coven_codex.journal.JournalReplaced`), or when the daemon starts with the rest of a
previous file to finish (``previous``: its items after the saved cursor, routed first, their
positions never saved), the reader waits until no thought is pending, lets the daemon move its
own positions to the new file (``on_switch``), then saves position 0 and reads the new file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from coven_codex.agent.cursor import LowWaterCursor
from coven_codex.agent.writer import DaemonWriter
from coven_codex.entries import (
    CODEX_SENDER,
    ApprovalEntry,
    BaseEntry,
    CancelEntry,
    ErrorEntry,
    ResetEntry,
    SettingsEntry,
    ThoughtEntry,
)
from coven_codex.journal import (
    START,
    BadLine,
    Interest,
    Journal,
    JournalItem,
    JournalRecord,
    JournalReplaced,
    Position,
)
from coven_codex.support.limits import MAX_CONVERSATION_CHARS, REFUSED_CODE, over_limit

log = logging.getLogger(__name__)

CURSOR_NAME = "agent-ingress"

FAIR_ITEMS: Final = 256
"""Items of the backlog routed between two yields to the event loop."""

STARTUP_INTEREST: Final = Interest(frozenset({"thought", "reset", "settings", "cancel", CODEX_SENDER}))
"""The lines start-up decodes of the journal written before it started: the kinds ingress acts on
when they were written before this run (an ``approval`` then answers a request that did not
survive the restart, and is passed over), and the daemon's own entries (``sender`` ``codex``:
their ids, so that nothing is written twice)."""


@dataclass(frozen=True, slots=True)
class Backlog:
    """What start-up read of the journal before ``end`` that ingress must route (module docstring)."""

    items: Sequence[JournalItem]
    """The items from the saved cursor on that :data:`STARTUP_INTEREST` admits, in journal order,
    the daemon's own entries left out."""
    end: Position
    """Where start-up stopped reading (the journal's end when the daemon started): the tail starts here."""


class Router(Protocol):
    """Where routed entries go (the session manager)."""

    def route_thought(self, entry: ThoughtEntry, position: Position) -> bool:
        """Take a thought; ``True`` if it is now pending (will call :meth:`Ingress.finish`)."""
        ...

    def route_reset(self, entry: ResetEntry | SettingsEntry, position: Position) -> bool:
        """Take a ``reset`` (or a ``settings`` entry, which takes a reset's place in the queue); ``True`` if it
        is now pending (will call :meth:`Ingress.finish`)."""
        ...

    def route_cancel(self, entry: CancelEntry, *, live: bool) -> None:
        """Take a cancel; ``live`` is ``False`` for one written before this run started."""
        ...

    def route_approval(self, entry: ApprovalEntry, *, live: bool) -> None:
        """Take an approval answer; ``live`` is ``False`` for one written before this run started."""
        ...


class Gate(Protocol):
    """Which items this daemon takes when several daemons share the journal (the cluster's ownership)."""

    async def admit(self, record: JournalRecord) -> bool:
        """Whether the record is this daemon's to route now."""
        ...


class Ingress:
    """Reads the journal from ``start`` and routes entries; see the module docstring.

    ``live_from`` is the journal's end when the daemon started: cancels and approvals before it
    were meant for turns and requests that did not survive the restart, so they are only logged.
    ``known_ids`` holds the ids of entries the daemon already wrote after ``start``. ``backlog``:
    the items start-up read for ingress (:class:`Backlog`), routed before the tail starts at its end.
    """

    def __init__(
        self,
        journal: Journal,
        router: Router,
        *,
        start: Position,
        live_from: Position,
        known_ids: set[str],
        cursor_name: str = CURSOR_NAME,
        previous: Sequence[JournalItem] | None = None,
        on_switch: Callable[[], Awaitable[None]] | None = None,
        gate: Gate | None = None,
        backlog: Backlog | None = None,
    ) -> None:
        self._journal = journal
        self._gate = gate
        self._writer = DaemonWriter(journal, known_ids)
        self._router = router
        self._live_from = live_from
        self._cursor_name = cursor_name
        self._previous = previous
        self._on_switch = on_switch
        self._backlog = backlog
        self._hold = previous is not None
        """Positions are of a previous file: not saved (a restart finishes that file again)."""
        self.cursor = LowWaterCursor(start)
        self._start = start
        self._saved: Position | None = start
        self._dirty = asyncio.Event()
        self._finished = asyncio.Event()
        self._save_lock = asyncio.Lock()

    async def run(self) -> None:
        """Tail and route until cancelled; the cursor saver runs alongside."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._save_loop(), name="ingress-cursor")
            if self._previous is not None:
                for item in self._previous:
                    await self._take(item, live=False)
                self._previous = None
                await self._switch_file(live_from=self._live_from)
            if self._backlog is not None:
                await self._route_backlog(self._backlog)
            while True:
                try:
                    await self._read()
                except JournalReplaced as exc:
                    log.warning(
                        "%s; finishing the %d thought(s) still pending from the old file, then reading"
                        " the new one from its start",
                        exc,
                        self.cursor.pending,
                    )
                    await self._switch_file(live_from=START)

    async def _route_backlog(self, backlog: Backlog) -> None:
        """Route what start-up read, then read on from its end (the lines it passed over included)."""
        self._backlog = None
        for index, item in enumerate(backlog.items, 1):
            await self._take(item, live=False)
            if index % FAIR_ITEMS == 0:
                await asyncio.sleep(0)  # a long backlog must not starve the rest of the loop (as the tail)
        self._consumed(backlog.end, backlog.end, pending=False)
        self._start = backlog.end

    async def _read(self) -> None:
        async for item in self._journal.tail(self._start):
            await self._take(item, live=item.start >= self._live_from)

    async def _take(self, item: JournalItem, *, live: bool, gated: bool = True, ahead: bool = False) -> None:
        if isinstance(item, BadLine):
            await self._report_bad_line(item)
            self._consumed(item.start, item.end, pending=False, ahead=ahead)
            return
        if gated and self._gate is not None and not await self._gate.admit(item):
            self._consumed(item.start, item.end, pending=False, ahead=ahead)  # another daemon's conversation
            return
        refusal = refuse_thought(item.entry, item.start)
        if refusal is not None:
            await self._refuse(refusal)
            self._consumed(item.start, item.end, pending=False, ahead=ahead)
            return
        pending = self._route(item, live=live)
        self._consumed(item.start, item.end, pending=pending, ahead=ahead)

    async def replay(self, items: Sequence[JournalRecord]) -> None:
        """Route items read before (a conversation this daemon just took over, from its floor on).
        They may lie ahead of the reader: where it is does not move (the floor of every conversation
        with nothing pending, and the saved cursor, must not pass items it has not read)."""
        for item in items:
            await self._take(item, live=False, gated=False, ahead=True)

    async def _switch_file(self, *, live_from: Position) -> None:
        """Finish every thought read so far, then continue with a new file from its start."""
        while self.cursor.pending:
            self._finished.clear()
            await self._finished.wait()
        await self.save()  # the old file's end (not while holding a previous file's positions)
        if self._on_switch is not None:
            await self._on_switch()
        self.cursor = LowWaterCursor(START)
        self._start = START
        self._live_from = live_from
        self._hold = False
        self._saved = None
        await self.save()

    def _route(self, record: JournalRecord, *, live: bool) -> bool:
        entry: BaseEntry = record.entry
        if entry.sender == CODEX_SENDER:
            return False
        if isinstance(entry, ThoughtEntry):
            return self._router.route_thought(entry, record.start)
        if isinstance(entry, ResetEntry | SettingsEntry):
            return self._router.route_reset(entry, record.start)
        if isinstance(entry, CancelEntry):
            self._router.route_cancel(entry, live=live)
        elif isinstance(entry, ApprovalEntry):
            self._router.route_approval(entry, live=live)
        return False

    async def _report_bad_line(self, bad: BadLine) -> None:
        error = bad.to_error_entry()
        if error.id is None:
            error.id = f"bad-line@{bad.start}"
        if await self._writer.append(error) is not None:
            log.warning("journal line at position %s is not an entry: %s", bad.start, bad.reason)

    async def _refuse(self, refusal: ErrorEntry) -> None:
        if await self._writer.append(refusal) is not None:
            log.warning("%s", refusal.text)

    def _consumed(self, start: Position, end: Position, *, pending: bool, ahead: bool = False) -> None:
        self.cursor.read(start, end, pending=pending, ahead=ahead)
        self._mark()

    def finish(self, position: Position) -> None:
        """A routed thought (starting at ``position``) is delivered or dropped for good."""
        self.cursor.finish(position)
        self._finished.set()
        self._mark()

    @property
    def saved_position(self) -> Position:
        """The last position saved durably (every thought before it is finished for good)."""
        return self._saved if self._saved is not None else START

    def _mark(self) -> None:
        if self.cursor.position != self._saved:
            self._dirty.set()

    async def _save_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self.save()

    async def save(self) -> None:
        """Save the cursor now if it moved (also called once more at shutdown)."""
        async with self._save_lock:  # one at a time: an older position must never land last
            position = self.cursor.position
            if position == self._saved or self._hold:
                return
            await self._journal.save_cursor(self._cursor_name, position)
            self._saved = position
            log.debug("ingress cursor saved at %s", position)


def refuse_thought(entry: BaseEntry, position: Position) -> ErrorEntry | None:
    """The ``error`` entry refusing a thought that can never be answered, or ``None`` if it is fine.

    A conversation name too long for the daemon's entries, an id too long to keep, or a text
    over Codex's input limit (:func:`~coven_codex.support.limits.over_limit`) would only fail again
    at every try. The error goes to the thought's conversation, or, when the name itself is too
    long, to the name cut to :data:`~coven_codex.support.limits.MAX_CONVERSATION_CHARS` characters
    (the last one ``…``). It names the thought it refuses (``in_reply_to`` its id) unless that id
    is the field over its limit: a job waiting for its thought's answer ends on it.
    """
    if not isinstance(entry, ThoughtEntry) or entry.sender == CODEX_SENDER:
        return None
    breach = over_limit(entry.conversation, entry.id, entry.text)
    if breach is None:
        return None
    conversation = entry.conversation
    refused = f"The thought at journal position {position} was refused"
    if breach.field == "conversation":
        conversation = conversation[: MAX_CONVERSATION_CHARS - 1] + "…"
        text = f"{refused}: its conversation name is {breach.length} characters long, the limit is {breach.limit}."
        hint = "Use a shorter conversation name (a channel or thread id, for example) and send it again."
    elif breach.field == "id":
        text = f"{refused}: its id is {breach.length} characters long, the limit is {breach.limit}."
        hint = "Give thoughts short ids (or none: the journal assigns one) and send it again."
    else:
        text = f"{refused}: it is {breach.length} characters long and Codex accepts at most {breach.limit}."
        hint = "Shorten it (or split it into several thoughts) and send it again."
    return ErrorEntry(
        id=f"refused@{position}",
        conversation=conversation,
        code=REFUSED_CODE,
        text=text,
        hint=hint,
        in_reply_to=entry.id if breach.field != "id" else None,
    )
