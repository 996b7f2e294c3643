"""Streaming by edits: ``delta`` entries coalesced into one message per reply, edited at a bounded rate.

The first delta of a reply item posts a message (``final=False``); later deltas only grow the
text, and the runner edits the message at most once per ``edit_interval`` (the platform's edit
rate). The final ``response`` replaces the streamed message with the whole reply (an edit, not a
new post): the reply appears once, never twice.

Deltas come from Codex's live notifications and responses from its rollout, so they can arrive in
either order and interleave: a response completes the open stream of its conversation whose text
it starts with (else the oldest open one); a stream whose text so far is the beginning of a recent
response may be a late echo: it is not shown until its text differs from every recent response
(:meth:`Streams.echo`; a reply that merely starts like an earlier one, "Sure, ...", is shown as soon
as it differs, so a restart, which forgets recent responses, shows the same message under the same
key), and is dropped once it is a recent response whole; a turn's end closes what is still open as it is.

The runner must not save its journal cursor past the first delta of a stream still open
(:meth:`Streams.hold`): after a crash the deltas are read again, the text rebuilt and the same
message (found in the ledger under the first delta's key) edited on.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Literal

from coven_codex.journal import Position

RECENT_RESPONSES = 16
FINISHED_ITEMS = 1024


@dataclass
class Stream:
    """One reply being streamed: its text so far and the message showing it."""

    conversation: str
    item_id: str | None
    key_entry: str
    """The id of its first delta: the ledger key of the message."""
    position: Position
    """Where its first delta lies; the cursor is held before it while the stream is open."""
    text: str = ""
    message_id: str | None = None
    shown: str = ""
    """The reply text (before rendering) the message shows now."""
    last_edit: float = float("-inf")

    def wait(self, now: float, interval: float) -> float:
        """Seconds until this stream's message may be edited again (0: now)."""
        return max(0.0, self.last_edit + interval - now)


@dataclass
class Streams:
    """The open streams of every conversation an adapter shows."""

    open: list[Stream] = field(default_factory=list)
    _recent: dict[str, deque[str]] = field(default_factory=dict)
    _finished: OrderedDict[tuple[str, str | None], None] = field(default_factory=OrderedDict)

    def delta(
        self, conversation: str, item_id: str | None, entry_id: str, position: Position, text: str
    ) -> Stream | None:
        """Account for a delta; the stream it grows, or None when it is to be ignored."""
        key = (conversation, item_id)
        if key in self._finished:
            return None
        for stream in self.open:
            if stream.conversation == conversation and stream.item_id == item_id:
                stream.text += text
                return stream
        stream = Stream(conversation, item_id, entry_id, position, text)
        self.open.append(stream)
        return stream

    def echo(self, stream: Stream) -> Literal["no", "maybe", "whole"]:
        """Whether ``stream`` repeats a reply already shown: ``maybe`` while its text so far begins
        one (not shown yet: more text decides), ``whole`` once it is all of one (then closed)."""
        recent = self._recent.get(stream.conversation, ())
        if any(response == stream.text for response in recent):
            self._close(stream)
            return "whole"
        return "maybe" if any(response.startswith(stream.text) for response in recent) else "no"

    def response(self, conversation: str, text: str) -> Stream | None:
        """A final reply arrived: the open stream it completes (now closed), or None."""
        self._recent.setdefault(conversation, deque(maxlen=RECENT_RESPONSES)).append(text)
        mine = [stream for stream in self.open if stream.conversation == conversation]
        if not mine:
            return None
        chosen = next((stream for stream in mine if text.startswith(stream.text)), mine[0])
        self._close(chosen)
        return chosen

    def end_turn(self, conversation: str) -> list[Stream]:
        """The turn ended: its streams still open, now closed (shown as they are)."""
        ended = [stream for stream in self.open if stream.conversation == conversation]
        for stream in ended:
            self._close(stream)
        return ended

    def hold(self, conversation: str | None = None) -> Position | None:
        """The earliest first-delta position of the open streams (of ``conversation``; None when none is open)."""
        mine = (s.position for s in self.open if conversation is None or s.conversation == conversation)
        return min(mine, default=None)

    def close(self, stream: Stream) -> None:
        """Close ``stream``: its item's later deltas are ignored."""
        self._close(stream)

    def _close(self, stream: Stream) -> None:
        self.open.remove(stream)
        self._finish((stream.conversation, stream.item_id))

    def _finish(self, key: tuple[str, str | None]) -> None:
        if key[1] is None:
            return  # deltas without an item id cannot be told apart; only open streams group them
        self._finished[key] = None
        while len(self._finished) > FINISHED_ITEMS:
            self._finished.popitem(last=False)
