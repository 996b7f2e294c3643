"""A local fake of Discord's REST API, built from its published shapes, that records every call.

- ``GET /users/@me`` answers the bot user (discord.py's login).
- ``POST /channels/{id}/messages`` creates a message; with ``enforce_nonce`` a nonce already used
  in that channel within ``nonce_window`` seconds answers the first message, as Discord does.
- ``PATCH``/``DELETE /channels/{id}/messages/{mid}``, ``POST /channels/{id}/typing``.
- ``GET /channels/{id}/messages?limit=N`` answers the newest first, with ``nonce`` on messages
  created within the nonce window only.
- ``PUT /applications/{id}/commands`` registers the slash commands (kept in ``commands``).
- ``POST /interactions/{id}/{token}/callback`` acknowledges an interaction; a deferred one (type 5)
  creates its "thinking" message in the interaction's channel, which
  ``PATCH /webhooks/{app}/{token}/messages/@original`` edits; ``POST /webhooks/{app}/{token}``
  posts a follow-up there.
- ``POST /channels/{id}/messages/{mid}/threads`` starts a thread on a message (its id is the
  message's, as on Discord; a second start answers 400 with code 160004) and dispatches
  ``THREAD_CREATE`` to the connected Gateway clients.
- Rate limits as Discord documents them (https://discord.com/developers/docs/topics/rate-limits):
  every REST answer carries its route's bucket in ``X-RateLimit-Limit``, ``-Remaining``,
  ``-Reset`` (epoch seconds), ``-Reset-After`` (seconds) and ``-Bucket`` (the same hash for every
  top-level resource: a bucket is counted per route and channel, or webhook); a request over its
  bucket, or over the global limit (:data:`GLOBAL_LIMIT` requests a second), is answered 429 with
  ``retry_after`` and ``global`` in its body, ``Retry-After``, ``X-RateLimit-Scope`` (``user``,
  ``global``) and ``X-RateLimit-Global`` on a global one, and counted in ``limited_by_bucket``.
  Discord publishes no per-route numbers (clients must read the headers): ``route_limits`` holds
  the fake's, :data:`OBSERVED_LIMITS` the ones commonly seen (5 messages per 5 s per channel);
  routes not in it get ``default_limit``, generous so that the suite's bursts stay fast.
- ``rate_limit_every=N``: every N-th request is answered 429 with Discord's body
  (``message``, ``retry_after``, ``global``) and headers (``Retry-After``,
  ``X-RateLimit-Limit``/``Remaining``/``Reset-After``/``Bucket``/``Scope``).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.parser
import email.policy
import hashlib
import itertools
import json
import os
import sys
import time
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from bad_day import Faults

DISCORD_EPOCH_MS = 1420070400000
GLOBAL_LIMIT = 50
"""Requests a second Discord allows a bot across all routes (interaction callbacks aside)."""


@dataclass(frozen=True)
class RouteLimit:
    """A route's bucket: ``limit`` requests per ``per`` seconds, for each channel (or webhook) apart."""

    limit: int
    per: float


