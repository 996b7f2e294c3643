"""Readiness checks shared by the daemon and the adapters (``/readyz``, :mod:`coven_codex.metrics.server`)."""

from __future__ import annotations

import asyncio

from coven_codex.journal import Journal
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
