"""Showing streamed reply text (``delta`` entries) inline, with the final ``response`` as authority.

Deltas come from Codex's live notifications, the final reply from its rollout file, so they can
arrive in either order and interleave with other entries. The rules keep the screen clean:

- the final response is always shown once, whole, unless the same text was already streamed
  inline without interruption, in which case the line is just completed;
- deltas of an item that was interrupted by another line, or whose text is already on screen
  as a recent response, are not shown again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TextIO

RECENT_RESPONSES = 8


@dataclass
class StreamView:
    out: TextIO
    prefix: str
    _item: str | None = field(default=None, init=False)
    _text: str = field(default="", init=False)
    _live: bool = field(default=False, init=False)
    _done_items: set[str | None] = field(default_factory=set, init=False)
    _recent: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_RESPONSES), init=False)

    def delta(self, item_id: str | None, text: str) -> None:
        if item_id in self._done_items:
            return
        if self._live and item_id != self._item:
            self.interrupt()
        if not self._live:
            if any(response.startswith(text) for response in self._recent):
                self._done_items.add(item_id)  # this reply is already on screen
                return
            self._item, self._text, self._live = item_id, "", True
            self.out.write(self.prefix)
        self._text += text
        self.out.write(text)
        self.out.flush()

    def response(self, text: str) -> bool:
        """Account for a final reply; True when it completed the inline stream (nothing more to print)."""
        self._recent.append(text)
        if not self._live:
            return False
        completed = text.startswith(self._text)
        self.out.write((text[len(self._text):] if completed else "") + "\n")
        self.out.flush()
        self._done_items.add(self._item)
        self._live = False
        return completed

    def interrupt(self) -> None:
        """Another line is about to be printed: end the inline line; that item's deltas stop here."""
        if self._live:
            self.out.write("\n")
            self.out.flush()
            self._done_items.add(self._item)
            self._live = False

    def forget(self) -> None:
        """A new conversation is shown: nothing on screen relates to the next deltas."""
        self.interrupt()
        self._recent.clear()
