"""Discord's REST side of the adapter, on discord.py's own :class:`discord.http.HTTPClient`.

Posting is exactly once with Discord's message ``nonce`` and ``enforce_nonce``: the kit's ledger
key, hashed to Discord's 25-character nonce limit, goes with every post, and Discord answers a
repeated nonce (within a few minutes of the first post) with the message it already created
instead of a second one. :meth:`DiscordRest.find` searches the channel's most recent messages for
that nonce (Discord returns ``nonce`` only on recently created messages); past that window,
:meth:`DiscordRest.find_by_content` matches the bot's later messages by a digest of the text.

Every request takes a token of Discord's documented global limit first (:data:`RATES`, the kit's
:class:`~coven_codex.adapters.kit.budget.Budgets`); each route's own bucket, which Discord
announces only in its answers' ``X-RateLimit-*`` headers, is followed by discord.py's buckets.
A 429 all the same is either waited out by discord.py itself (short waits) or, when the wait is longer than
``max_wait`` (discord.py's floor is 30 s), raised as the kit's
:class:`~coven_codex.adapters.kit.platform.RateLimited`, so the runner waits and tries again:
nothing is dropped. Every other answer is mapped onto the kit's classification
(:func:`classify`): a 5xx past discord.py's own retries and any network failure are
:class:`~coven_codex.adapters.kit.platform.Unavailable`; 401 is fatal; 403 and an unknown channel
refuse the channel; 400 (Invalid Form Body …) and an unknown message refuse that message.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl

from coven_codex.adapters.kit.budget import Budgets, Rate, Scope
from coven_codex.adapters.kit.ledger import content_digest
from coven_codex.adapters.kit.platform import (
    Address,
    Outgoing,
    PlatformError,
    RateLimited,
    Refusal,
    Unavailable,
    classify_http,
)
from coven_codex.adapters.kit.render import clip
from coven_codex.support.secret import Secret

MESSAGE_LIMIT = 2000
"""Discord's most characters in one message's ``content``."""
NONCE_LENGTH = 25
"""Discord accepts a nonce of at most 25 characters."""
FIND_WINDOW = 50
"""How many of a channel's most recent messages :meth:`DiscordRest.find` searches for a nonce."""
DISCORD_EPOCH_MS = 1420070400000
"""Discord's snowflakes count milliseconds from here (2015-01-01)."""
CLOCK_SKEW_MS = 10_000
"""How far this machine's clock may be ahead of Discord's, in milliseconds, when bounding a search by time."""
CONTENT_WINDOW = 100
"""How many of the bot's later messages :meth:`DiscordRest.find_by_content` reads (Discord's most per request)."""

RATE_LIMITS_DOC = "https://discord.com/developers/docs/topics/rate-limits"
REQUEST = "request"
"""The budget every REST request of the adapter takes (Discord's global limit counts them all)."""
RATES: dict[str, Rate] = {REQUEST: Rate(50, 1.0, Scope.APP, f"{RATE_LIMITS_DOC}#global-rate-limit")}
"""Discord's documented static limit: 50 requests a second per bot. Its per-route limits are not
published: each answer announces its bucket in ``X-RateLimit-*`` headers, which discord.py's own
buckets follow (a request waits while its bucket is empty)."""

UNKNOWN_CHANNEL = 10003
UNKNOWN_MESSAGE = 10008
MISSING_ACCESS = 50001
MISSING_PERMISSIONS = 50013
CHANNEL_HINT = "; give the bot View Channel, Send Messages and Read Message History there (see docs/adapters.md)"


def classify(exc: discord.HTTPException) -> Exception:
    """The kit's exception for a refusal or failure discord.py raised (its HTTP status and Discord's code)."""
    detail = f"Discord answered {exc.status} ({exc.code}): {clip(exc.text or 'no text', 200)}"
    if isinstance(exc, discord.DiscordServerError) or exc.status >= 500:
        return Unavailable(detail)
    if exc.code == UNKNOWN_MESSAGE:
        return PlatformError(detail, Refusal.ENTRY)  # an edit of a message someone deleted
    if exc.code in (UNKNOWN_CHANNEL, MISSING_ACCESS, MISSING_PERMISSIONS) or exc.status == 403:
        return PlatformError(detail + CHANNEL_HINT, Refusal.CHANNEL)
    return classify_http(exc.status, detail)


def nonce_for(key: str) -> str:
    """Discord's nonce for the kit's ledger ``key``: deterministic and at most 25 characters."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:NONCE_LENGTH]


def set_api_base(base: str) -> None:
    """Point discord.py's REST calls at ``base`` (``https://discord.com/api/v10`` by default).

    Used to run against a local fake of Discord's API; the adapter is a process of its own, so
    the class-wide setting is its alone.
    """
    discord.http.Route.BASE = base.rstrip("/")


def set_gateway_url(url: str) -> None:
    """Point discord.py's Gateway connection at ``url`` (``wss://gateway.discord.gg/`` by default).

    discord.py connects an unsharded client to this class-wide URL (not to ``GET /gateway/bot``).
    """
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)


def _channel(address: Address) -> str:
    """Discord threads are channels of their own: post into the thread when there is one."""
    return address.thread or address.channel


def _view(message: Outgoing) -> discord.ui.View | None:
    """The buttons of ``message`` as a :class:`discord.ui.View`; a button's ``custom_id`` is its action."""
    if not message.buttons:
        return None
    view = discord.ui.View(timeout=None)
    for button in message.buttons:
        style = discord.ButtonStyle.danger if button.action.startswith("deny") else discord.ButtonStyle.primary
        view.add_item(
            discord.ui.Button(
                label=button.label[:80], custom_id=button.action[:100], style=style, disabled=button.disabled
            )
        )
    return view


