"""What the daemon and the adapters both measure of their journal: is it reachable (``/readyz``,
:mod:`coven_codex.metrics.server`), and how far behind its end a reader is."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

from coven_codex.entries import BaseEntry
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


async def report_lag(
    journal: Journal,
    metrics: Instruments,
    reader: str,
    position: Position,
    owed: Callable[[BaseEntry], bool] | None = None,
) -> None:
    """Set ``reader``'s journal lag: the entries after ``position`` (its oldest unfinished one) and the
    age of the oldest of them; with ``owed``, only the entries the reader still owes something for (a
    webhook target: the turn ends it has yet to deliver, not the entries it reads past)."""
    records = [
        item
        for item in await journal.read(position)
        if isinstance(item, JournalRecord) and (owed is None or owed(item.entry))
    ]
    metrics.journal_lag_entries.labels(reader=reader).set(len(records))
    age = (datetime.now(UTC) - records[0].entry.ts).total_seconds() if records else 0.0
    metrics.journal_lag_seconds.labels(reader=reader).set(max(0.0, age))


MAX_LAG_READ = 4 << 20
"""Bytes of one rollout read at most to count the lines egress has not translated yet (beyond: counted
up to there; the lag is that large at least)."""


def rollout_lag(rollouts: Iterable[tuple[Path, int]], now: datetime | None = None) -> tuple[int, float]:
    """Egress's lag over ``rollouts`` (each a rollout file and the offset egress has translated it up
    to): the complete lines after the offsets, and the age of the oldest of them (0: none), by the
    ``timestamp`` Codex writes on every rollout line. Blocking (file reads): run it in a thread."""
    now = now or datetime.now(UTC)
    lines = 0
    oldest = 0.0
    for path, offset in rollouts:
        try:
            with path.open("rb") as handle:
                if handle.seek(0, 2) <= offset:
                    continue
                handle.seek(offset)
                pending = handle.read(MAX_LAG_READ)
        except OSError:
            continue
        complete = pending[: pending.rfind(b"\n") + 1]
        if not complete:
            continue
        lines += complete.count(b"\n")
        oldest = max(oldest, _age(complete[: complete.find(b"\n")], now))
    return lines, oldest


def _age(line: bytes, now: datetime) -> float:
    """Seconds since the rollout line's ``timestamp`` (0 when it has none)."""
    try:
        stamp = json.loads(line).get("timestamp")
        written = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
    except (ValueError, AttributeError):
        return 0.0
    if written is None:
        return 0.0
    if written.tzinfo is None:
        written = written.replace(tzinfo=UTC)
    return max(0.0, (now - written).total_seconds())


async def report_egress_lag(metrics: Instruments, rollouts: list[tuple[Path, int]]) -> None:
    """Set the journal lag of reader ``egress``: rollout lines Codex wrote that egress has not yet
    translated into the journal (over every conversation), and the age of the oldest."""
    lines, age = await asyncio.to_thread(rollout_lag, rollouts)
    metrics.journal_lag_entries.labels(reader="egress").set(lines)
    metrics.journal_lag_seconds.labels(reader="egress").set(age)
