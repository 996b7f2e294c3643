"""One journal tail shared by every tab: the entries of each conversation, by position.

The hub reads the journal from its start and keeps, per conversation, the last
:data:`KEPT_PER_CONVERSATION` entries in their wire form. A tab asks for the entries of one
conversation *after a position* (the ``end`` of the last entry it has); the journal's positions
are stable across restarts of the page server, so a tab that reconnects to a new server resumes
exactly where it was.

Streaming ``delta`` entries are folded by the adapter kit's stream logic
(:class:`~coven_codex.adapters.kit.streaming.Streams`, the same as every chat adapter's): a delta
the kit ignores (a late echo of a reply already complete) is neither kept nor sent; a kept delta
names its stream (``stream``: the id of the stream's first delta); the ``response`` that completes
a stream names it (``replaces``) and the stream's deltas are dropped from the kept entries; a
turn's end (or an error) names the streams it closes as they are (``closes``). The page only
applies what these fields say, so a streamed bubble cannot outlive its reply or its turn.

The hub also knows the stored images every thought attaches (:attr:`Hub.attached`), once it
has read up to where the journal ended when it started (:attr:`Hub.caught_up`).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from dataclasses import dataclass, field
from pathlib import Path

from coven_codex.adapters.kit.commands import SETTINGS_STATE, ConversationState
from coven_codex.adapters.kit.history import ChatIndex
from coven_codex.adapters.kit.resume import ThreadIndex
from coven_codex.adapters.kit.runner import TURN_ENDS
from coven_codex.adapters.kit.streaming import Streams
from coven_codex.adapters.web.render import WireEntry, wire_entry
from coven_codex.entries import DeltaEntry, ErrorEntry, ResponseEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import START, BadLine, Journal, JournalRecord, Position

log = logging.getLogger(__name__)

KEPT_PER_CONVERSATION = 2000
HISTORY_ON_LOAD = 300
"""Entries a tab gets when it opens a conversation without a position."""


@dataclass
class ConversationLog:
    """The entries of one conversation the hub keeps, in journal order."""

    name: str
    entries: list[WireEntry] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    last_ts: str = ""
    count: int = 0
    state: ConversationState = field(default_factory=ConversationState)
    """Running or idle, queued thoughts, open approval requests (for ``/status`` and ``/approve``)."""

    def add(self, wire: WireEntry) -> None:
        """Append ``wire``; a complete reply drops the deltas of the stream it replaces."""
        self._track(wire)
        if wire.replaces is not None:
            kept = [entry for entry in self.entries if entry.stream != wire.replaces]
            self.entries, self.starts = kept, [entry.start for entry in kept]
        self.entries.append(wire)
        self.starts.append(wire.start)
        self.count += 1
        self.last_ts = wire.ts
        if len(self.entries) > KEPT_PER_CONVERSATION:
            cut = len(self.entries) - KEPT_PER_CONVERSATION
            del self.entries[:cut], self.starts[:cut]

    def _track(self, wire: WireEntry) -> None:
        state = self.state
        if wire.kind == "thought":
            state.queued += 1
        elif wire.kind == "status" and wire.state == SETTINGS_STATE and wire.settings is not None:
            state.settings = wire.settings
        elif wire.kind == "status" and wire.state == "turn_started":
            state.running, state.queued = True, max(0, state.queued - 1)
        elif wire.kind == "status" and wire.state and (wire.state.startswith("turn_") or wire.state == "session_ended"):
            state.running = False
        elif wire.kind == "approval_request" and wire.request_id and wire.request_id not in state.pending_approvals:
            state.pending_approvals.append(wire.request_id)
        elif wire.kind == "approval" and wire.request_id in state.pending_approvals:
            state.pending_approvals.remove(wire.request_id)

    def after(self, position: int | None) -> list[WireEntry]:
        """The entries that start at or after ``position`` (the last few when it is None)."""
        if position is None:
            return self.entries[-HISTORY_ON_LOAD:]
        return self.entries[bisect.bisect_left(self.starts, position) :]


class Hub:
    """Follows the journal and wakes the tabs when something new is there."""

    def __init__(self, journal: Journal, uploads: Path | None = None) -> None:
        self.journal = journal
        self.uploads = uploads
        self.conversations: dict[str, ConversationLog] = {}
        self.version = 0
        """Grows with every entry read."""
        self.names_version = 0
        """Grows when a conversation appears."""
        self.bad_lines = 0
        self.attached: set[str] = set()
        """The names of the stored images that thoughts in the journal attach."""
        self.caught_up = asyncio.Event()
        """Set once the hub has read what the journal held when it started."""
        self.streams = Streams()
        """The kit's stream logic: which deltas are shown, which reply or turn end closes them."""
        self._sent: dict[str, int] = {}
        """Per open stream (its key), how much of its text the kept deltas carry."""
        self._changed = asyncio.Event()
        self.position: Position = START
        """The end of the last item read (the page's journal lag is what lies after it)."""
        self.threads = ThreadIndex()
        """The Codex threads the journal shows (``/resume``), fed by :attr:`index`."""
        self.index = ChatIndex(also=self.threads.add)
        """The page's conversations and their last exchanges (``/list``, ``/history``)."""

    async def run(self) -> None:
        """Read the journal from its start, forever (cancel to stop)."""
        ordinal = 0  # the page's positions: items read from the journal's start (journal positions are opaque)
        end = await self.journal.end_position()
        if end == START:
            self.caught_up.set()
        async for item in self.journal.tail():
            ordinal += 1
            self.position = item.end
            if not self.caught_up.is_set() and item.end >= end:
                self.caught_up.set()
            if isinstance(item, BadLine):
                self.bad_lines += 1
                continue
            self.index.add(item.entry, mapped=True)
            if isinstance(item.entry, ThoughtEntry):
                self.attached.update(
                    name for a in item.entry.attachments for name in (a.name, a.url.rsplit("/", 1)[-1]) if name
                )
            wire = wire_entry(item.entry, ordinal - 1, ordinal, self.uploads)
            if not self._fold(item, wire):
                continue
            log_ = self.conversations.get(wire.conversation)
            if log_ is None:
                log_ = self.conversations[wire.conversation] = ConversationLog(wire.conversation)
                self.names_version += 1
            log_.add(wire)
            self.version += 1
            self._changed.set()
            self._changed = asyncio.Event()

    def _fold(self, item: JournalRecord, wire: WireEntry) -> bool:
        """Apply the kit's stream logic to ``wire``; False for a delta that is not to be shown."""
        entry = item.entry
        if isinstance(entry, DeltaEntry):
            stream = self.streams.delta(entry.conversation, entry.item_id, wire.id, item.start, entry.text)
            if stream is None or self.streams.echo(stream) != "no":
                return False  # ignored, or (yet) a late echo of a reply already shown
            sent = self._sent.get(stream.key_entry, 0)
            wire.stream, wire.text = stream.key_entry, stream.text[sent:]  # what the page has not been sent
            self._sent[stream.key_entry] = len(stream.text)
        elif isinstance(entry, ResponseEntry):
            completed = self.streams.response(entry.conversation, entry.text)
            if completed is not None:
                wire.replaces = completed.key_entry
                self._sent.pop(completed.key_entry, None)
        if (isinstance(entry, StatusEntry) and entry.state in TURN_ENDS) or isinstance(entry, ErrorEntry):
            wire.closes = [stream.key_entry for stream in self.streams.end_turn(entry.conversation)]
            for key in wire.closes:
                self._sent.pop(key, None)
        return True

    @property
    def event(self) -> asyncio.Event:
        """Set when the next entry has been read (a new event after that)."""
        return self._changed

    def entries_after(self, conversation: str, position: int | None) -> list[WireEntry]:
        """The entries of ``conversation`` from ``position`` on (see :meth:`ConversationLog.after`)."""
        log_ = self.conversations.get(conversation)
        return log_.after(position) if log_ is not None else []

    def state(self, conversation: str) -> ConversationState:
        """What the hub has seen of ``conversation`` (a fresh state for one it has not seen)."""
        log_ = self.conversations.get(conversation)
        return log_.state if log_ is not None else ConversationState()

    def names(self) -> list[str]:
        """Every conversation's name, most recently active first."""
        ordered = sorted(self.conversations.values(), key=lambda c: c.last_ts, reverse=True)
        return [c.name for c in ordered]
