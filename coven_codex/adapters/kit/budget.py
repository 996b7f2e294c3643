"""Budgets: a token bucket per platform method and scope, shared by every lane of an adapter.

A platform documents how often each method may be called (Slack's tiers: so many calls a minute
per method and workspace). :class:`Budgets` holds one :class:`aiolimiter.AsyncLimiter` (a leaky
bucket) per ``(method, scope)``, set a little under the documented rate (:data:`MARGIN`) so that
the few milliseconds between taking a token here and the request reaching the platform never
tip it over. A call waits for its token; a streamed reply's edits therefore come as often as the
budget allows (the text shown in one edit simply grows), and the platform's 429s stay for what
nobody documented.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

from aiolimiter import AsyncLimiter

MARGIN = 0.9
"""The share of a documented rate an adapter uses."""


class Budgets:
    """``rates`` maps a method to its documented calls per minute; other methods are not budgeted."""

    def __init__(self, rates: Mapping[str, float]) -> None:
        self.rates = dict(rates)
        self._limiters: dict[tuple[str, str], AsyncLimiter] = {}

    @contextlib.asynccontextmanager
    async def take(self, method: str, scope: str = "") -> AsyncIterator[None]:
        """Wait for a token of ``method`` in ``scope`` (a workspace, a channel), then make the call."""
        rate = self.rates.get(method)
        if rate is not None:
            key = (method, scope)
            limiter = self._limiters.get(key)
            if limiter is None:
                per_minute = max(1.0, rate * MARGIN)
                limiter = self._limiters[key] = AsyncLimiter(per_minute, 60.0)
            await limiter.acquire()
        yield
