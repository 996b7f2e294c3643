"""The daemon's one way into the journal: each deterministic entry id is appended at most once.

Several writers may produce the same entry: egress translates a failed turn's error from the
rollout while the session learns it from the driver; a restarted daemon re-reads rollout
lines it had already translated. Every such entry carries a deterministic id (a rollout
line's ``<thread>:<line start>:<index>``, a turn's ``<thread>:turn-<turn>:error``, a bad
journal line's ``bad-line@<start>``), and every daemon writer appends through one
:class:`DaemonWriter`: whichever writes an id first wins, the others' appends are no-ops.

The set of known ids starts with the ids the daemon finds in the journal at start-up (see
:mod:`coven_codex.agent.daemon`) and grows with every id written.
"""

from __future__ import annotations

from coven_codex.entries import BaseEntry
from coven_codex.journal import Journal, JournalRecord


class DaemonWriter:
    """Appends daemon entries to ``journal``, dropping any whose id is in ``known_ids``."""

    def __init__(self, journal: Journal, known_ids: set[str]) -> None:
        self.journal = journal
        self.known_ids = known_ids

    def written(self, entry_id: str) -> bool:
        """Whether an entry with this id is in the journal (or being appended)."""
        return entry_id in self.known_ids

    async def append(self, entry: BaseEntry) -> JournalRecord | None:
        """Append ``entry`` unless its id was written before; ``None`` when it was dropped.

        The id is claimed before the append is awaited, so two writers racing on one id
        cannot both append it; a failed append gives the id back.
        """
        entry_id = entry.id
        if entry_id is not None:
            if entry_id in self.known_ids:
                return None
            self.known_ids.add(entry_id)
        try:
            return await self.journal.append(entry)
        except BaseException:
            if entry_id is not None:
                self.known_ids.discard(entry_id)
            raise
