"""Running the webhook senders beside something else: the daemon (``[webhooks] in_daemon``) or the
``coven-codex webhooks`` command. Either way each sender reads the journal on a handle of its own
and runs in a task of its own, so it never holds up what runs beside it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from coven_codex.journal import Journal
from coven_codex.webhooks.config import ReadyTarget
from coven_codex.webhooks.sender import TargetSender, target_lock


@contextlib.asynccontextmanager
async def webhook_senders(
    journal: Journal, targets: list[ReadyTarget], *, default_cwd: str | None
) -> AsyncIterator[list[TargetSender]]:
    """Take each target's lock (file journals; :class:`~coven_codex.agent.state.StateError` names the
    process that holds one), start a sender per target, and on exit stop them (a delivery under way
    is sent again next time, with the same idempotency key)."""
    senders = [TargetSender(journal, target, default_cwd=default_cwd) for target in targets]
    with contextlib.ExitStack() as locks:
        for sender in senders:
            lock = target_lock(journal, sender.name)
            if lock is not None:
                locks.enter_context(lock)
        tasks = [asyncio.create_task(sender.run(), name=f"webhook {sender.name}") for sender in senders]
        try:
            yield senders
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
