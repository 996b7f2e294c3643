"""A conversation's outbox: the one path of its own entries to the daemon's journal writer."""

from __future__ import annotations

import logging

from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.state import SessionState
from coven_codex.agent.writer import DaemonWriter
from coven_codex.codex.errors import shorten
from coven_codex.entries import BaseEntry, ErrorEntry

log = logging.getLogger(__name__)


class Outbox:
    """Appends the conversation's own entries (statuses, errors, deltas, approval requests).

    An entry with an id is written inside the replay window (egress may produce the same id
    again from the rollout) and remembered in the state's ``own_ids``; the daemon's one
    :class:`~coven_codex.agent.writer.DaemonWriter` writes an id once, whoever comes first.
    """

    __slots__ = ("_name", "_state", "_window", "_writer")

    def __init__(self, state: SessionState, writer: DaemonWriter, window: ReplayWindow, name: str) -> None:
        self._state = state
        self._writer = writer
        self._window = window
        self._name = name

    async def emit(self, entry: BaseEntry) -> bool:
        """Append ``entry`` to this conversation; ``False`` if its id was written before."""
        entry.conversation = self._state.conversation
        if entry.id is None:
            return await self._writer.append(entry) is not None
        async with self._window.writing():  # egress may produce this id again from the rollout
            if await self._writer.append(entry) is None:
                return False
            self._state.wrote(entry.id)
        return True

    async def error(
        self, code: str, message: str, hint: str, *, entry_id: str | None = None, in_reply_to: str | None = None
    ) -> None:
        """One ``error`` entry (logged once it is written)."""
        entry = ErrorEntry(id=entry_id, code=str(code), text=shorten(message), hint=hint, in_reply_to=in_reply_to)
        if await self.emit(entry):
            log.warning("conversation %r: %s: %s", self._name, code, shorten(message))