class DiscordRest:
    """Post, edit, delete, typing and find on Discord, through discord.py's HTTP client."""

    def __init__(self, token: Secret, *, max_wait: float = 30.0) -> None:
        self._token = token
        self._max_wait = max_wait
        self.budgets = Budgets(RATES)
        self._http: discord.http.HTTPClient | None = None
        self._me = ""

    async def start(self) -> str:
        """Log in with the bot token; return the bot's user id.

        Raises :class:`PlatformError` when Discord refuses the token.
        """
        http = discord.http.HTTPClient(asyncio.get_running_loop(), max_ratelimit_timeout=self._max_wait)
        try:
            me = await http.static_login(self._token.reveal())
        except discord.LoginFailure as exc:
            await http.close()
            raise PlatformError(
                "Discord refused the bot token: check the token in the [adapters.discord] section "
                "(Developer Portal > your application > Bot > Reset Token)"
            ) from exc
        self._http = http
        self._me = str(me["id"])
        return self._me

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _client(self) -> discord.http.HTTPClient:
        if self._http is None:
            raise RuntimeError("DiscordRest.start() has not been called")
        return self._http

    async def _call(self, request: Callable[[], Awaitable[Any]]) -> Any:
        """Make a discord.py request within Discord's global limit, turning its failures into the kit's exceptions."""
        try:
            async with self.budgets.take(REQUEST):
                return await request()
        except discord.RateLimited as exc:
            raise RateLimited(exc.retry_after) from exc
        except discord.HTTPException as exc:
            raise classify(exc) from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise Unavailable(f"Discord could not be reached ({type(exc).__name__})") from exc

    async def post(
        self, address: Address, message: Outgoing, key: str | None, file: tuple[str, bytes] | None = None
    ) -> str:
        """Post ``message``; with a ``key``, exactly once through ``nonce`` + ``enforce_nonce``. With
        ``file`` (its name and bytes: files out) the message carries it as an attachment (multipart)."""
        attached: dict[str, Any] = {} if file is None else {"file": discord.File(io.BytesIO(file[1]), filename=file[0])}
        params = discord.http.handle_message_parameters(
            content=message.text,
            nonce=None if key is None else nonce_for(key),
            view=_view(message),
            allowed_mentions=discord.AllowedMentions.none(),
            **attached,
        )
        with params:
            data = await self._call(lambda: self._client().send_message(_channel(address), params=params))
        return str(data["id"])

    async def edit(self, address: Address, message_id: str, message: Outgoing) -> None:
        """Replace the text and buttons of message ``message_id``."""
        params = discord.http.handle_message_parameters(
            content=message.text,
            view=_view(message),  # None clears the buttons
            allowed_mentions=discord.AllowedMentions.none(),
        )
        with params:
            await self._call(lambda: self._client().edit_message(_channel(address), message_id, params=params))

    async def delete(self, address: Address, message_id: str) -> None:
        """Delete message ``message_id``."""
        await self._call(lambda: self._client().delete_message(_channel(address), message_id))

    async def typing(self, address: Address, active: bool) -> None:
        """Trigger Discord's typing indicator (it lasts about ten seconds; there is no stop call)."""
        if active:
            await self._call(lambda: self._client().send_typing(_channel(address)))

    async def find(self, address: Address, key: str) -> str | None:
        """The id of a recent message posted with ``key``'s nonce, or None."""
        nonce = nonce_for(key)
        messages = await self._call(lambda: self._client().logs_from(_channel(address), FIND_WINDOW))
        for data in messages:
            if str(data.get("nonce", "")) == nonce:
                return str(data["id"])
        return None

    async def find_by_content(self, address: Address, since: float, digest: str) -> list[str]:
        """The bot's messages created after ``since`` (a snowflake bound) whose content has ``digest``, oldest first.

        How a post is found once Discord no longer returns its nonce (a restart minutes after a
        crash during the post).
        """
        bound = max(0, int(since * 1000) - DISCORD_EPOCH_MS - CLOCK_SKEW_MS) << 22
        messages = await self._call(lambda: self._client().logs_from(_channel(address), CONTENT_WINDOW, after=bound))
        mine = [
            data
            for data in messages
            if str((data.get("author") or {}).get("id", "")) == self._me
            and content_digest(str(data.get("content") or "")) == digest
        ]
        return [str(data["id"]) for data in sorted(mine, key=lambda data: int(data["id"]))]
