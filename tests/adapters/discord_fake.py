"""A local fake of Discord's REST API, built from its published shapes, that records every call.

- ``GET /users/@me`` answers the bot user (discord.py's login).
- ``POST /channels/{id}/messages`` creates a message; with ``enforce_nonce`` a nonce already used
  in that channel within ``nonce_window`` seconds answers the first message, as Discord does.
- ``PATCH``/``DELETE /channels/{id}/messages/{mid}``, ``POST /channels/{id}/typing``.
- ``GET /channels/{id}/messages?limit=N`` answers the newest first, with ``nonce`` on messages
  created within the nonce window only.
- ``rate_limit_every=N``: every N-th request is answered 429 with Discord's body
  (``message``, ``retry_after``, ``global``) and headers (``Retry-After``,
  ``X-RateLimit-Limit``/``Remaining``/``Reset-After``/``Bucket``/``Scope``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

DISCORD_EPOCH_MS = 1420070400000


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


@dataclass
class FakeDiscord:
    """The fake's state; :meth:`app` serves it under ``/api/v10``."""

    token: str = "good-token"
    close_code: int = 0
    files: dict[str, bytes] = field(default_factory=dict)
    """What the fake CDN serves at ``/attachments/<name>``."""
    """When set, IDENTIFY is answered by closing the Gateway with this code (4014: disallowed intents)."""
    rate_limit_every: int = 0
    retry_after: float = 0.05
    nonce_window: float = 120.0
    messages: dict[str, FakeMessage] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    typing: list[str] = field(default_factory=list)
    rate_limited: int = 0
    requests: int = 0
    interactions: list[dict[str, Any]] = field(default_factory=list)
    identified: asyncio.Event = field(default_factory=asyncio.Event)
    _counter: itertools.count[int] = field(default_factory=itertools.count)
    _sockets: list[tuple[web.WebSocketResponse, Any]] = field(default_factory=list)
    _seq: int = 0

    def snowflake(self) -> str:
        """A new id in Discord's snowflake format (milliseconds since 2015 << 22, then a counter)."""
        ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
        return str((ms << 22) | (next(self._counter) & 0xFFF))

    def payload(self, message: FakeMessage) -> dict[str, Any]:
        """The message in Discord's JSON shape."""
        data: dict[str, Any] = {
            "id": message.id,
            "channel_id": message.channel_id,
            "type": 0,
            "content": message.content,
            "author": BOT,
            "attachments": [],
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
        if message.nonce is not None and time.time() - message.created < self.nonce_window:
            data["nonce"] = message.nonce
        return data

    def in_channel(self, channel: str) -> list[FakeMessage]:
        """The channel's messages that are not deleted, oldest first."""
        return [m for m in self.messages.values() if m.channel_id == channel and m.id not in self.deleted]

    @web.middleware
    async def _limits(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests += 1
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
        response: web.StreamResponse = await handler(request)
        return response

    def app(self) -> web.Application:
        """The aiohttp application serving the fake API under ``/api/v10``."""
        app = web.Application(middlewares=[self._limits])
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_get("/api/v10/gateway/bot", self._gateway_bot)
        app.router.add_get("/api/v10/oauth2/applications/@me", self._application)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{name}", self._cdn)
        app.router.add_post("/api/v10/interactions/{iid}/{token}/callback", self._callback)
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
        body = await request.json()
        channel = request.match_info["cid"]
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            for message in self.in_channel(channel):
                if message.nonce == nonce and time.time() - message.created < self.nonce_window:
                    return _json(self.payload(message))
        message = FakeMessage(
            id=self.snowflake(),
            channel_id=channel,
            content=str(body.get("content") or ""),
            components=list(body.get("components") or []),
            nonce=None if nonce is None else str(nonce),
            created=time.time(),
        )
        self.messages[message.id] = message
        return _json(self.payload(message))

    async def _list(self, request: web.Request) -> web.Response:
        limit = min(100, int(request.query.get("limit", "50")))
        newest_first = list(reversed(self.in_channel(request.match_info["cid"])))[:limit]
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
            await self._send(ws, compressor, {"op": 0, "t": event, "s": self._seq, "d": data})

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        assert request.query.get("encoding") == "json"
        compressor = zlib.compressobj() if request.query.get("compress") == "zlib-stream" else None
        await self._send(ws, compressor, {"op": 10, "s": None, "t": None, "d": {"heartbeat_interval": 41250}})
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

    async def _cdn(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["name"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="image/png")

    def attachment(self, base: str, name: str, data: bytes) -> dict[str, Any]:
        """An attachment object for a message, served by the fake CDN at ``base``."""
        self.files[name] = data
        url = f"{base}/attachments/{name}"
        return {
            "id": self.snowflake(),
            "filename": name,
            "size": len(data),
            "url": url,
            "proxy_url": url,
            "content_type": "image/png",
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
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE payload: ``user_id`` writes ``text`` in the guild's channel."""
        author = {"id": user_id, "username": f"user{user_id[-3:]}", "discriminator": "0", "avatar": None}
        return {
            "id": self.snowflake(),
            "channel_id": CHANNEL_ID,
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
        if request.query.get("with_response", "").lower() not in ("true", "1"):
            return web.Response(status=204)
        interaction = {"id": request.match_info["iid"], "type": 3, "response_message_loading": False}
        return _json({"interaction": interaction, "resource": {"type": body["type"]}})
