"""What the sender remembers of each conversation between two turn ends, in bounded memory.

A turn end names the thought it answers (``in_reply_to``), not the turn's other inputs or its
last reply, so the sender keeps, per conversation, what it read since that conversation's
last turn end: the thoughts not yet answered, the running turn's start, its newest
``response`` and its ``error``. At the turn end these become the payload's
``input-messages`` (the pending thoughts up to the one the turn answers: one, or several
when thoughts were steered into the turn), ``last-assistant-message``, ``error`` and
``duration-seconds``. Bounds (docs/webhooks.md, Memory):

- per conversation at most :data:`MAX_INPUT_MESSAGES` pending thoughts (the newest), each
  text cut to :data:`MAX_MESSAGE_CHARS` characters, and the newest reply cut the same way;
- at most :data:`MAX_CONVERSATIONS` conversations with something pending (the least recently
  active is forgotten first), and a conversation silent for :data:`STALE_AFTER` (by the
  entries' ``ts``) is forgotten.

What was cut or forgotten sets the payload's ``truncated``. :meth:`TurnTracker.low_water` is
the oldest journal position anything remembered was read from: reading again from there
rebuilds this memory exactly, which is what the sender's second cursor is for.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from coven_codex.entries import CODEX_SENDER, BaseEntry, ErrorEntry, ResponseEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import JournalRecord, Position
from coven_codex.support.limits import REFUSED_CODE
from coven_codex.webhooks.payload import TurnCompletePayload, TurnError, TurnStatus

MAX_INPUT_MESSAGES = 8
MAX_MESSAGE_CHARS = 4096
MAX_CONVERSATIONS = 1024
STALE_AFTER = timedelta(hours=24)
WEBHOOK_CODE_PREFIX = "WEBHOOK_"
"""Error entries the webhook sender writes itself; never part of a turn."""

TURN_ENDS: dict[str, TurnStatus] = {
    "turn_completed": "completed",
    "turn_failed": "failed",
    "turn_aborted": "aborted",
}
"""The ``status`` states that end a turn, and the payload's ``status`` for each."""


def _cut(text: str) -> tuple[str, bool]:
    return (text, False) if len(text) <= MAX_MESSAGE_CHARS else (text[: MAX_MESSAGE_CHARS - 1] + "…", True)


def is_turn_end(entry: BaseEntry) -> bool:
    """``entry`` is the daemon's status that ends a turn."""
    return isinstance(entry, StatusEntry) and entry.state in TURN_ENDS and entry.sender == CODEX_SENDER


@dataclass(slots=True)
class _Thought:
    id: str
    text: str
    start: Position
    cut: bool
    cwd: str | None


@dataclass(slots=True)
class _Context:
    thoughts: deque[_Thought] = field(default_factory=lambda: deque(maxlen=MAX_INPUT_MESSAGES))
    dropped: bool = False
    turn_start: Position | None = None
    turn_started_at: datetime | None = None
    loose_start: Position | None = None
    """Where a reply or error read outside a known turn lies (the turn's start was not read)."""
    reply: str | None = None
    reply_cut: bool = False
    error: TurnError | None = None
    last_seen: datetime | None = None

    def opened_at(self) -> Position | None:
        starts = [thought.start for thought in self.thoughts]
        starts += [p for p in (self.turn_start, self.loose_start) if p is not None]
        return min(starts) if starts else None

    def empty(self) -> bool:
        return not self.thoughts and self.turn_start is None and self.loose_start is None


