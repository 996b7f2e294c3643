"""The progress card: one message per turn, edited in place, that shows what Codex does.

In ``quiet`` rendering (:class:`~coven_codex.adapters.kit.render.RenderMode`) a turn's steps are
not messages of their own: the first step of a turn (a tool call, a tool's result, an activity
such as a plan, a web search or a file edit, reasoning when shown) posts a **card**, and every later
step edits it. The card shows the last :data:`SHOWN_STEPS` steps, one line each (a command with its
exit status, a spell call, a plan item, a search, an edit), a count of the earlier ones, the
elapsed time, and a **Cancel** button; the turn's end closes it (``done in 42 s · 30 steps``)
and swaps Cancel for **Details**, which shows the full output of the turn's tools on demand.
Replies, approval requests and errors stay messages of their own, so the platform notifies.

The card is delivered exactly once like everything else: it is posted under the ledger key of its
first step (:func:`card_key`), so a restart finds it instead of posting it again, and an edit
replaces the whole text (editing twice shows the same). While a card is open the runner never
saves its journal cursor past the card's first step (:meth:`Cards.hold`): after a crash the steps
are read again, the card rebuilt, and the same message edited on. A card whose end is in the
ledger (:func:`card_end_key`) was closed before a restart: its steps pass silently.

A platform that cannot edit (``Capabilities.edits`` False, the console) gets the card once, closed,
at the turn's end.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from coven_codex.adapters.kit.ledger import delivery_key
from coven_codex.adapters.kit.render import ACTIVITY_LABELS, clip, format_arguments
from coven_codex.entries import ActivityEntry, BaseEntry, ReasoningEntry, ToolCallEntry, ToolResultEntry
from coven_codex.journal import Position

SHOWN_STEPS = 8
"""Steps a card lists at most (the latest); the earlier ones are counted."""
LINE_LIMIT = 100
"""Characters of one step's line."""
DETAIL_LIMIT = 3_000
"""Characters of one tool's output kept for **Details**."""
DETAIL_STEPS = 30
"""Steps of a turn kept for **Details** (the latest)."""
DETAIL_CARDS = 64
"""Closed cards whose details are kept (the latest); older ones answer that they are gone."""
TICK = 15.0
"""Seconds after which an open card is edited even without a new step (its elapsed time moves on)."""


def card_key(key_entry: str) -> str:
    """The ledger key of the card whose first step is the entry ``key_entry``."""
    return delivery_key(key_entry, "card")


def card_end_key(key_entry: str) -> str:
    """The ledger key recorded once that card was closed (its final edit made)."""
    return delivery_key(key_entry, "card end")


class CardPhase(StrEnum):
    """Where a card is."""

    OPEN = "open"
    """The turn runs: steps edit the card."""
    REPLAYED = "replayed"
    """Closed before a restart (its end is in the ledger): its steps, read again, pass silently."""
    CLOSED = "closed"


class StepState(StrEnum):
    """How a step went: still running (a call without its result yet), done, or failed."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


MARKS = {StepState.RUNNING: "…", StepState.DONE: "✓", StepState.FAILED: "✗"}


@dataclass
class Step:
    """One line of a card, and the full text **Details** shows for it."""

    line: str
    state: StepState = StepState.DONE
    call_id: str | None = None
    detail: str = ""
    note: str = ""
    """What follows the line once known (``exit 1``)."""

    def shown(self) -> str:
        """The step as the card lists it."""
        note = f" ({self.note})" if self.note else ""
        return f"{MARKS[self.state]} {clip(self.line, LINE_LIMIT)}{note}"


def command_of(arguments: object) -> str | None:
    """The shell command of a tool call's arguments (``command`` or ``cmd``), when it is one."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    command = arguments.get("command", arguments.get("cmd"))
    if isinstance(command, list) and all(isinstance(part, str) for part in command):
        if len(command) == 3 and command[0].endswith("sh") and command[1] in ("-c", "-lc"):
            return str(command[2])  # ["bash", "-lc", "ls"]: what was typed
        return " ".join(str(part) for part in command)
    return command if isinstance(command, str) else None


def step_of(entry: BaseEntry, *, reasoning: bool) -> Step | None:
    """The card line ``entry`` starts, or None when it is no step of its own (a result, see :meth:`Card.add`)."""
    match entry:
        case ToolCallEntry():
            command = command_of(entry.arguments)
            line = f"$ {command}" if command is not None else f"{entry.tool}({format_arguments(entry.arguments)})"
            return Step(clip(line, LINE_LIMIT), StepState.RUNNING, entry.call_id, detail=line)
        case ActivityEntry():
            label = ACTIVITY_LABELS.get(entry.activity, entry.activity.replace("_", " "))
            first = next((line.strip() for line in entry.text.splitlines() if line.strip()), "")
            return Step(f"{label}: {first}" if first else label, detail=entry.text)
        case ReasoningEntry():
            if not reasoning:
                return None
            first = next((line.strip() for line in entry.text.splitlines() if line.strip()), "")
            return Step(f"thinking: {first}", detail=entry.text)
    return None


def is_step(entry: BaseEntry, *, reasoning: bool) -> bool:
    """Whether ``entry`` belongs on a card (in ``quiet`` rendering) rather than in a message."""
    if isinstance(entry, ToolResultEntry | ToolCallEntry | ActivityEntry):
        return True
    return isinstance(entry, ReasoningEntry) and reasoning


