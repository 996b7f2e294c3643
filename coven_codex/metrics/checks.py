"""What the daemon and the adapters both measure of their journal: is it reachable (``/readyz``,
:mod:`coven_codex.metrics.server`), and how far behind its end a reader is."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from coven_codex.journal import Journal, JournalRecord, Position
from coven_codex.metrics.instruments import Instruments
from coven_codex.metrics.server import CHECK_TIMEOUT, ReadinessCheck

JOURNAL_PROBE_TIMEOUT = CHECK_TIMEOUT * 0.8
"""Seconds the journal has to answer a probe (within the server's bound on a check)."""


def journal_reachable(journal: Journal, instruments: Instruments) -> ReadinessCheck:
    """Ready while the journal answers (its end position, one round trip to Redis); every probe
    updates ``coven_journal_reachable`` and counts an outage when it stops answering."""

    async def check() -> str | None:
        try:
            await asyncio.wait_for(journal.end_position(), JOURNAL_PROBE_TIMEOUT)
        except TimeoutError:
            instruments.journal_probed(reachable=False)
            return f"the journal did not answer within {JOURNAL_PROBE_TIMEOUT:g}s"
        except Exception as exc:  # any failure of the backend (redis.ConnectionError, OSError, ...)
            instruments.journal_probed(reachable=False)
            return f"the journal does not answer ({type(exc).__name__}: {str(exc)[:160]})"
        instruments.journal_probed(reachable=True)
        return None

    return check


async def report_lag(journal: Journal, metrics: Instruments, reader: str, position: Position) -> None:
    """Set ``reader``'s journal lag: the entries after ``position`` (its oldest unfinished one) and the
    age of the oldest of them."""
    records = [item for item in await journal.read(position) if isinstance(item, JournalRecord)]
    metrics.journal_lag_entries.labels(reader=reader).set(len(records))
    age = (datetime.now(UTC) - records[0].entry.ts).total_seconds() if records else 0.0
    metrics.journal_lag_seconds.labels(reader=reader).set(max(0.0, age))
