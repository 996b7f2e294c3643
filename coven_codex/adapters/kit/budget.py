"""Budgets: a token bucket per platform method and scope, shared by every lane of an adapter.

A platform documents how often some of its methods may be called (Slack's tiers: so many calls a
minute per method and workspace; ``chat.postMessage``: about one a second per channel; Discord:
50 requests a second per bot). Each documented limit is a :class:`Rate`; :class:`Budgets` holds
one :class:`aiolimiter.AsyncLimiter` (a leaky bucket) per ``(method, scope)``, draining at
:data:`MARGIN` of the documented rate so that the few milliseconds between taking a token here and
the request reaching the platform never tip it over. A call waits for its token; a streamed
reply's edits therefore come as often as the budget allows (the text shown in one edit simply
grows), and the platform's 429s stay for what nobody documented.

Limits a platform announces only in its answers (Discord's per-route buckets, in its
``X-RateLimit-*`` headers) are followed by the platform's library (discord.py), not here.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from aiolimiter import AsyncLimiter

MARGIN = 0.9
"""The share of a documented rate an adapter uses."""


class Scope(enum.StrEnum):
    """What one bucket of a :class:`Rate` covers."""

    APP = "app"
    """Every call the adapter makes (Discord's global limit per bot)."""
    WORKSPACE = "workspace"
    """One workspace (Slack's tiers: per method, per app, per workspace)."""
    CHANNEL = "channel"
    """One channel (Slack's ``chat.postMessage``)."""


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``calls`` calls in ``per`` seconds (a burst of ``calls``, then ``calls / per`` a second), per scope."""

    calls: float
    per: float
    scope: Scope = Scope.WORKSPACE
    source: str = ""
    """Where the platform documents it."""

    def limiter(self) -> AsyncLimiter:
        """A leaky bucket holding at most ``calls`` (at least one), draining at :data:`MARGIN` of the rate."""
        capacity = max(1.0, self.calls * MARGIN)
        return AsyncLimiter(capacity, self.per * capacity / (self.calls * MARGIN))


class Budgets:
    """``rates`` maps a method to its documented :class:`Rate`; other methods are not budgeted."""

    def __init__(self, rates: Mapping[str, Rate]) -> None:
        self.rates = dict(rates)
        self._limiters: dict[tuple[str, str], AsyncLimiter] = {}

    @contextlib.asynccontextmanager
    async def take(self, method: str, workspace: str = "", channel: str = "") -> AsyncIterator[None]:
        """Wait for a token of ``method`` in its scope (the whole app, ``workspace`` or ``channel``), then call."""
        rate = self.rates.get(method)
        if rate is not None:
            scope = {Scope.APP: "", Scope.WORKSPACE: workspace, Scope.CHANNEL: f"{workspace}/{channel}"}[rate.scope]
            key = (method, scope)
            limiter = self._limiters.get(key)
            if limiter is None:
                limiter = self._limiters[key] = rate.limiter()
            await limiter.acquire()
        yield
