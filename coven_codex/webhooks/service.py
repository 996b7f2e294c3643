"""Running the webhook senders beside something else: the daemon (``[webhooks] in_daemon``) or the
``coven-codex webhooks`` command. Either way each sender reads the journal on a handle of its own
and runs in a task of its own, so it never holds up what runs beside it.

One sender per target on every backend (two would send every turn twice): on a file journal a lock
file beside its cursors, on a Redis journal a hold in Redis (``NAME:webhook:<target>``,
:mod:`coven_codex.journal.redis.holds`) with a time to live, so a sender killed with ``kill -9`` is
replaced. A second sender is refused at start, naming the first; in a cluster (``standby``) every
daemon runs the senders' hold, and exactly one sends: the others wait and take over when it stops or
dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Final

from coven_codex.journal import Journal, StorageError
from coven_codex.journal.redis.holds import RENEWALS_PER_TTL, Holder
from coven_codex.support.statelock import StateError
from coven_codex.webhooks.config import ReadyTarget
from coven_codex.webhooks.sender import FATAL, TargetSender, target_lock

if TYPE_CHECKING:
    from coven_codex.journal.redis.holds import RedisHold

log = logging.getLogger(__name__)

HOLD_TTL: Final = 10.0
"""A Redis sender's hold lasts this long without renewal (seconds): a killed sender is replaced within it."""
RELEASE_TIMEOUT: Final = 2.0
"""A stop gives a hold back within this (seconds); else it runs out by itself."""


def _redis_hold(journal: Journal, name: str, ttl: float) -> RedisHold | None:
    """The hold of target ``name`` on a Redis journal (None on other backends)."""
    if "coven_codex.journal.redis.journal" not in sys.modules:  # (no Redis journal was made: no redis-py needed)
        return None
    from coven_codex.journal.redis.holds import RedisHold  # noqa: PLC0415 (the optional [redis] extra)
    from coven_codex.journal.redis.journal import RedisJournal  # noqa: PLC0415

    if not isinstance(journal, RedisJournal):
        return None
    return RedisHold(journal, journal.location.webhook(name), owner=secrets.token_hex(8), ttl=ttl)


def _refusal(name: str, hold: RedisHold, holder: Holder) -> str:
    return (
        f"another webhook sender ({holder.describe()}) is sending to the webhook {name} of the journal"
        f" {hold.journal.location.display()}; two would send every turn twice. Stop it (or leave [webhooks]"
        " in_daemon off while `coven-codex webhooks` runs); a sender killed without a clean stop holds the"
        f" target for at most {hold.ttl:g} s more"
    )


async def _send_while_held(sender: TargetSender, hold: RedisHold, *, standby: bool) -> None:
    """Send while ``hold`` is ours (taken already unless ``standby``); lost, stop sending and wait to take it
    again; standing by, take it when its holder stops or dies. Until cancelled."""
    held = not standby
    while True:
        if not held:
            found = await hold.take()
            if found is not None:
                await asyncio.sleep(hold.ttl / RENEWALS_PER_TTL)
                continue
            log.info("webhook %s: this process sends from now on", sender.name)
        task = asyncio.create_task(sender.run(), name=f"webhook {sender.name}")
        keeper = asyncio.create_task(hold.keep(f"the webhook {sender.name}"), name=f"hold {sender.name}")
        try:
            done, _ = await asyncio.wait({task, keeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for running in (task, keeper):
                running.cancel()
            await asyncio.gather(task, keeper, return_exceptions=True)
        if task in done:
            task.result()  # (the sender ends only by a failure a restart does not fix: raised)
        lost = keeper.exception() if keeper in done and not keeper.cancelled() else None
        if (lost is not None and not isinstance(lost, StorageError)) or isinstance(lost, FATAL):
            raise lost
        log.error("webhook %s: stopped sending: %s", sender.name, lost)
        held = False


@contextlib.asynccontextmanager
async def webhook_senders(
    journal: Journal,
    targets: list[ReadyTarget],
    *,
    default_cwd: str | None,
    standby: bool = False,
    hold_ttl: float = HOLD_TTL,
    on_fatal: Callable[[BaseException], None] | None = None,
) -> AsyncIterator[list[TargetSender]]:
    """Take each target's lock or hold (:class:`~coven_codex.support.statelock.StateError` names the process that
    has one), start a sender per target, and on exit stop them (a delivery under way is sent again next
    time, with the same idempotency key) and give the holds back. ``standby`` (a cluster's daemons): a
    target held by another process is not refused; this one sends once it can take the hold. A sender that
    stops for good (:data:`~coven_codex.webhooks.sender.FATAL`: a Redis that lost the journal or refuses us)
    is logged and given to ``on_fatal``."""

    def ended(task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        failure = task.exception()
        assert failure is not None
        log.error("%s stopped: %s", task.get_name(), failure)
        if on_fatal is not None:
            on_fatal(failure)

    senders = [TargetSender(journal, target, default_cwd=default_cwd) for target in targets]
    holds: list[RedisHold] = []
    tasks: list[asyncio.Task[None]] = []
    with contextlib.ExitStack() as locks:
        try:
            for sender in senders:
                hold = _redis_hold(journal, sender.name, hold_ttl)
                if hold is None:
                    lock = target_lock(journal, sender.name)
                    if lock is not None:
                        locks.enter_context(lock)
                    tasks.append(asyncio.create_task(sender.run(), name=f"webhook {sender.name}"))
                    tasks[-1].add_done_callback(ended)
                    continue
                if not standby:
                    found = await hold.take()
                    if isinstance(found, Holder):
                        raise StateError(_refusal(sender.name, hold, found))
                holds.append(hold)
                tasks.append(
                    asyncio.create_task(_send_while_held(sender, hold, standby=standby), name=f"webhook {sender.name}")
                )
                tasks[-1].add_done_callback(ended)
            yield senders
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for hold in holds:
                await hold.release_within(RELEASE_TIMEOUT)
