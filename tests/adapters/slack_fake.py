"""A fake Slack for the tests: a real local HTTP server answering the Web API the way Slack does,
and a WebSocket endpoint speaking Socket Mode's envelope protocol.

Built from Slack's published API reference: methods answer ``{"ok": true, ...}`` or ``{"ok": false,
"error": "..."}``; the bot token comes as ``Authorization: Bearer xoxb-...`` (the app-level token for
``apps.connections.open``); ``chat.postMessage`` keeps ``metadata`` (``event_type``,
``event_payload``), returned by ``conversations.replies``/``history`` with ``include_all_metadata``;
section blocks over 3,000 characters are ``invalid_blocks``; a rate-limited call is HTTP 429 with
``Retry-After`` and ``{"ok": false, "error": "ratelimited"}``; pagination is by
``response_metadata.next_cursor``. ``apps.connections.open`` hands out this server's WebSocket URL;
there the fake sends ``hello`` and then envelopes (``events_api``, ``interactive``,
``slash_commands``) and waits for each ``envelope_id`` to be acknowledged; ``events_api`` envelopes
not acknowledged within :data:`RETRY_SECONDS` are sent again (``retry_attempt`` + 1), as Slack does.

Everything the bot does is recorded (:attr:`FakeSlack.operations`); :meth:`FakeSlack.shown` gives
what a user sees now. Nothing here talks to the internet.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web
from bad_day import Faults

BOT_TOKEN = "xoxb-1111111111-2222222222-FakeFakeFakeFake00"
APP_TOKEN = "xapp-1-AFAKE-3333333333-fakefakefakefakefake00"
SIGNING_SECRET = "0123456789abcdef0123456789abcdef"
TEAM = "TFAKE"
BOT_USER = "UBOT"
BOT_ID = "BBOT"
APP_ID = "AFAKE"
RETRY_SECONDS = 3.0
SECTION_LIMIT = 3000
MARKDOWN_LIMIT = 12000
"""The most characters of all ``markdown`` blocks of one message together."""
WRITE_METHODS = frozenset({"chat.postMessage", "chat.update", "chat.delete", "files.completeUploadExternal"})
SIGN_METHODS = frozenset(
    {"assistant.threads.setStatus", "assistant.threads.setSuggestedPrompts", "reactions.add", "reactions.remove"}
)
"""Methods that show the bot works (a thread status, a reaction); :meth:`FakeSlack.wait_for` wakes on them too."""


@dataclass
class Envelope:
    """A Socket Mode envelope waiting for its acknowledgement."""

    id: str
    type: str
    payload: dict[str, Any]
    attempts: int = 0
    sent_at: float = float("-inf")


@dataclass
class FakeSlack:
    """The fake workspace: channels, users, user groups, files, messages, and the record of the bot's calls."""

    users: dict[str, str] = field(default_factory=lambda: {"UANN": "ann", "UBOB": "bob", "USTRANGER": "stranger"})
    usergroups: dict[str, list[str]] = field(default_factory=dict)
    channels: set[str] = field(default_factory=lambda: {"CGENERAL", "CRANDOM", "DANN"})
    messages: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    operations: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, tuple[bytes, str, str]] = field(default_factory=dict)
    acks: dict[str, dict[str, Any]] = field(default_factory=dict)
    burst: int = 0
    """The next ``burst`` write calls are answered 429."""
    rate_limit_every: int = 0
    """Every n-th write call is answered 429 (0: never)."""
    retry_after: str = "1"
    after_write: Callable[[str], None] | None = None
    """Called after a post or update is recorded, before the answer is sent (the tests' kill -9 hook)."""
    limited: int = 0
    drop_answers: int = 0
    """The next ``drop_answers`` posts are recorded, then their connection is cut before the answer."""
    faults: Faults = field(default_factory=Faults)
    """Bad answers (5xx, errors, cut connections, slow answers, per-channel 429s), see ``bad_day.py``."""
    uploads: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Files the bot uploads (``files_upload_v2``): file id → ``filename``, ``length``, ``data`` (the bytes
    sent to the upload URL, None before), ``completed`` (shared by ``files.completeUploadExternal``)."""
    refuse_uploads: str = ""
    """When set, ``files.completeUploadExternal`` is answered with this error (a refused upload)."""
    drop_upload_answers: int = 0
    """The next ``drop_upload_answers`` completions are made, then their connection is cut before the answer."""
    fetched: dict[str, int] = field(default_factory=dict)
    """How many times each file was downloaded (its id → count)."""
    tiers: dict[str, float] = field(default_factory=dict)
    """Calls per minute the fake enforces per method, as Slack's tiers (a leaky bucket holding that
    many calls, draining at that rate); a call over it is answered 429 and counted in ``tier_limited``."""
    per_channel: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Limits the fake enforces per method and channel: ``(burst, per_second)``, a leaky bucket holding
    ``burst`` calls draining at ``per_second`` (``chat.postMessage``: about 1 a second, short bursts);
    a call over it is answered 429 and counted in ``tier_limited`` too."""
    tier_limited: int = 0
    thread_status: bool = True
    markdown_blocks: bool = True
    """Whether the workspace takes ``markdown`` blocks; else they are ``invalid_blocks``."""
    """Whether the app may set a thread's status (``assistant.threads.setStatus``); else Slack refuses it."""
    scopes: tuple[str, ...] | None = None
    """The bot token's scopes, sent in ``auth.test``'s ``x-oauth-scopes`` header (None: the manifest's,
    ``examples/slack-manifest.json``, as an app installed from it has)."""
    prompts_refusal: str = ""
    """When set, ``assistant.threads.setSuggestedPrompts`` is answered with this error (``not_allowed``:
    a workspace or app without AI apps; ``missing_scope``: no ``assistant:write``)."""
    channel_messages: bool = True
    """The app is subscribed to ``message.channels``/``message.groups`` (the manifest asks): a user's
    message in a channel is also a ``message`` event, so a mention there comes twice (``app_mention``
    and ``message``), as Slack sends it."""
    url: str = ""

    def __post_init__(self) -> None:
        self._clock = itertools.count(1)
        self._writes = 0
        self._pending: dict[str, Envelope] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._runner: web.AppRunner | None = None
        self._resender: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._levels: dict[str, tuple[float, float]] = {}
        self.changed = asyncio.Condition()
        self._acks_changed = asyncio.Condition()
        """Notified whenever the bot's messages change (:meth:`wait_for`)."""

    # ------------------------------------------------------------------ server

    async def start(self) -> str:
        """Listen on a free local port; the Web API base URL (``http://127.0.0.1:PORT/api/``)."""
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/socket", self._socket)
        app.router.add_get("/files-pri/{id}/{name}", self._file)
        app.router.add_post("/upload/v1/{id}", self._upload_bytes)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._resender = asyncio.create_task(self._resend())
        return f"{self.url}/api/"

    async def stop(self) -> None:
        """Close every connection and the server."""
        if self._resender is not None:
            self._resender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resender
        for socket in list(self._sockets):
            await socket.close()
        if self._runner is not None:
            self.faults.release()
            await self._runner.cleanup()

    def _ts(self) -> str:
        n = next(self._clock)
        return f"{1700000000 + n}.{n:06d}"

    # ------------------------------------------------------------------ Web API

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        arguments: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                arguments.update(await request.json())
            else:
                arguments.update(dict(await request.post()))
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if token != expected:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        over = self._over_tier(method, str(arguments.get("channel") or ""))
        if over is not None:
            self.tier_limited += 1
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": str(max(1, round(over)))}
            )
        faulty = await self.faults.answer(
            request,
            method,
            str(arguments.get("channel") or ""),
            json.dumps(arguments),
            lambda: self._answer(request, method, arguments),
        )
        answer = faulty if faulty is not None else await self._answer(request, method, arguments)
        if method == "auth.test":
            answer.headers["x-oauth-scopes"] = ",".join(self._scopes())
        if method in WRITE_METHODS | SIGN_METHODS:
            async with self.changed:
                self.changed.notify_all()
        return answer

    def _over_tier(self, method: str, channel: str) -> float | None:
        """None when ``method`` may be called now in ``channel`` (and count the call), else the seconds to wait."""
        limits: list[tuple[str, float, float]] = []
        if method in self.tiers:
            limits.append((method, self.tiers[method], self.tiers[method] / 60.0))
        if method in self.per_channel:
            burst, per_second = self.per_channel[method]
            limits.append((f"{method} {channel}", burst, per_second))
        now = time.monotonic()
        drained: list[tuple[str, float]] = []
        for key, capacity, per_second in limits:
            level, at = self._levels.get(key, (0.0, now))
            level = max(0.0, level - (now - at) * per_second)
            if level + 1 > capacity:
                self._levels[key] = (level, now)
                return (level + 1 - capacity) / per_second
            drained.append((key, level))
        for key, level in drained:
            self._levels[key] = (level + 1, now)
        return None

    async def _answer(self, request: web.Request, method: str, arguments: dict[str, Any]) -> web.StreamResponse:
        if method in WRITE_METHODS:
            self._writes += 1
            if self.burst > 0 or (self.rate_limit_every and self._writes % self.rate_limit_every == 0):
                self.burst = max(0, self.burst - 1)
                self.limited += 1
                return web.json_response(
                    {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": self.retry_after}
                )
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        answer: dict[str, Any] = handler(arguments)
        if answer.get("ok") and method in ("chat.postMessage", "chat.update") and self.after_write is not None:
            self.after_write(method)
        if answer.get("ok") and method == "chat.postMessage" and self.drop_answers > 0 and request.transport:
            self.drop_answers -= 1
            request.transport.abort()  # the post is made; the bot never hears so
        if (
            answer.get("ok")
            and method == "files.completeUploadExternal"
            and self.drop_upload_answers > 0
            and request.transport
        ):
            self.drop_upload_answers -= 1
            request.transport.abort()  # the file is shared; the bot never hears so
        return web.json_response(answer)

    async def wait_for(self, check: Callable[[], bool], timeout: float = 20) -> None:
        """Wait until ``check()`` holds (tested after every write call, answered or not), at most ``timeout`` s."""
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(check)

    def _scopes(self) -> tuple[str, ...]:
        if self.scopes is not None:
            return self.scopes
        manifest = json.loads((Path(__file__).resolve().parents[2] / "examples" / "slack-manifest.json").read_text())
        return tuple(manifest["oauth_config"]["scopes"]["bot"])

    def _auth_test(self, _: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.com/",
            "team": "Fake",
            "user": "codex",
            "team_id": TEAM,
            "user_id": BOT_USER,
            "bot_id": BOT_ID,
        }

    def _apps_connections_open(self, _: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": self.url.replace("http://", "ws://") + f"/socket?ticket={uuid.uuid4()}"}

    def _users_info(self, arguments: dict[str, Any]) -> dict[str, Any]:
        user = str(arguments.get("user"))
        if user not in self.users:
            return {"ok": False, "error": "user_not_found"}
        name = self.users[user]
        return {
            "ok": True,
            "user": {"id": user, "name": name, "real_name": name.title(), "profile": {"display_name": name}},
        }

    def _usergroups_users_list(self, arguments: dict[str, Any]) -> dict[str, Any]:
        group = str(arguments.get("usergroup"))
        if group not in self.usergroups:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": self.usergroups[group]}

    def _blocks_problem(self, arguments: dict[str, Any]) -> str | None:
        blocks = arguments.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        if len(str(arguments.get("text") or "")) > 40000:
            return "msg_too_long"
        if blocks is None:
            return None if arguments.get("text") else "no_text"
        if not isinstance(blocks, list) or len(blocks) > 50:
            return "invalid_blocks"
        if sum(len(b.get("text", "")) for b in blocks if b.get("type") == "markdown") > MARKDOWN_LIMIT:
            return "invalid_blocks"
        for block in blocks:
            if block.get("type") == "section" and len(block["text"]["text"]) > SECTION_LIMIT:
                return "invalid_blocks"
            if block.get("type") == "actions" and not 1 <= len(block.get("elements", [])) <= 25:
                return "invalid_blocks"
            if block.get("type") == "markdown" and not self.markdown_blocks:
                return "invalid_blocks"
        return None

    def _chat_postMessage(self, arguments: dict[str, Any]) -> dict[str, Any]:
        channel = str(arguments.get("channel"))
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        problem = self._blocks_problem(arguments)
        if problem:
            return {"ok": False, "error": problem}
        ts = self._ts()
        message: dict[str, Any] = {
            "type": "message",
            "ts": ts,
            "user": BOT_USER,
            "bot_id": BOT_ID,
            "app_id": APP_ID,
            "text": arguments.get("text", ""),
            "blocks": _decoded(arguments.get("blocks")),
        }
        if arguments.get("thread_ts"):
            message["thread_ts"] = str(arguments["thread_ts"])
        metadata = _decoded(arguments.get("metadata"))
        if metadata:
            message["metadata"] = metadata
        self.messages.setdefault(channel, {})[ts] = message
        self.operations.append({"op": "post", "channel": channel, "ts": ts, "message": dict(message)})
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _chat_update(self, arguments: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(arguments.get("channel")), str(arguments.get("ts"))
        message = self.messages.get(channel, {}).get(ts)
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        if message.get("bot_id") != BOT_ID:
            return {"ok": False, "error": "cant_update_message"}
        problem = self._blocks_problem(arguments)
        if problem:
            return {"ok": False, "error": problem}
        message.update(text=arguments.get("text", ""), blocks=_decoded(arguments.get("blocks")))
        self.operations.append({"op": "update", "channel": channel, "ts": ts, "message": dict(message)})
        return {"ok": True, "channel": channel, "ts": ts, "text": message["text"]}

    def _assistant_threads_setStatus(self, arguments: dict[str, Any]) -> dict[str, Any]:
        channel, thread = str(arguments.get("channel_id")), str(arguments.get("thread_ts"))
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        if not self.thread_status:
            return {"ok": False, "error": "missing_scope", "needed": "assistant:write", "provided": "chat:write"}
        if thread not in self.messages.get(channel, {}):
            return {"ok": False, "error": "invalid_thread_ts"}
        self.operations.append({"op": "status", "channel": channel, "thread": thread, "status": arguments["status"]})
        return {"ok": True}

    def _assistant_threads_setSuggestedPrompts(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """As https://docs.slack.dev/reference/methods/assistant.threads.setSuggestedPrompts: up to four
        prompts, each with a ``title`` and a ``message``, in an assistant thread (scope ``assistant:write``)."""
        channel, thread = str(arguments.get("channel_id")), str(arguments.get("thread_ts") or "")
        if self.prompts_refusal == "missing_scope":
            return {"ok": False, "error": "missing_scope", "needed": "assistant:write", "provided": "chat:write"}
        if self.prompts_refusal:
            return {"ok": False, "error": self.prompts_refusal}
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        if thread not in self.messages.get(channel, {}):
            return {"ok": False, "error": "invalid_thread_ts"}
        prompts = _decoded(arguments.get("prompts"))
        if (
            not isinstance(prompts, list)
            or not 1 <= len(prompts) <= 4
            or not all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts)
        ):
            return {"ok": False, "error": "invalid_arguments"}
        self.operations.append(
            {"op": "prompts", "channel": channel, "thread": thread, "title": arguments.get("title"), "prompts": prompts}
        )
        return {"ok": True}

    def _reaction(self, arguments: dict[str, Any], add: bool) -> dict[str, Any]:
        channel, ts, name = str(arguments.get("channel")), str(arguments.get("timestamp")), str(arguments.get("name"))
        message = self.messages.get(channel, {}).get(ts)
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        users: list[str] = next((r["users"] for r in message.setdefault("reactions", []) if r["name"] == name), [])
        if add == (BOT_USER in users):
            return {"ok": False, "error": "already_reacted" if add else "no_reaction"}
        if add:
            if not users:
                message["reactions"].append({"name": name, "users": users, "count": 0})
            users.append(BOT_USER)
        else:
            users.remove(BOT_USER)
        message["reactions"] = [dict(r, count=len(r["users"])) for r in message["reactions"] if r["users"]]
        self.operations.append({"op": "react" if add else "unreact", "channel": channel, "ts": ts, "name": name})
        return {"ok": True}

    def _reactions_add(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return self._reaction(arguments, add=True)

    def _reactions_remove(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return self._reaction(arguments, add=False)

    def _chat_delete(self, arguments: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(arguments.get("channel")), str(arguments.get("ts"))
        if self.messages.get(channel, {}).pop(ts, None) is None:
            return {"ok": False, "error": "message_not_found"}
        self.operations.append({"op": "delete", "channel": channel, "ts": ts})
        return {"ok": True, "channel": channel, "ts": ts}

    # files_upload_v2, as https://docs.slack.dev/reference/methods/files.getUploadURLExternal and
    # files.completeUploadExternal describe it: an upload URL per file, the bytes POSTed there, then
    # the completion shares the files (with the comment) in the channel or thread.

    def _files_getUploadURLExternal(self, arguments: dict[str, Any]) -> dict[str, Any]:
        filename, length = str(arguments.get("filename") or ""), str(arguments.get("length") or "")
        if not filename or not length.isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{len(self.files) + len(self.uploads) + 1:08d}"
        self.uploads[file_id] = {"filename": filename, "length": int(length), "data": None, "completed": False}
        return {"ok": True, "upload_url": f"{self.url}/upload/v1/{file_id}", "file_id": file_id}

    async def _upload_bytes(self, request: web.Request) -> web.StreamResponse:
        upload = self.uploads.get(request.match_info["id"])
        if upload is None:
            return web.Response(status=404, text="no such upload")
        data = await request.read()
        if len(data) != upload["length"]:
            return web.Response(status=400, text=f"expected {upload['length']} bytes, got {len(data)}")
        upload["data"] = data
        return web.Response(text=f"OK - {len(data)}")

    def _files_completeUploadExternal(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.refuse_uploads:
            return {"ok": False, "error": self.refuse_uploads}
        files = _decoded(arguments.get("files"))
        channel = str(arguments.get("channel_id") or "")
        if not isinstance(files, list) or not files:
            return {"ok": False, "error": "invalid_arguments"}
        if channel and channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        shared: list[dict[str, Any]] = []
        for item in files:
            upload = self.uploads.get(str(item.get("id")))
            if upload is None or upload["data"] is None or upload["completed"]:
                return {"ok": False, "error": "file_not_found"}
            upload["completed"] = True
            self.files[str(item["id"])] = (upload["data"], "application/octet-stream", upload["filename"])
            shared.append(
                {
                    "id": item["id"],
                    "name": upload["filename"],
                    "title": item.get("title") or upload["filename"],
                    "size": upload["length"],
                }
            )
        if channel:
            ts = self._ts()
            message: dict[str, Any] = {
                "type": "message",
                "ts": ts,
                "user": BOT_USER,
                "bot_id": BOT_ID,
                "app_id": APP_ID,
                "text": arguments.get("initial_comment") or "",
                "files": shared,
            }
            if arguments.get("thread_ts"):
                message["thread_ts"] = str(arguments["thread_ts"])
            self.messages.setdefault(channel, {})[ts] = message
            self.operations.append({"op": "upload", "channel": channel, "ts": ts, "message": dict(message)})
        return {"ok": True, "files": [{"id": f["id"], "title": f["title"]} for f in shared]}

    def uploaded(self) -> list[tuple[dict[str, Any], bytes]]:
        """The bot's messages that share files, each with the first file's bytes, oldest first."""
        return [
            (message, self.files[message["files"][0]["id"]][0])
            for message in self.bot_messages()
            if message.get("files")
        ]

    def _page(self, messages: list[dict[str, Any]], arguments: dict[str, Any]) -> dict[str, Any]:
        limit = min(int(arguments.get("limit") or 100), 1000)
        start = int(str(arguments.get("cursor") or "offset:0").split(":")[1])
        page = messages[start : start + limit]
        if str(arguments.get("include_all_metadata")) not in ("1", "true", "True"):
            page = [{k: v for k, v in m.items() if k != "metadata"} for m in page]
        more = start + limit < len(messages)
        return {
            "ok": True,
            "messages": page,
            "has_more": more,
            "response_metadata": {"next_cursor": f"offset:{start + limit}" if more else ""},
        }

    def _conversations_replies(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The thread, oldest first (the parent message first); ``latest``/``oldest`` bound it, the
        bounds themselves only with ``inclusive`` (https://docs.slack.dev/reference/methods/conversations.replies)."""
        channel, thread = str(arguments.get("channel")), str(arguments.get("ts"))
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        stored = self.messages.get(channel, {})
        if thread not in stored:
            return {"ok": False, "error": "thread_not_found"}
        replies = sorted((m for m in stored.values() if m["ts"] == thread or m.get("thread_ts") == thread), key=_ts_key)
        inclusive = str(arguments.get("inclusive")) in ("1", "true", "True")
        if arguments.get("latest"):
            latest = _ts_key({"ts": arguments["latest"]})
            replies = [m for m in replies if _ts_key(m) < latest or (inclusive and _ts_key(m) == latest)]
        if arguments.get("oldest"):
            oldest = _ts_key({"ts": arguments["oldest"]})
            replies = [m for m in replies if _ts_key(m) > oldest or (inclusive and _ts_key(m) == oldest)]
        return self._page(replies, arguments)

    def _conversations_history(self, arguments: dict[str, Any]) -> dict[str, Any]:
        channel = str(arguments.get("channel"))
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        top = [m for m in self.messages.get(channel, {}).values() if m.get("thread_ts", m["ts"]) == m["ts"]]
        return self._page(sorted(top, key=_ts_key, reverse=True), arguments)

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
            return web.Response(status=403, text="sign in")
        stored = self.files.get(request.match_info["id"])
        if stored is None:
            return web.Response(status=404)
        self.fetched[request.match_info["id"]] = self.fetched.get(request.match_info["id"], 0) + 1
        # Sent in pieces, as a real server does: a client reads what has arrived, not the whole body.
        response = web.StreamResponse(headers={"Content-Type": stored[1]})
        response.content_length = len(stored[0])
        await response.prepare(request)
        for start in range(0, len(stored[0]), 256 * 1024):
            await response.write(stored[0][start : start + 256 * 1024])
            await asyncio.sleep(0)
        await response.write_eof()
        return response

    # ------------------------------------------------------------------ Socket Mode

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        await socket.send_json(
            {
                "type": "hello",
                "num_connections": 1,
                "debug_info": {"host": "fake"},
                "connection_info": {"app_id": APP_ID},
            }
        )
        self._sockets.append(socket)
        self._connected.set()
        for envelope in list(self._pending.values()):
            await self._send(envelope)
        try:
            async for frame in socket:
                if frame.type == WSMsgType.TEXT:
                    answer = json.loads(frame.data)
                    envelope_id = answer.get("envelope_id")
                    if envelope_id in self._pending:
                        del self._pending[envelope_id]
                        self.acks[envelope_id] = answer.get("payload") or {}
                        async with self._acks_changed:
                            self._acks_changed.notify_all()
        finally:
            self._sockets.remove(socket)
            if not self._sockets:
                self._connected.clear()
        return socket

    async def _send(self, envelope: Envelope) -> None:
        live = [socket for socket in self._sockets if not socket.closed]
        if not live:
            return
        envelope.attempts += 1
        envelope.sent_at = time.monotonic()
        frame = {
            "envelope_id": envelope.id,
            "type": envelope.type,
            "payload": envelope.payload,
            "accepts_response_payload": envelope.type != "events_api",
            "retry_attempt": envelope.attempts - 1,
            "retry_reason": "timeout" if envelope.attempts > 1 else "",
        }
        with contextlib.suppress(ConnectionError, RuntimeError):
            await live[-1].send_json(frame)

    async def _resend(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for envelope in list(self._pending.values()):
                if envelope.type == "events_api" and now - envelope.sent_at >= RETRY_SECONDS and envelope.attempts < 20:
                    await self._send(envelope)

    async def deliver(self, kind: str, payload: dict[str, Any]) -> str:
        """Send an envelope (now, or when the app connects); its id. ``events_api`` is retried until acked."""
        envelope = Envelope(str(uuid.uuid4()), kind, payload)
        if kind == "events_api":
            self._pending[envelope.id] = envelope
            await self._send(envelope)
            return envelope.id
        async with asyncio.timeout(30):
            await self._connected.wait()
        self._pending[envelope.id] = envelope
        await self._send(envelope)
        return envelope.id

    async def acked(self, envelope_id: str, timeout: float = 20) -> dict[str, Any]:
        """The acknowledgement's payload of an envelope, once it came."""
        async with asyncio.timeout(timeout):
            while envelope_id not in self.acks:
                await asyncio.sleep(0.02)
        return self.acks[envelope_id]

    async def settled(self, timeout: float = 20) -> None:
        """Wait until every ``events_api`` envelope sent so far was acknowledged (the app handled it)."""
        async with asyncio.timeout(timeout), self._acks_changed:
            await self._acks_changed.wait_for(
                lambda: not any(envelope.type == "events_api" for envelope in self._pending.values())
            )

    # ------------------------------------------------------------------ users' side

    def user_message(
        self, channel: str, user: str, text: str, thread: str = "", files: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Store a user's message as Slack would and return the event for it."""
        ts = self._ts()
        message: dict[str, Any] = {"type": "message", "ts": ts, "user": user, "text": text, "team": TEAM}
        if thread:
            message["thread_ts"] = thread
        if files:
            message["files"] = files
        self.messages.setdefault(channel, {})[ts] = message
        return {**message, "channel": channel, "event_ts": ts}

    async def mention(
        self, channel: str, user: str, text: str, thread: str = "", files: list[dict[str, Any]] | None = None
    ) -> str:
        """A user writes ``<@UBOT> text`` in ``channel`` (in ``thread``, or at the top level); the message ts."""
        event = self.user_message(channel, user, f"<@{BOT_USER}> {text}", thread, files)
        await self.deliver("events_api", _callback(dict(event, type="app_mention")))
        if self.channel_messages and channel[0] in "CG":
            await self.deliver("events_api", _callback(_channel_event(event, files)))
        return str(event["ts"])

    async def say(
        self, channel: str, user: str, text: str, thread: str = "", files: list[dict[str, Any]] | None = None
    ) -> str:
        """A user writes ``text`` (no mention) in ``channel``, in ``thread`` or at the top level: a
        ``message`` event (``message.channels``, ``message.groups`` for a ``G…`` channel); the message ts."""
        event = self.user_message(channel, user, text, thread, files)
        if self.channel_messages:
            await self.deliver("events_api", _callback(_channel_event(event, files)))
        return str(event["ts"])

    async def assistant_thread(self, channel: str, user: str) -> str:
        """A user opens the AI app's split view: a new assistant thread in their DM with the bot (its root
        message, subtype ``assistant_app_thread``) and the ``assistant_thread_started`` event; the thread's ts."""
        ts = self._ts()
        root = {"type": "message", "subtype": "assistant_app_thread", "ts": ts, "user": user, "text": "New chat"}
        self.messages.setdefault(channel, {})[ts] = dict(root, thread_ts=ts, team=TEAM)
        event = {
            "type": "assistant_thread_started",
            "assistant_thread": {
                "user_id": user,
                "context": {"channel_id": "CGENERAL", "team_id": TEAM, "enterprise_id": None},
                "channel_id": channel,
                "thread_ts": ts,
            },
            "event_ts": ts,
        }
        await self.deliver("events_api", _callback(event))
        return ts

    async def direct(
        self, channel: str, user: str, text: str, files: list[dict[str, Any]] | None = None, thread: str = ""
    ) -> str:
        """A user writes ``text`` in their DM with the bot (in ``thread``: an assistant thread); the message ts."""
        event = self.user_message(channel, user, text, thread, files)
        event["channel_type"] = "im"
        if files:
            event["subtype"] = "file_share"
        await self.deliver("events_api", _callback(event))
        return str(event["ts"])

    async def press(
        self, channel: str, user: str, value: str, message_ts: str, thread: str, *, action_id: str = "coven:0"
    ) -> str:
        """A user presses the button whose value is ``value`` under ``message_ts``; the envelope id."""
        message = self.messages.get(channel, {}).get(message_ts, {"ts": message_ts})
        payload = {
            "type": "block_actions",
            "user": {
                "id": user,
                "username": self.users.get(user, user),
                "name": self.users.get(user, user),
                "team_id": TEAM,
            },
            "api_app_id": APP_ID,
            "token": "legacy-verification-token",
            "container": {
                "type": "message",
                "message_ts": message_ts,
                "channel_id": channel,
                "is_ephemeral": False,
                "thread_ts": thread,
            },
            "trigger_id": "1.2.3",
            "team": {"id": TEAM, "domain": "fake"},
            "channel": {"id": channel, "name": channel.lower()},
            "message": message,
            "response_url": f"{self.url}/response",
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": "coven_actions",
                    "value": value,
                    "type": "button",
                    "text": {"type": "plain_text", "text": value},
                    "action_ts": self._ts(),
                }
            ],
        }
        return await self.deliver("interactive", payload)

    async def slash(self, channel: str, user: str, text: str, command: str = "/codex") -> str:
        """A user runs ``/codex text`` in ``channel``; the envelope id."""
        payload = {
            "token": "legacy-verification-token",
            "team_id": TEAM,
            "team_domain": "fake",
            "channel_id": channel,
            "channel_name": channel.lower(),
            "user_id": user,
            "user_name": self.users.get(user, user),
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "is_enterprise_install": "false",
            "response_url": f"{self.url}/response",
            "trigger_id": "1.2.3",
        }
        return await self.deliver("slash_commands", payload)

    def add_file(self, data: bytes, mimetype: str, name: str) -> dict[str, Any]:
        """Upload a file as a user would; its file object as events carry it."""
        file_id = f"F{len(self.files) + 1:08d}"
        self.files[file_id] = (data, mimetype, name)
        return {
            "id": file_id,
            "name": name,
            "mimetype": mimetype,
            "size": len(data),
            "url_private": f"{self.url}/files-pri/{file_id}/{name}",
            "url_private_download": f"{self.url}/files-pri/{file_id}/{name}",
        }

    # ------------------------------------------------------------------ what users see

    def bot_messages(self, channel: str | None = None) -> list[dict[str, Any]]:
        """The bot's messages now, oldest first."""
        found = [
            (name, m)
            for name, stored in self.messages.items()
            if channel is None or name == channel
            for m in stored.values()
            if m.get("bot_id") == BOT_ID
        ]
        return [dict(m, channel=name) for name, m in sorted(found, key=lambda item: _ts_key(item[1]))]


def text_of(message: dict[str, Any]) -> str:
    """What a user reads: the message's section and markdown blocks (else its text)."""
    sections = [
        b["text"]["text"] if b["type"] == "section" else b["text"]
        for b in message.get("blocks") or []
        if b.get("type") in ("section", "markdown")
    ]
    return "\n".join(sections) if sections else str(message.get("text") or "")


def actions_of(message: dict[str, Any]) -> tuple[str, ...]:
    """The values of the message's buttons."""
    return tuple(
        str(element.get("value"))
        for block in message.get("blocks") or []
        if block.get("type") == "actions"
        for element in block.get("elements", [])
    )


def _callback(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": "legacy-verification-token",
        "team_id": TEAM,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": TEAM,
                "user_id": BOT_USER,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
    }


def _channel_event(event: dict[str, Any], files: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The ``message`` event of a user's message in a channel, as ``message.channels``/``groups`` carry it."""
    channel = str(event["channel"])
    message = dict(event, type="message", channel_type="group" if channel.startswith("G") else "channel")
    if files:
        message["subtype"] = "file_share"
    return message


def _decoded(value: Any) -> Any:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


def _ts_key(message: dict[str, Any]) -> tuple[int, int]:
    seconds, _, fraction = str(message["ts"]).partition(".")
    return int(seconds), int(fraction or 0)