class TurnTracker:
    """Per-conversation memory of the entries between turn ends; see the module docstring."""

    def __init__(self, default_cwd: str | None) -> None:
        self._default_cwd = default_cwd
        self._contexts: OrderedDict[str, _Context] = OrderedDict()
        self._newest: datetime | None = None

    def __len__(self) -> int:
        return len(self._contexts)

    def _context(self, conversation: str, ts: datetime) -> _Context:
        context = self._contexts.get(conversation)
        if context is None:
            context = self._contexts[conversation] = _Context()
            while len(self._contexts) > MAX_CONVERSATIONS:
                self._contexts.popitem(last=False)
        else:
            self._contexts.move_to_end(conversation)
        context.last_seen = ts
        return context

    def absorb(self, record: JournalRecord) -> TurnCompletePayload | None:
        """Take one journal record in; at a turn end, the payload of that turn (its memory is then let go)."""
        entry = record.entry
        self._newest = entry.ts if self._newest is None or entry.ts > self._newest else self._newest
        if isinstance(entry, ThoughtEntry):
            context = self._context(entry.conversation, entry.ts)
            if len(context.thoughts) == MAX_INPUT_MESSAGES:
                context.dropped = True
            text, cut = _cut(entry.text)
            cwd = getattr(entry, "cwd", None)
            context.thoughts.append(
                _Thought(entry.id or "", text, record.start, cut, cwd if isinstance(cwd, str) else None)
            )
            return None
        if entry.sender != CODEX_SENDER:
            return None
        if isinstance(entry, StatusEntry) and entry.state == "thought_cancelled":  # it never reaches Codex
            self._drop_thought(entry.conversation, entry.in_reply_to)
            return None
        if isinstance(entry, StatusEntry) and entry.state == "turn_started":
            context = self._context(entry.conversation, entry.ts)
            ids = [thought.id for thought in context.thoughts]
            if entry.in_reply_to in ids:  # thoughts before it belong to turns whose end never came
                for _ in range(ids.index(entry.in_reply_to)):
                    context.thoughts.popleft()
            context.turn_start, context.turn_started_at = record.start, entry.ts
            context.loose_start, context.reply, context.reply_cut, context.error = None, None, False, None
            return None
        if isinstance(entry, ResponseEntry):
            context = self._context(entry.conversation, entry.ts)
            context.reply, context.reply_cut = _cut(entry.text)
            if context.turn_start is None and context.loose_start is None:
                context.loose_start = record.start
            return None
        if isinstance(entry, ErrorEntry) and entry.in_reply_to is not None:
            if entry.code.startswith(WEBHOOK_CODE_PREFIX):
                return None
            context = self._context(entry.conversation, entry.ts)
            if entry.code == REFUSED_CODE:  # a refused thought never gets a turn
                self._drop_thought(entry.conversation, entry.in_reply_to)
                return None
            else:
                context.error = TurnError(code=entry.code, message=entry.text, hint=entry.hint)
                if context.turn_start is None and context.loose_start is None:
                    context.loose_start = record.start
            self._forget_if_empty(entry.conversation, context)
            return None
        if isinstance(entry, StatusEntry) and is_turn_end(entry):
            return self._turn_end(record, entry)
        return None

    def _turn_end(self, record: JournalRecord, entry: StatusEntry) -> TurnCompletePayload:
        context = self._contexts.pop(entry.conversation, None)
        forgotten = context is None
        context = context or _Context()
        ids = [thought.id for thought in context.thoughts]
        answered: list[_Thought] = []
        if entry.in_reply_to in ids:
            for _ in range(ids.index(entry.in_reply_to) + 1):
                answered.append(context.thoughts.popleft())
        duration = None
        if context.turn_started_at is not None:
            duration = round(max((entry.ts - context.turn_started_at).total_seconds(), 0.0), 3)
        extra_cwd = getattr(entry, "cwd", None)
        cwd = next(
            (c for c in [extra_cwd, *(t.cwd for t in reversed(answered))] if isinstance(c, str)), self._default_cwd
        )
        entry_id = entry.id or ""
        payload = TurnCompletePayload(
            thread_id=entry.thread_id,
            turn_id=entry.turn_id,
            cwd=cwd,
            input_messages=[thought.text for thought in answered],
            last_assistant_message=context.reply,
            conversation=entry.conversation,
            status=TURN_ENDS[entry.state],
            error=context.error,
            usage=entry.usage,
            duration_seconds=duration,
            ended_at=entry.ts,
            entry_id=entry_id,
            idempotency_key=entry_id,
            in_reply_to=entry.in_reply_to,
            truncated=forgotten or context.dropped or context.reply_cut or any(t.cut for t in answered),
        )
        if context.thoughts:  # thoughts queued behind this turn stay for the next one
            self._contexts[entry.conversation] = _Context(thoughts=context.thoughts, last_seen=entry.ts)
        return payload

    def _drop_thought(self, conversation: str, thought_id: str | None) -> None:
        """A thought that will never run (refused, cancelled while queued) is no input of a later turn."""
        context = self._contexts.get(conversation)
        if context is None:
            return
        context.thoughts = deque((t for t in context.thoughts if t.id != thought_id), maxlen=MAX_INPUT_MESSAGES)
        self._forget_if_empty(conversation, context)

    def _forget_if_empty(self, conversation: str, context: _Context) -> None:
        if context.empty() and context.reply is None and context.error is None:
            self._contexts.pop(conversation, None)

    def low_water(self, after: Position) -> Position:
        """The oldest position anything remembered was read from, or ``after`` (the position just read)
        when nothing is; forgets conversations silent for :data:`STALE_AFTER` first."""
        if self._newest is not None:
            stale = [
                name
                for name, context in self._contexts.items()
                if context.last_seen is not None and self._newest - context.last_seen > STALE_AFTER
            ]
            for name in stale:
                del self._contexts[name]
        starts = [start for context in self._contexts.values() if (start := context.opened_at()) is not None]
        return min([*starts, after])
