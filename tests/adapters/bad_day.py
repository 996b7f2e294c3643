"""Bad answers the wire-level fakes (``slack_fake.py``, ``discord_fake.py``) give, as platforms do on a bad day.

A :class:`Fault` matches requests by route (Slack: the method name; Discord: ``"POST /api/v10/..."``),
by channel and by a piece of the request's body, and answers them, ``times`` times, with a status
and a body (JSON or an HTML error page), after a delay, or by cutting the connection before the
request is handled or after it was (the platform did it; the bot never hears so).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

HTML_502 = "<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"


@dataclass
class Fault:
    """One bad answer to the requests it matches (see the module docstring)."""

    status: int = 500
    body: Any = field(default_factory=lambda: {"message": "Internal Server Error", "code": 0})
    """A dict or list is sent as JSON; a string as ``text/html``."""
    headers: dict[str, str] = field(default_factory=dict)
    route: str = ""
    """A substring of the route; empty: every route."""
    channel: str = ""
    """Only requests for this channel; empty: any."""
    text: str = ""
    """Only requests whose body contains this; empty: any."""
    times: int | None = 1
    """How many requests it answers; None: until removed."""
    cut: Literal["", "before", "after"] = ""
    """Cut the connection instead of answering: before the request is handled, or after."""
    delay: float = 0.0
    """Seconds to wait before answering (a slow answer)."""
    hits: int = 0

    def matches(self, route: str, channel: str, body: str) -> bool:
        """Whether this fault answers a request of ``route`` for ``channel`` carrying ``body``."""
        if self.times is not None and self.hits >= self.times:
            return False
        return (
            self.route in route
            and (not self.channel or self.channel == channel)
            and (not self.text or self.text in body)
        )

    def response(self) -> web.Response:
        """The answer it gives (when it does not cut the connection)."""
        if isinstance(self.body, str):
            return web.Response(status=self.status, text=self.body, content_type="text/html", headers=self.headers)
        return web.Response(
            status=self.status,
            body=json.dumps(self.body).encode(),
            headers={"Content-Type": "application/json", **self.headers},
        )


@dataclass
class Faults:
    """The faults a fake applies, in order; the first that matches answers."""

    active: list[Fault] = field(default_factory=list)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        """The fake stops serving: answers still waiting out a fault's ``delay`` are given now. aiohttp waits
        (up to a minute) for every handler of a server it stops, and a handler does not end when its client
        went away (a bot killed while it waited for a slow answer)."""
        self._stopping.set()
        self._stopping = asyncio.Event()  # the fake may serve again (an adapter restarted)

    def add(self, *faults: Fault) -> None:
        """Apply ``faults`` from now on."""
        self.active.extend(faults)

    def clear(self) -> None:
        """Answer every request normally again."""
        self.active.clear()

    async def answer(
        self,
        request: web.Request,
        route: str,
        channel: str,
        body: str,
        handle: Callable[[], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse | None:
        """The faulty answer to ``request``, or None when no fault matches (answer it normally)."""
        fault = next((f for f in self.active if f.matches(route, channel, body)), None)
        if fault is None:
            return None
        fault.hits += 1
        if fault.delay:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), fault.delay)
        if fault.cut:
            if fault.cut == "after":
                await handle()
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never reaches the client: its connection is gone
        return fault.response()
