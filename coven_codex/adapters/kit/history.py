"""``/list`` and ``/history``: what an adapter keeps of its conversations to answer them without a read.

A :class:`ChatIndex` is fed every journal entry the adapter reads (the runner's tail, the web
page's hub) and keeps, bounded:

- per **sender** (``sender_id``: ``<platform>:<user id>``, written on the thoughts an adapter
  appends), the conversations they wrote in (:data:`KEPT_PER_SENDER`, the latest they wrote in);
- per **conversation**, when its last message came, that message's first words, and its last
  :data:`MAX_HISTORY` exchanges (a thought and the reply to it, each cut to :data:`EXCHANGE_CHARS`);
- at most :data:`MAX_CONVERSATIONS` conversations (the least recently active are forgotten).

A command is then answered from memory, whatever the journal's size. At start the index is rebuilt
by one read of the journal up to where the adapter resumes (:meth:`ChatIndex.rebuild`), which
decodes only the lines that may be thoughts or replies (an :class:`~coven_codex.journal.Interest`);
the adapter follows the journal meanwhile: what it reads is kept aside and taken in, in order, once
the rebuild is done (:class:`IndexPhase`). docs/performance.md measures both.

Only a thought's ``sender_id`` counts: a display name can be anybody's, so a thought without one
(written by hand, or by an older coven-codex) lists nobody's conversation.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from coven_codex.entries import BaseEntry, ResponseEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import START, Interest, Journal, JournalError, JournalRecord, Position

log = logging.getLogger(__name__)

SENDER_ID_FIELD = "sender_id"
"""Extra field of the thoughts an adapter appends: ``<platform>:<user id>``, who wrote it."""
LISTED = 10
"""Conversations ``/list`` shows at most."""
KEPT_PER_SENDER = 50
"""Conversations kept per sender (those they wrote in last)."""
HISTORY_DEFAULT = 5
"""Exchanges ``/history`` shows without a number."""
MAX_HISTORY = 20
"""Exchanges ``/history N`` shows at most (and kept per conversation)."""
EXCHANGE_CHARS = 300
"""Characters of a thought or a reply ``/history`` shows at most (the cut is marked ``…``)."""
FIRST_WORDS = 60
"""Characters of the last message ``/list`` shows."""
MAX_CONVERSATIONS = 10_000
"""Conversations kept at most; the least recently active are forgotten first."""
INTEREST = Interest(frozenset({"thought", "response", "status"}))
"""The lines the index reads at start (every other line is passed over undecoded): thoughts and
replies, and the statuses that name a conversation's Codex thread (for :attr:`ChatIndex.also`)."""
INDEXED = (ThoughtEntry, ResponseEntry, StatusEntry)
"""The entries of :data:`INTEREST`: what the index takes in, at its rebuild and from the tail alike."""

_SPACE = re.compile(r"\s+")


class IndexPhase(StrEnum):
    """Where a :class:`ChatIndex` is: rebuilding from the journal (entries read meanwhile wait), or complete."""

    REBUILDING = "rebuilding"
    READY = "ready"
    PARTIAL = "partial"
    """The rebuild could not read the journal: only what was read since the start is known."""


def _flat(text: str, limit: int) -> str:
    """``text`` on one line (runs of white space as one space), cut to ``limit`` characters."""
    flat = _SPACE.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def sender_id(platform: str, user: str) -> str:
    """The ``sender_id`` of ``user`` (their platform id) on ``platform``."""
    return f"{platform}:{user}"


@dataclass(slots=True)
class Exchange:
    """A thought and the reply to it (the last ``response`` of its turn), both cut."""

    thought_id: str
    sender: str
    at: datetime
    thought: str
    reply: str | None = None


@dataclass(slots=True)
class Summary:
    """What ``/list`` says of a conversation: when its last message came, its first words, who wrote it."""

    name: str
    last_at: datetime
    last_sender: str
    last_words: str
    exchanges: deque[Exchange] = field(default_factory=lambda: deque(maxlen=MAX_HISTORY))