OBSERVED_LIMITS: dict[str, RouteLimit] = {
    "POST /channels/{cid}/messages": RouteLimit(5, 5.0),
    "PATCH /channels/{cid}/messages/{mid}": RouteLimit(5, 5.0),
    "DELETE /channels/{cid}/messages/{mid}": RouteLimit(5, 5.0),
    "GET /channels/{cid}/messages": RouteLimit(5, 5.0),
    "POST /channels/{cid}/typing": RouteLimit(5, 5.0),
}
"""The per-route limits commonly seen from Discord (it documents the headers, not the numbers)."""


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON answer as Discord gives it: ``Content-Type: application/json`` (no charset), ``Via: 1.1 google``."""
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers={"Content-Type": "application/json", "Via": "1.1 google", **(headers or {})},
    )


GUILD_ID = "3000000000000000001"
CHANNEL_ID = "2000000000000000001"
ROLE_ID = "7700000000000000001"
BOT = {"id": "1000000000000000001", "username": "coven", "discriminator": "0", "avatar": None, "bot": True}


@dataclass
class FakeMessage:
    """A message as the fake keeps it."""

    id: str
    channel_id: str
    content: str
    components: list[Any]
    nonce: str | None
    created: float
    edits: int = 0
    interaction: str = ""
    """The token of the interaction this message answers (a slash command's response), if any."""
    files: list[tuple[str, bytes]] = field(default_factory=list)
    """The attachments the bot uploaded with it (a multipart create): each file's name and bytes."""


@dataclass
class FakeDiscord:
    """The fake's state; :meth:`app` serves it under ``/api/v10``."""

    token: str = "good-token"
    close_code: int = 0
    files: dict[str, bytes] = field(default_factory=dict)
    """What the fake CDN serves at ``/attachments/<name>``."""
    fetched: dict[str, int] = field(default_factory=dict)
    """How many times each CDN file was downloaded."""
    """When set, IDENTIFY is answered by closing the Gateway with this code (4014: disallowed intents)."""
    rate_limit_every: int = 0
    retry_after: float = 0.05
    nonce_window: float = 120.0
    clock: float = 0.0
    """Seconds added to the fake's clock (its snowflakes, message times, the nonce window): time passing."""
    messages: dict[str, FakeMessage] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    typing: list[str] = field(default_factory=list)
    typing_times: list[float] = field(default_factory=list)
    """When each typing request came (the machine's monotonic clock), beside :attr:`typing`."""
    rate_limited: int = 0
    requests: int = 0
    interactions: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    """The application commands as last registered."""
    threads: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Started threads by id, as Discord's channel objects."""
    expired: set[str] = field(default_factory=set)
    """Interaction tokens whose callback answers 404 Unknown interaction (acknowledged too late)."""
    thread_starts: int = 0
    """How many times a thread start was asked for (a refused second start included)."""
    faults: Faults = field(default_factory=Faults)
    """Bad answers (5xx, 400, 403, cut connections, slow answers, per-route 429s), see ``bad_day.py``."""
    route_limits: dict[str, RouteLimit] = field(default_factory=dict)
    """Buckets by route (``"POST /channels/{cid}/messages"``); see the module docstring."""
    default_limit: RouteLimit = field(default_factory=lambda: RouteLimit(50, 1.0))
    """The bucket of a route not in :attr:`route_limits`."""
    global_limit: int = GLOBAL_LIMIT
    limited_by_bucket: int = 0
    """Requests answered 429 because they exceeded a bucket or the global limit."""
    emptied: dict[str, int] = field(default_factory=dict)
    """How many times each route's bucket was used up (a request took its last one): the limit bound."""
    _windows: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    _global_window: tuple[int, float] = (0, 0.0)
    declared: dict[str, int] = field(default_factory=dict)
    """Attachment sizes the fake declares instead of the real ones (a "small" file that is not)."""
    sent: dict[str, int] = field(default_factory=dict)
    """Bytes of each CDN file written before the client stopped reading (or all of it)."""
    _interaction_channels: dict[str, str] = field(default_factory=dict)
    _originals: dict[str, str] = field(default_factory=dict)
    identified: asyncio.Event = field(default_factory=asyncio.Event)
    _counter: itertools.count[int] = field(default_factory=itertools.count)
    _sockets: list[tuple[web.WebSocketResponse, Any]] = field(default_factory=list)
    _seq: int = 0

    def snowflake(self) -> str:
        """A new id in Discord's snowflake format (milliseconds since 2015 << 22, then a counter)."""
        ms = int(self.now() * 1000) - DISCORD_EPOCH_MS
        return str((ms << 22) | (next(self._counter) & 0xFFF))

    def now(self) -> float:
        """The fake's clock: the machine's, moved on by :attr:`clock`."""
        return time.time() + self.clock

    def payload(self, message: FakeMessage) -> dict[str, Any]:
        """The message in Discord's JSON shape."""
        data: dict[str, Any] = {
            "id": message.id,
            "channel_id": message.channel_id,
            "type": 0,
            "content": message.content,
            "author": BOT,
            "attachments": [
                {"id": f"{message.id}{index}", "filename": name, "size": len(data)}
                for index, (name, data) in enumerate(message.files)
            ],
            "embeds": [],
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "pinned": False,
            "tts": False,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(message.created)),
            "edited_timestamp": None,
            "components": message.components,
        }
        if message.nonce is not None and self.now() - message.created < self.nonce_window:
            data["nonce"] = message.nonce
        return data

    def in_channel(self, channel: str) -> list[FakeMessage]:
        """The channel's messages that are not deleted, oldest first."""
        return [m for m in self.messages.values() if m.channel_id == channel and m.id not in self.deleted]

    @web.middleware
    async def _limits(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.startswith("/api/"):  # the Gateway and the CDN have no REST rate limits
            response: web.StreamResponse = await handler(request)
            return response
        self.requests += 1
        body = (await request.read()).decode("utf-8", "replace") if request.can_read_body else ""
        faulty = await self.faults.answer(
            request,
            f"{request.method} {request.path}",
            request.match_info.get("cid", ""),
            body,
            lambda: handler(request),
        )
        if faulty is not None:
            return faulty
        if self.rate_limit_every and self.requests % self.rate_limit_every == 0:
            self.rate_limited += 1
            return _json(
                {"message": "You are being rate limited.", "retry_after": self.retry_after, "global": False},
                status=429,
                headers={
                    "Retry-After": str(self.retry_after),
                    "X-RateLimit-Limit": "5",
                    "X-RateLimit-Remaining": "0",
                    "X-RateLimit-Reset-After": str(self.retry_after),
                    "X-RateLimit-Bucket": "fakebucket",
                    "X-RateLimit-Scope": "user",
                },
            )
        route = request.match_info.route.resource
        key = f"{request.method} {route.canonical.removeprefix('/api/v10') if route is not None else request.path}"
        major = "/".join(request.match_info.get(name, "") for name in ("cid", "app", "iid", "token"))
        refused = self._over_limit(key, major, global_=not key.startswith("POST /interactions/"))
        if refused is not None:
            return refused
        answer: web.StreamResponse = await handler(request)
        answer.headers.update(self._bucket_headers(key, major))
        return answer

    def _limit(self, key: str) -> RouteLimit:
        return self.route_limits.get(key, self.default_limit)

    def _window(self, key: str, major: str) -> tuple[int, float]:
        """The requests counted in ``key``'s bucket for ``major`` and when it resets (monotonic), now."""
        count, reset = self._windows.get((key, major), (0, 0.0))
        now = time.monotonic()
        if now >= reset:
            count, reset = 0, now + self._limit(key).per
        return count, reset

    def _over_limit(self, key: str, major: str, global_: bool) -> web.Response | None:
        """A 429 when this request exceeds its bucket or the global limit; else count it and answer None."""
        now = time.monotonic()
        if global_:
            used, reset = self._global_window
            if now >= reset:
                used, reset = 0, now + 1.0
            if used >= self.global_limit:
                self.limited_by_bucket += 1
                wait = reset - now
                body = {"message": "You are being rate limited.", "retry_after": round(wait, 3), "global": True}
                headers = {"Retry-After": str(max(1, round(wait))), "X-RateLimit-Global": "true"}
                return _json(body, 429, {**headers, "X-RateLimit-Scope": "global"})
        count, window_reset = self._window(key, major)
        if count >= self._limit(key).limit:
            self.limited_by_bucket += 1
            wait = window_reset - now
            self._windows[(key, major)] = (count, window_reset)
            body = {"message": "You are being rate limited.", "retry_after": round(wait, 3), "global": False}
            headers = {"Retry-After": str(max(1, round(wait))), "X-RateLimit-Scope": "user"}
            return _json(body, 429, {**headers, **self._bucket_headers(key, major)})
        if global_:
            self._global_window = (used + 1, reset)
        self._windows[(key, major)] = (count + 1, window_reset)
        if count + 1 == self._limit(key).limit:
            self.emptied[key] = self.emptied.get(key, 0) + 1
        return None

    def _bucket_headers(self, key: str, major: str) -> dict[str, str]:
        """The ``X-RateLimit-*`` headers of ``key``'s bucket for ``major``, as they stand now."""
        limit = self._limit(key)
        count, reset = self._window(key, major)
        after = max(0.0, reset - time.monotonic())
        return {
            "X-RateLimit-Limit": str(limit.limit),
            "X-RateLimit-Remaining": str(max(0, limit.limit - count)),
            "X-RateLimit-Reset": f"{time.time() + after:.3f}",
            "X-RateLimit-Reset-After": f"{after:.3f}",
            "X-RateLimit-Bucket": hashlib.sha256(key.encode()).hexdigest()[:32],
        }

    def app(self) -> web.Application:
        """The aiohttp application serving the fake API under ``/api/v10``."""
        app = web.Application(middlewares=[self._limits])
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_get("/api/v10/gateway/bot", self._gateway_bot)
        app.router.add_get("/api/v10/oauth2/applications/@me", self._application)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{name}", self._cdn)
        app.router.add_post("/api/v10/interactions/{iid}/{token}/callback", self._callback)
        app.router.add_put("/api/v10/applications/{app}/commands", self._register)
        app.router.add_patch("/api/v10/webhooks/{app}/{token}/messages/@original", self._edit_original)
        app.router.add_post("/api/v10/webhooks/{app}/{token}", self._followup)
        app.router.add_post("/api/v10/channels/{cid}/messages/{mid}/threads", self._start_thread)
        app.router.add_post("/api/v10/channels/{cid}/messages", self._create)
        app.router.add_get("/api/v10/channels/{cid}/messages", self._list)
        app.router.add_patch("/api/v10/channels/{cid}/messages/{mid}", self._edit)
        app.router.add_delete("/api/v10/channels/{cid}/messages/{mid}", self._delete)
        app.router.add_post("/api/v10/channels/{cid}/typing", self._typing)
        return app

    async def _me(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        return _json(BOT)

    async def _create(self, request: web.Request) -> web.Response:
        files: list[tuple[str, bytes]] = []
        if request.content_type == "multipart/form-data":  # a message with attachments: payload_json + files[n]
            raw = await request.read()  # (the middleware read it already: parsed from the bytes)
            head = f"Content-Type: {request.headers['Content-Type']}\r\n\r\n".encode()
            form = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
            body = {}
            for part in form.iter_parts():
                name, data = part.get_param("name", header="content-disposition"), part.get_payload(decode=True)
                if name == "payload_json":
                    body = json.loads(data)
                elif isinstance(name, str) and name.startswith("files["):
                    files.append((str(part.get_filename()), bytes(data)))
        else:
            body = await request.json()
        channel = request.match_info["cid"]
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            for message in self.in_channel(channel):
                if message.nonce == nonce and self.now() - message.created < self.nonce_window:
                    return _json(self.payload(message))
        message = self._new_message(
            channel,
            str(body.get("content") or ""),
            None if nonce is None else str(nonce),
            list(body.get("components") or []),
        )
        message.files = files
        return _json(self.payload(message))

    async def _list(self, request: web.Request) -> web.Response:
        limit = min(100, int(request.query.get("limit", "50")))
        after = int(request.query.get("after", "0"))
        later = [m for m in self.in_channel(request.match_info["cid"]) if int(m.id) > after]
        newest_first = list(reversed(later))[:limit]
        return _json([self.payload(m) for m in newest_first])

    async def _edit(self, request: web.Request) -> web.Response:
        message = self.messages.get(request.match_info["mid"])
        if message is None or message.id in self.deleted:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        body = await request.json()
        if "content" in body:
            message.content = str(body["content"] or "")
        if "components" in body:
            message.components = list(body["components"] or [])
        message.edits += 1
        return _json(self.payload(message))

    async def _delete(self, request: web.Request) -> web.Response:
        self.deleted.append(request.match_info["mid"])
        return web.Response(status=204)

    async def _typing(self, request: web.Request) -> web.Response:
        self.typing.append(request.match_info["cid"])
        self.typing_times.append(time.monotonic())
        return web.Response(status=204)

    # The Gateway: HELLO, IDENTIFY -> READY + GUILD_CREATE, heartbeats, then dispatched events.

    async def _application(self, request: web.Request) -> web.Response:
        owner = {"id": "4000000000000000001", "username": "owner", "discriminator": "0", "avatar": None}
        return _json(
            {
                "id": BOT["id"],
                "name": "coven",
                "icon": None,
                "description": "",
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": owner,
                "verify_key": "0" * 64,
                "team": None,
                "flags": 0,
            }
        )

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        url = f"ws://{request.host}/gateway"
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        return _json({"url": url, "shards": 1, "session_start_limit": limit})

    async def _send(self, ws: web.WebSocketResponse, compressor: Any, payload: dict[str, Any]) -> None:
        """One Gateway payload, zlib-stream compressed when the client asked for it."""
        raw = json.dumps(payload).encode()
        if compressor is None:
            await ws.send_str(raw.decode())
        else:
            await ws.send_bytes(compressor.compress(raw) + compressor.flush(zlib.Z_SYNC_FLUSH))

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a dispatch (op 0) event ``event`` to every connected client."""
        self._seq += 1
        for ws, compressor in list(self._sockets):
            if ws.closed:
                continue
            with contextlib.suppress(ConnectionResetError):  # the client died since (kill -9)
                await self._send(ws, compressor, {"op": 0, "t": event, "s": self._seq, "d": data})

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        assert request.query.get("encoding") == "json"
        compressor = zlib.compressobj() if request.query.get("compress") == "zlib-stream" else None
        await self._send(ws, compressor, {"op": 10, "s": None, "t": None, "d": {"heartbeat_interval": 41250}})
        try:
            async for frame in ws:
                payload = json.loads(frame.data)
                if payload["op"] == 1:
                    await self._send(ws, compressor, {"op": 11, "s": None, "t": None, "d": None})
                elif payload["op"] == 2 and self.close_code:
                    await ws.close(code=self.close_code, message=b"Disallowed intent(s).")
                elif payload["op"] == 2:
                    self._sockets.append((ws, compressor))
                    await self.dispatch("READY", self._ready(f"ws://{request.host}/gateway"))
                    await self.dispatch("GUILD_CREATE", self._guild())
                    self.identified.set()
        finally:  # a client gone (closed, or killed) gets no more events
            self._sockets = [(other, c) for other, c in self._sockets if other is not ws]
        return ws

    def _ready(self, url: str) -> dict[str, Any]:
        return {
            "v": 10,
            "user": BOT,
            "guilds": [{"id": GUILD_ID, "unavailable": True}],
            "session_id": "fake-session",
            "resume_gateway_url": url,
            "application": {"id": BOT["id"], "flags": 0},
            "private_channels": [],
        }

    def _guild(self) -> dict[str, Any]:
        everyone = {
            "id": GUILD_ID,
            "name": "@everyone",
            "permissions": "1024",
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        channel = {"id": CHANNEL_ID, "type": 0, "guild_id": GUILD_ID, "name": "general", "position": 0}
        channel["permission_overwrites"] = []
        return {
            "id": GUILD_ID,
            "name": "coven",
            "owner_id": "4000000000000000001",
            "roles": [everyone, {**everyone, "id": ROLE_ID, "name": "codex-users", "position": 1}],
            "channels": [channel],
            "threads": [],
            "members": [],
            "member_count": 2,
            "emojis": [],
            "stickers": [],
            "features": [],
            "unavailable": False,
            "large": False,
            "joined_at": "2026-01-01T00:00:00+00:00",
            "voice_states": [],
            "presences": [],
        }

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        data = self.files.get(name)
        self.fetched[name] = self.fetched.get(name, 0) + 1
        if data is None:
            return web.Response(status=404)
        response = web.StreamResponse(headers={"Content-Type": "image/png"})
        await response.prepare(request)
        self.sent[name] = 0
        try:
            for start in range(0, len(data), 256 * 1024):
                await response.write(data[start : start + 256 * 1024])
                self.sent[name] += len(data[start : start + 256 * 1024])
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client stopped reading (a file past its limit)
        return response

    def attachment(self, base: str, name: str, data: bytes, content_type: str = "image/png") -> dict[str, Any]:
        """An attachment object for a message, served by the fake CDN at ``base``."""
        self.files[name] = data
        self.fetched.setdefault(name, 0)
        url = f"{base}/attachments/{name}"
        return {
            "id": self.snowflake(),
            "filename": name,
            "size": self.declared.get(name, len(data)),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
            "width": 1,
            "height": 1,
        }

    def user_message(
        self,
        user_id: str,
        text: str,
        *,
        roles: tuple[str, ...] = (),
        mention: bool = True,
        attachments: tuple[dict[str, Any], ...] = (),
        channel: str = CHANNEL_ID,
        name: str | None = None,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE payload: ``user_id`` (shown as ``name``) writes ``text`` in ``channel``."""
        author = {
            "id": user_id,
            "username": f"user{user_id[-3:]}",
            "global_name": name,
            "discriminator": "0",
            "avatar": None,
        }
        return {
            "id": self.snowflake(),
            "channel_id": channel,
            "guild_id": GUILD_ID,
            "author": author,
            "member": {
                "roles": list(roles),
                "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
            },
            "content": (f"<@{BOT['id']}> " if mention else "") + text,
            "timestamp": "2026-11-23T12:00:00+00:00",
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [BOT] if mention else [],
            "mention_roles": [],
            "attachments": list(attachments),
            "embeds": [],
            "pinned": False,
            "type": 0,
        }

    def button_press(self, user_id: str, message_id: str, custom_id: str) -> dict[str, Any]:
        """An INTERACTION_CREATE payload: ``user_id`` presses button ``custom_id`` under ``message_id``."""
        message = self.payload(self.messages[message_id])
        return {
            "id": self.snowflake(),
            "application_id": BOT["id"],
            "type": 3,
            "data": {"custom_id": custom_id, "component_type": 2},
            "guild_id": GUILD_ID,
            "channel_id": CHANNEL_ID,
            "channel": {"id": CHANNEL_ID, "type": 0, "guild_id": GUILD_ID, "name": "general", "position": 0},
            "member": {
                "user": {"id": user_id, "username": "presser", "discriminator": "0", "avatar": None},
                "roles": [],
                "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": "1024",
            },
            "token": "interaction-token",
            "version": 1,
            "message": message,
            "app_permissions": "1024",
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {},
            "context": 0,
            "attachment_size_limit": 10485760,
        }

    async def _callback(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.interactions.append(body)
        token = request.match_info["token"]
        if token in self.expired:
            return _json({"message": "Unknown interaction", "code": 10062}, status=404)
        interaction: dict[str, Any] = {"id": request.match_info["iid"], "type": 3, "response_message_loading": False}
        resource: dict[str, Any] = {"type": body["type"]}
        if body["type"] == 5:  # DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE: the "thinking" message
            message = self._new_message(self._interaction_channels[token], "", None, interaction=token)
            self._originals[token] = message.id
            interaction.update(type=2, response_message_loading=True, response_message_id=message.id)
            resource["message"] = self.payload(message)
        if request.query.get("with_response", "").lower() not in ("true", "1"):
            return web.Response(status=204)
        return _json({"interaction": interaction, "resource": resource})

    def _new_message(
        self, channel: str, content: str, nonce: str | None, components: list[Any] | None = None, interaction: str = ""
    ) -> FakeMessage:
        message = FakeMessage(
            id=self.snowflake(),
            channel_id=channel,
            content=content,
            components=components or [],
            nonce=nonce,
            created=self.now(),
            interaction=interaction,
        )
        self.messages[message.id] = message
        return message

    async def _register(self, request: web.Request) -> web.Response:
        self.commands = list(await request.json())
        answer = [
            {
                "id": self.snowflake(),
                "application_id": request.match_info["app"],
                "version": self.snowflake(),
                "type": command.get("type", 1),
                "name": command["name"],
                "description": command.get("description", ""),
                "options": command.get("options", []),
                "default_member_permissions": command.get("default_member_permissions"),
                "nsfw": command.get("nsfw", False),
                "contexts": command.get("contexts"),
                "integration_types": command.get("integration_types", [0]),
            }
            for command in self.commands
        ]
        return _json(answer)

    async def _edit_original(self, request: web.Request) -> web.Response:
        original = self._originals.get(request.match_info["token"])
        if original is None:
            return _json({"message": "Unknown Webhook", "code": 10015}, status=404)
        message = self.messages[original]
        body = await request.json()
        message.content = str(body.get("content") or "")
        message.edits += 1
        return _json(self.payload(message))

    async def _followup(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        channel = self._interaction_channels.get(token)
        if channel is None:
            return _json({"message": "Unknown Webhook", "code": 10015}, status=404)
        body = await request.json()
        message = self._new_message(channel, str(body.get("content") or ""), None, interaction=token)
        return _json(self.payload(message))

    async def _start_thread(self, request: web.Request) -> web.Response:
        channel, message_id = request.match_info["cid"], request.match_info["mid"]
        self.thread_starts += 1
        if message_id in self.threads:
            return _json({"message": "A thread has already been created for this message", "code": 160004}, status=400)
        body = await request.json()
        thread = {
            "id": message_id,
            "type": 11,
            "guild_id": GUILD_ID,
            "parent_id": channel,
            "owner_id": BOT["id"],
            "name": str(body["name"]),
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": int(body.get("auto_archive_duration") or 1440),
                "archive_timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
                "locked": False,
            },
        }
        self.threads[message_id] = thread
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return _json(thread)

    def slash_command(
        self,
        user_id: str,
        name: str,
        options: dict[str, str | int] | None = None,
        *,
        roles: tuple[str, ...] = (),
        channel: str = CHANNEL_ID,
        files: dict[str, dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload (type 2): ``user_id`` runs ``/name`` in ``channel`` (a thread started too).

        ``files`` maps attachment options to attachment objects (:meth:`attachment`), sent as
        Discord does: the option's value is the attachment's id, the object is in ``resolved``.
        """
        registered = {command["name"] for command in self.commands}
        assert name in registered, f"/{name} was not registered"
        interaction_id = self.snowflake()
        token = f"interaction-token-{interaction_id}"
        self._interaction_channels[token] = channel
        where = self.threads.get(channel) or {
            "id": CHANNEL_ID,
            "type": 0,
            "guild_id": GUILD_ID,
            "name": "general",
            "position": 0,
        }
        data: dict[str, Any] = {"id": self.snowflake(), "name": name, "type": 1}
        data["options"] = [  # a string option (3), an integer one (4)
            {"name": key, "type": 4 if isinstance(value, int) else 3, "value": value}
            for key, value in (options or {}).items()
        ]
        for key, attachment in (files or {}).items():
            data["options"].append({"name": key, "type": 11, "value": attachment["id"]})
            data.setdefault("resolved", {}).setdefault("attachments", {})[attachment["id"]] = attachment
        if not data["options"]:
            del data["options"]
        return {
            "id": interaction_id,
            "application_id": BOT["id"],
            "type": 2,
            "data": data,
            "guild_id": GUILD_ID,
            "channel_id": channel,
            "channel": where,
            "member": {
                "user": {"id": user_id, "username": f"user{user_id[-3:]}", "discriminator": "0", "avatar": None},
                "roles": list(roles),
                "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": "1024",
            },
            "token": token,
            "version": 1,
            "app_permissions": "1024",
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": GUILD_ID},
            "context": 0,
            "attachment_size_limit": 10485760,
        }


TEST_TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAwMQ.GabcDe.abcdefghijklmnopqrstuvwxyz012345"
"""A token of Discord's shape, which the fake accepts when constructed with it."""


def write_config(journal: Path, **section: object) -> Path:
    """A config file (coven.toml's shape) beside ``journal``, naming it; ``[adapters.discord]`` holds ``section``.

    ``render`` is ``verbose`` (every step a message) unless ``section`` says otherwise: most tests look at
    single messages; the progress card's tests ask for ``quiet``, the adapter's default.
    """
    section = {"render": "verbose", **section}
    lines = [f"journal = {json.dumps(str(journal))}", "", "[adapters.discord]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in section.items()]
    config = journal.parent / "discord.toml"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return config


async def start_adapter(
    journal: Path, port: int, *, env: dict[str, str] | None = None, stderr: int | None = None, **section: object
) -> asyncio.subprocess.Process:
    """``coven-codex discord`` as a process against the fake at ``port``; ``section`` is its configuration."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coven_codex.cli.main",
        "discord",
        "--config",
        str(write_config(journal, **section)),
        "--api-base",
        f"http://127.0.0.1:{port}/api/v10",
        "--gateway-url",
        f"ws://127.0.0.1:{port}/gateway",
        env={**os.environ, "DISCORD_BOT_TOKEN": TEST_TOKEN, **(env or {})},
        stderr=stderr,
    )


async def stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM the adapter and wait for it to end (at most 20 s)."""
    if process.returncode is None:
        process.terminate()
    async with asyncio.timeout(20):
        await process.wait()


@contextlib.asynccontextmanager
async def serve(state: FakeDiscord) -> AsyncIterator[int]:
    """Serve ``state`` on a free local port for the block; yields the port."""
    runner = web.AppRunner(state.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        state.faults.release()
        await runner.cleanup()


def journal_entries(journal: Path, kind: str) -> list[dict[str, Any]]:
    """The journal's entries of ``kind``, read as JSON lines."""
    if not journal.exists():
        return []
    entries = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    return [e for e in entries if e.get("kind") == kind]


async def until(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    """Wait until ``condition()`` holds, at most ``seconds``."""
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.05)
