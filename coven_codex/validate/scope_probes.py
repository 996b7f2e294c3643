"""validate's check of where a start would keep the conversations: the state folder and the journal's identity."""

from __future__ import annotations

from pathlib import Path

from coven_codex.agent.scope import ScopeError, describe_scope
from coven_codex.journal.identity import IdentityError
from coven_codex.journal.opening import describe_journal, is_redis_name, open_journal
from coven_codex.journal.protocol import Journal, JournalError
from coven_codex.validate.framework import ProbeContext, ProbeResult, Status

REDIS_WAIT = 3.0
"""Seconds a Redis journal's identity is waited for (the ``redis`` check says why Redis does not answer)."""


def _journal(name: Path | str) -> Journal:
    if is_redis_name(name):
        try:
            from coven_codex.journal.redis import RedisJournal  # noqa: PLC0415 (the optional [redis] extra)

            return RedisJournal.from_url(str(name), outage_limit=REDIS_WAIT)
        except ImportError:
            raise JournalError("redis-py is not installed") from None
    return open_journal(name)


async def probe_conversation_state(context: ProbeContext) -> ProbeResult:
    """Which state folder and journal identity a start would use (docs/configuration.md, "Where state lives")."""
    settings = context.settings
    state_dir = settings.resolved_state_dir
    if settings.journal is None:
        return ProbeResult(Status.SKIP, f"state folder {state_dir}; no journal configured, so no journal identity")
    name = describe_journal(settings.journal)
    try:
        journal = _journal(settings.journal)
    except JournalError as exc:
        return ProbeResult(Status.SKIP, f"state folder {state_dir}; the journal cannot be opened ({exc})")
    try:
        detail = await describe_scope(journal, name, state_dir)
    except (ScopeError, IdentityError) as exc:
        return ProbeResult.fail(str(exc), "Do what the message says; docs/configuration.md says what each file holds.")
    except JournalError as exc:
        return ProbeResult(Status.SKIP, f"state folder {state_dir}; the journal's identity cannot be read ({exc})")
    finally:
        await journal.aclose()
    return ProbeResult.ok(f"state folder {state_dir}; {detail}")
