"""Webhook mode: Telegram posts each update to the adapter's HTTP endpoint instead of being polled.

:class:`WebhookReceiver` listens (aiohttp) on ``webhook_host:webhook_port`` at the path of
``webhook_url`` (a reverse proxy terminates HTTPS in front of it; Telegram posts only to HTTPS
URLs). Every request must carry the secret in ``X-Telegram-Bot-Api-Secret-Token`` (set with
``setWebhook``'s ``secret_token``), compared in constant time; anything else is answered 403 and
never read further. An update is answered 200 only once the kit has handled it: Telegram
delivers an update again until it gets a 2xx, so a crash meanwhile loses nothing (the kit's
ledger makes a message delivered twice one thought). An update not handled within
:data:`HANDLE_TIMEOUT` seconds is answered 503, and Telegram tries again later.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import telegram
from aiohttp import web
from telegram import Update

from coven_codex.adapters.kit.render import clip
from coven_codex.support.secret import Secret

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
HANDLE_TIMEOUT = 50.0
"""Seconds an update waits to be handled before it is answered 503 (Telegram waits about a minute)."""
QUEUE_SIZE = 100
"""Updates received and not yet handled, at most (Telegram's ``max_connections`` defaults to 40)."""
MAX_BODY = 1024 * 1024
"""The largest update body read."""


class WebhookReceiver:
    """The HTTP endpoint Telegram posts updates to (see the module docstring)."""

    def __init__(self, bot: telegram.Bot, secret: Secret, url: str, host: str, port: int) -> None:
        self.bot = bot
        self.secret = secret
        self.url = url
        self.path = urlsplit(url).path or "/"
        self.host = host
        self.port = port
        self._queue: asyncio.Queue[tuple[Update, asyncio.Future[None]]] = asyncio.Queue(QUEUE_SIZE)
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen; :class:`OSError` when the address cannot be bound."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(self.path, self._receive)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()

    async def close(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _receive(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self.secret.reveal().encode()):
            log.warning("telegram: a webhook request without the right secret was refused (from %s)", request.remote)
            return web.Response(status=403)
        try:
            data = await request.json()
            update = Update.de_json(data, self.bot)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("telegram: a webhook request that is not an update was refused: %s", clip(str(exc), 200))
            return web.Response(status=400)
        if update is None:
            return web.Response(status=400)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(HANDLE_TIMEOUT):
                await self._queue.put((update, done))
                await asyncio.shield(done)
        except TimeoutError:
            return web.Response(status=503)  # Telegram delivers it again
        return web.Response(status=200)

    async def updates(self) -> AsyncIterator[tuple[Update, asyncio.Future[None]]]:
        """The updates received, each with the future to set once it is handled."""
        while True:
            yield await self._queue.get()