def elapsed(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


@dataclass
class Card:
    """One turn's progress card: its steps, its message, and what it shows now."""

    conversation: str
    key_entry: str
    """The id of its first step: the ledger key of its message (:func:`card_key`)."""
    position: Position
    """Where its first step lies; the cursor is held before it while the card is open."""
    started: datetime
    phase: CardPhase = CardPhase.OPEN
    steps: deque[Step] = field(default_factory=lambda: deque(maxlen=DETAIL_STEPS))
    count: int = 0
    ended: datetime | None = None
    outcome: str = ""
    message_id: str | None = None
    version: int = 0
    """Grows with every change of what the card shows."""
    shown_version: int = -1
    last_edit: float = float("-inf")

    def add(self, entry: BaseEntry, *, reasoning: bool) -> bool:
        """Account for a step entry; whether the card changed."""
        if isinstance(entry, ToolResultEntry):
            step = next((s for s in reversed(self.steps) if entry.call_id and s.call_id == entry.call_id), None)
            if step is None:  # a result without its call (a spell's end alone): a line of its own
                step = Step(f"{entry.tool or 'tool'}", call_id=entry.call_id, detail=entry.tool or "tool")
                self._append(step)
            step.state = StepState.FAILED if entry.is_error else StepState.DONE
            exit_code = getattr(entry, "exit_code", None)
            step.note = f"exit {exit_code}" if isinstance(exit_code, int) and exit_code != 0 else ""
            step.detail = f"{step.detail}\n{clip(entry.text, DETAIL_LIMIT)}" if entry.text else step.detail
            self.version += 1
            return True
        step = step_of(entry, reasoning=reasoning)
        if step is None:
            return False
        step.detail = clip(step.detail, DETAIL_LIMIT)
        self._append(step)
        self.version += 1
        return True

    def _append(self, step: Step) -> None:
        self.steps.append(step)
        self.count += 1

    def close(self, at: datetime, outcome: str) -> None:
        """The turn ended (``outcome``: done, failed, cancelled): the card's last text is due."""
        self.phase = CardPhase.CLOSED
        self.ended, self.outcome = at, outcome
        self.version += 1

    def due(self, now: float, interval: float) -> float:
        """Seconds until this card should be edited (0: now): a change waits ``interval``, else the tick."""
        if self.shown_version != self.version:
            return max(0.0, self.last_edit + interval - now)
        return max(0.0, self.last_edit + max(TICK, interval) - now)

    def header(self, now: datetime) -> str:
        """The card's first line: what the turn does or did, for how long, in how many steps."""
        steps = f"{self.count} step{'s' if self.count != 1 else ''}"
        if self.phase is CardPhase.OPEN:
            return f"working · {elapsed((now - self.started).total_seconds())} · {steps}"
        end = self.ended or now
        return f"{self.outcome} in {elapsed((end - self.started).total_seconds())} · {steps}"

    def lines(self, now: datetime) -> list[str]:
        """The card as plain lines: its header, a count of earlier steps, the latest steps."""
        shown = list(self.steps)[-SHOWN_STEPS:]
        earlier = self.count - len(shown)
        lines = [self.header(now)]
        if earlier > 0:
            lines.append(f"… {earlier} earlier step{'s' if earlier != 1 else ''}")
        lines += [step.shown() for step in shown]
        return lines

    def details(self) -> str:
        """The full text of the steps kept (**Details**), oldest first."""
        kept = list(self.steps)
        left_out = self.count - len(kept)
        parts = [f"(the first {left_out} steps are not kept)"] if left_out > 0 else []
        parts += [f"{MARKS[step.state]} {step.detail}" for step in kept]
        return "\n\n".join(parts) if parts else "no steps"


@dataclass
class Cards:
    """The cards of every conversation an adapter shows: at most one open per conversation."""

    open: dict[str, Card] = field(default_factory=dict)
    closed: OrderedDict[str, Card] = field(default_factory=OrderedDict)
    """Closed cards by their first step's id (for **Details**), the latest :data:`DETAIL_CARDS`."""

    def get(self, conversation: str) -> Card | None:
        """The open (or replayed) card of ``conversation``."""
        return self.open.get(conversation)

    def find(self, key_entry: str) -> Card | None:
        """The card whose first step is ``key_entry``: closed, or still open (its turn running, or ended
        and shown as done while its end is being recorded: a **Details** press may come then)."""
        closed = self.closed.get(key_entry)
        if closed is not None:
            return closed
        return next((card for card in self.open.values() if card.key_entry == key_entry), None)

    def start(
        self, conversation: str, key_entry: str, position: Position, started: datetime, *, replayed: bool
    ) -> Card:
        """A new card for ``conversation`` whose first step is ``key_entry``."""
        card = Card(conversation, key_entry, position, started, CardPhase.REPLAYED if replayed else CardPhase.OPEN)
        self.open[conversation] = card
        return card

    def finish(self, card: Card) -> None:
        """``card`` is closed and shown: it stops holding the cursor; its details are kept a while."""
        self.open.pop(card.conversation, None)
        if card.phase is not CardPhase.REPLAYED:
            self.closed[card.key_entry] = card
            while len(self.closed) > DETAIL_CARDS:
                self.closed.popitem(last=False)

    def hold(self, conversation: str | None = None) -> Position | None:
        """The earliest first-step position of the open cards (of ``conversation``; None when none is open)."""
        held = (c.position for c in self.open.values() if conversation is None or c.conversation == conversation)
        return min(held, default=None)
