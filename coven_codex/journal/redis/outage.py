"""Riding out a Redis that is down or restarting: retry with backoff, say so once.

Every operation of a :class:`~coven_codex.journal.redis.journal.RedisJournal` goes through
:meth:`Reachability.call`. While Redis cannot be reached (refused, reset, timed out, loading
its data after a restart, a read-only replica during a failover), the operation is tried
again after :func:`~coven_codex.support.backoff.backoff`; the first failure of an outage is
logged once for the whole journal (every tail and append share it), and so is its end. An
outage longer than ``limit`` seconds ends the operation with :class:`JournalUnavailable`.

Two failures are not waited for, because waiting does not fix them: Redis refusing our
credentials (a wrong or missing password: :class:`RedisMisconfigured` at once), and a server that
answers the TLS handshake of a ``rediss://`` name in plain Redis (found by ``diagnose`` when an
outage begins). Once a journal is found lost (:class:`JournalLost`, Redis came back without its
data), every later call raises that too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from redis.exceptions import AuthenticationError, BusyLoadingError, ReadOnlyError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coven_codex.journal.redis.errors import JournalLost, JournalUnavailable, RedisMisconfigured
from coven_codex.support.backoff import backoff

log = logging.getLogger("coven_codex.journal.redis")

T = TypeVar("T")

RETRY_BASE: Final = 0.1
"""The first retry waits this long (seconds); later ones double, up to ``MAX_RETRY``."""
MAX_RETRY: Final = 2.0
"""No retry waits longer: a restarted Redis is found within this."""
DEFAULT_OUTAGE_LIMIT: Final = 600.0
"""How long an operation waits for Redis to come back before it fails (seconds)."""

TRANSIENT: Final = (RedisConnectionError, RedisTimeoutError, BusyLoadingError, ReadOnlyError, TryAgainError, OSError)
"""Failures that mean "Redis is not reachable right now" rather than "this request is wrong"."""


def refused_credentials(where: str, exc: BaseException, *, password_given: bool) -> RedisMisconfigured:
    """The error for Redis refusing our credentials (``NOAUTH``, ``WRONGPASS``), saying what to fix."""
    what = "the password in the journal's name is wrong" if password_given else "the journal's name has no password"
    return RedisMisconfigured(
        f"the journal's Redis at {where} refused the connection ({_short(exc)}): {what}. Put the right password"
        " in the journal's name (redis://:PASSWORD@HOST:PORT/DB?key=NAME, or redis://USER:PASSWORD@... for an"
        " ACL user), then start again"
    )


class Reachability:
    """Whether the journal's Redis answers, shared by every operation on one journal."""

    def __init__(
        self,
        where: str,
        limit: float = DEFAULT_OUTAGE_LIMIT,
        *,
        drop_idle: Callable[[], Awaitable[None]] | None = None,
        diagnose: Callable[[BaseException], Awaitable[RedisMisconfigured | None]] | None = None,
    ) -> None:
        self.where = where
        self.limit = limit
        self._drop_idle = drop_idle
        """Closes the idle pooled connections (after a Redis restart every one of them is dead)."""
        self._diagnose = diagnose
        """When an outage begins: whether it is a misconfiguration that waiting would not fix."""
        self.password_given = True
        """Whether the journal's name carries a password (for the message when Redis refuses it)."""
        self.lost: JournalLost | None = None
        """Set once the journal was found lost: every later call raises it."""
        self.down_since: float | None = None
        self.outages = 0
        """How many outages began (each was logged once)."""

    def _down(self, exc: BaseException) -> float:
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
            self.outages += 1
            log.warning(
                "the journal's Redis at %s cannot be reached (%s); waiting for it (retrying with backoff, for up"
                " to %.0f s): nothing is lost, thoughts wait",
                self.where,
                _short(exc),
                self.limit,
            )
        return now - self.down_since

    def _up(self) -> None:
        if self.down_since is not None:
            log.warning(
                "the journal's Redis at %s is reachable again after %.1f s; continuing",
                self.where,
                time.monotonic() - self.down_since,
            )
            self.down_since = None

    async def call(self, operation: Callable[[], Awaitable[T]]) -> T:
        """``operation()``, tried again while Redis is unreachable (at most ``limit`` seconds).

        The first failure while Redis was thought up is tried again at once, on a fresh
        connection, before it counts as an outage: after a Redis restart every connection kept
        open fails once, which is no news once Redis answers again.
        """
        failures = 0
        while True:
            if self.lost is not None:
                raise self.lost
            try:
                result = await _cancellable(operation)
            except JournalLost as exc:
                self.lost = exc
                raise
            except AuthenticationError as exc:
                raise refused_credentials(self.where, exc, password_given=self.password_given) from None
            except TRANSIENT as exc:
                failures += 1
                if self._drop_idle is not None:
                    with contextlib.suppress(Exception):
                        await self._drop_idle()
                if failures == 1 and self.down_since is None:
                    continue
                if self.down_since is None and self._diagnose is not None:
                    wrong = await self._diagnose(exc)
                    if wrong is not None:
                        raise wrong from None
                waited = self._down(exc)
                if waited >= self.limit:
                    raise JournalUnavailable(
                        # the limit, not the wait measured: a connect attempt that was slow to fail can take
                        # the wait past it, and the operator set the limit, not the wait
                        f"the journal's Redis at {self.where} could not be reached for {self.limit:g} s"
                        f" ({_short(exc)}); start Redis (or fix the network to it), then start again:"
                        " nothing written before is lost"
                    ) from None
                await asyncio.sleep(min(backoff(RETRY_BASE, failures), MAX_RETRY, self.limit - waited))
                continue
            self._up()
            return result


async def _cancellable(operation: Callable[[], Awaitable[T]]) -> T:
    """``await operation()`` in a task of its own, so that cancelling the caller always cancels it.

    redis-py 8 can lose a cancellation that arrives while a reply is being read (the reply came,
    the task had not run yet): the command then carries on, e.g. a tail's ``XREAD BLOCK`` keeps
    blocking. Here the caller waits on the task, not inside redis-py, so its cancellation is
    never lost; the task is cancelled too and its connection dropped with it.
    """
    task = asyncio.ensure_future(operation())
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_retrieve)
        raise
    return task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Consume the outcome of an abandoned task (no "exception was never retrieved")."""
    if not task.cancelled():
        task.exception()


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