@dataclass
class ChatIndex:
    """The conversations of each sender and the last exchanges of each conversation (module docstring)."""

    conversations: OrderedDict[str, Summary] = field(default_factory=OrderedDict)
    """By conversation, the least recently active first."""
    senders: dict[str, OrderedDict[str, None]] = field(default_factory=dict)
    """By ``sender_id``, the conversations they wrote in, the latest last."""
    entries: int = 0
    """Entries read so far (thoughts and replies)."""
    phase: IndexPhase = IndexPhase.READY
    """:attr:`IndexPhase.READY` for an index fed from the journal's start (the web page's hub)."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the rebuild is over (at once when there is none)."""
    also: Callable[[BaseEntry], None] | None = None
    """Given every entry the index takes in, rebuild included (``/resume``'s thread index)."""
    _later: list[tuple[BaseEntry, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.done.set()

    def begin_rebuild(self) -> None:
        """From now on, entries given to :meth:`add` wait for :meth:`rebuild` (called next) to be over."""
        self.phase = IndexPhase.REBUILDING
        self.done.clear()

    async def rebuild(self, journal: Journal, end: Position, mine: Callable[[str], bool]) -> None:
        """Read the journal's thoughts and replies before ``end`` into the index (one read, at start), then
        the entries read meanwhile. A journal that cannot be read leaves the index :attr:`IndexPhase.PARTIAL`."""
        phase = IndexPhase.READY
        try:
            items = await journal.read(START, end, interest=INTEREST)
        except (JournalError, OSError) as exc:
            log.warning("the journal's earlier entries could not be read for /list and /history: %s", exc)
            items, phase = [], IndexPhase.PARTIAL
        for item in items:
            if isinstance(item, JournalRecord):
                self._add(item.entry, mine(item.entry.conversation))
        del items
        for entry, mapped in self._later:
            self._add(entry, mapped)
        self._later.clear()
        self.phase = phase
        self.done.set()

    def add(self, entry: BaseEntry, *, mapped: bool) -> None:
        """Take ``entry`` into the index (or keep it for the rebuild's end). ``mapped``: the conversation is
        one the adapter shows. A conversation is kept when the adapter shows it or one of its senders wrote in it.
        """
        if self.phase is IndexPhase.REBUILDING:
            if isinstance(entry, INDEXED):
                self._later.append((entry, mapped))
            return
        self._add(entry, mapped)

    def _add(self, entry: BaseEntry, mapped: bool) -> None:
        if self.also is not None and isinstance(entry, INDEXED):
            self.also(entry)
        if isinstance(entry, ThoughtEntry):
            self._thought(entry, mapped)
        elif isinstance(entry, ResponseEntry):
            self._reply(entry)

    def _thought(self, entry: ThoughtEntry, mapped: bool) -> None:
        who = getattr(entry, SENDER_ID_FIELD, None)
        if not isinstance(who, str) or not who:
            who = None
        if who is None and not mapped and entry.conversation not in self.conversations:
            return
        summary = self._touch(entry, entry.sender)
        summary.exchanges.append(Exchange(entry.id or "", entry.sender, entry.ts, _flat(entry.text, EXCHANGE_CHARS)))
        if who is not None:
            mine = self.senders.setdefault(who, OrderedDict())
            mine[entry.conversation] = None
            mine.move_to_end(entry.conversation)
            while len(mine) > KEPT_PER_SENDER:
                mine.popitem(last=False)

    def _reply(self, entry: ResponseEntry) -> None:
        summary = self.conversations.get(entry.conversation)
        if summary is None:
            return
        self._touch(entry, entry.sender)
        exchange = next((e for e in reversed(summary.exchanges) if e.thought_id == entry.in_reply_to), None)
        if exchange is None and summary.exchanges:
            exchange = summary.exchanges[-1]
        if exchange is not None:
            exchange.reply = _flat(entry.text, EXCHANGE_CHARS)

    def _touch(self, entry: BaseEntry, sender: str) -> Summary:
        """The conversation's summary, its last message now ``entry``; the oldest forgotten beyond the bound."""
        self.entries += 1
        words = _flat(entry.text, FIRST_WORDS) or "(no text)"
        summary = self.conversations.get(entry.conversation)
        if summary is None:
            summary = self.conversations[entry.conversation] = Summary(entry.conversation, entry.ts, sender, words)
            while len(self.conversations) > MAX_CONVERSATIONS:
                self.conversations.popitem(last=False)
        else:
            summary.last_at, summary.last_sender, summary.last_words = entry.ts, sender, words
            self.conversations.move_to_end(entry.conversation)
        return summary

    def listed(self, who: str, limit: int = LISTED) -> list[Summary]:
        """The conversations ``who`` wrote in, the most recently active first, at most ``limit``."""
        known = [self.conversations[name] for name in self.senders.get(who, ()) if name in self.conversations]
        return sorted(known, key=lambda s: s.last_at, reverse=True)[:limit]

    def history(self, conversation: str, count: int) -> list[Exchange]:
        """The last ``count`` exchanges of ``conversation``, oldest first."""
        summary = self.conversations.get(conversation)
        if summary is None or count <= 0:
            return []
        return list(summary.exchanges)[-count:]


REBUILD_WAIT = 10.0
"""Seconds a ``/list`` or ``/history`` waits for the index's rebuild before saying it is not complete yet."""


NOT_YET = "(still reading the journal's earlier entries: older conversations may be missing; ask again soon)\n"
PARTIAL = "(the journal's earlier entries could not be read: only what came since the adapter started)\n"


async def settled(index: ChatIndex, reading: asyncio.Event | None = None) -> str:
    """Wait (at most :data:`REBUILD_WAIT`) for ``index``'s rebuild (and for ``reading``, set once a reader
    fed from the journal's start has caught up: the web page's hub); a note to put before the answer
    when the index is not complete (empty when it is)."""
    try:
        async with asyncio.timeout(REBUILD_WAIT):
            await index.done.wait()
            if reading is not None:
                await reading.wait()
    except TimeoutError:
        return NOT_YET
    return PARTIAL if index.phase is IndexPhase.PARTIAL else ""


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def format_list(summaries: list[Summary], place: Callable[[str], str]) -> str:
    """The ``/list`` answer: one line per conversation, where it lives (``place``) and its last message."""
    if not summaries:
        return "you have not written in any conversation here yet"
    lines = [f"your conversations, the most recently active first ({len(summaries)}):"]
    for number, summary in enumerate(summaries, start=1):
        lines.append(
            f"{number}. {_when(summary.last_at)} · {place(summary.name)} · {summary.last_sender}: {summary.last_words}"
        )
    return "\n".join(lines)


def parse_count(argument: str) -> int | str:
    """``/history``'s number (default :data:`HISTORY_DEFAULT`, at most :data:`MAX_HISTORY`), or what is wrong."""
    if not argument.strip():
        return HISTORY_DEFAULT
    text = argument.strip()
    if not text.isdigit() or int(text) < 1:
        return f"/history takes a number of exchanges from 1 to {MAX_HISTORY}, not {_flat(text, 40)!r}"
    return min(int(text), MAX_HISTORY)


def format_history(exchanges: list[Exchange], asked: int) -> str:
    """The ``/history`` answer: each exchange as the thought, then the reply (or that none came yet)."""
    if not exchanges:
        return "no exchanges in this conversation yet"
    shown = len(exchanges)
    more = f" (asked for {asked})" if shown < asked else ""
    lines = [f"the last {shown} exchange{'s' if shown != 1 else ''} here{more}, the oldest first:"]
    for exchange in exchanges:
        lines.append(f"{_when(exchange.at)} {exchange.sender}: {exchange.thought or '(no text)'}")
        lines.append(f"  → codex: {exchange.reply if exchange.reply is not None else '(no reply yet)'}")
    return "\n".join(lines)
