"""The daemon's one way into the journal: each deterministic entry id is appended at most once.

Several writers may produce the same entry: egress translates a failed turn's error from the
rollout while the session learns it from the driver; a restarted daemon re-reads rollout
lines it had already translated. Every such entry carries a deterministic id (a rollout
line's ``<thread>:<line start>:<index>``, a turn's ``<thread>:turn-<turn>:error``, a bad
journal line's ``bad-line@<start>``), and every daemon writer appends through one
:class:`DaemonWriter`: whichever writes an id first wins, the others' appends are no-ops.

The ids known at start-up are the ones the daemon found in the journal after the oldest open
replay window or the ingress cursor, and the ids the session states keep (see
:mod:`coven_codex.daemon.daemon` and :mod:`coven_codex.agent.replay`); of the ids written since,
the newest :data:`RECENT_IDS` are kept, so a daemon that runs for months does not grow without
bound (two writers of one id race within seconds, not after tens of thousands of entries).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from coven_codex.entries import BaseEntry
from coven_codex.journal import Journal, JournalRecord

RECENT_IDS = 65_536
"""How many of the ids written by this daemon are remembered (the oldest are forgotten first)."""


class DaemonWriter:
    """Appends daemon entries to ``journal``, dropping any whose id is known (see the module docstring)."""

    def __init__(
        self,
        journal: Journal,
        known_ids: set[str],
        *,
        recent: int = RECENT_IDS,
        on_written: Callable[[BaseEntry], None] | None = None,
    ) -> None:
        """``on_written`` is told of every entry appended (the metrics, :mod:`coven_codex.metrics`)."""
        self.journal = journal
        self.on_written = on_written
        self.known_ids = known_ids
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._limit = recent

    def written(self, entry_id: str) -> bool:
        """Whether an entry with this id is in the journal (or being appended), as far as it knows."""
        return entry_id in self.known_ids or entry_id in self._recent

    async def append(self, entry: BaseEntry) -> JournalRecord | None:
        """Append ``entry`` unless its id was written before; ``None`` when it was dropped.

        The id is claimed before the append is awaited, so two writers racing on one id
        cannot both append it; a failed append gives the id back.
        """
        entry_id = entry.id
        if entry_id is not None:
            if self.written(entry_id):
                return None
            self._recent[entry_id] = None
            if len(self._recent) > self._limit:
                self._recent.popitem(last=False)
        try:
            record = await self.journal.append(entry)
        except BaseException:
            if entry_id is not None:
                self._recent.pop(entry_id, None)
            raise
        if self.on_written is not None:
            self.on_written(entry)
        return record
