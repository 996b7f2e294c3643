"""A local fake of Telegram's Bot API, built from the published reference, that records every call.

Served by aiohttp at ``/bot<token>/<method>`` (python-telegram-bot reaches it through its
``base_url``) and ``/file/bot<token>/<path>`` (its ``base_file_url``). Every answer has the Bot API's
envelope: ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code": N, "description": ...,
"parameters": {"retry_after": N}}``.

- ``setWebhook`` (with ``secret_token``): pending updates are then posted to its URL one at a time
  with ``X-Telegram-Bot-Api-Secret-Token``, each again until answered 2xx, and ``getUpdates``
  answers 409 Conflict, as Telegram does.
- ``getMe``, ``deleteWebhook``, ``setMyCommands`` (kept in ``commands``), ``getUpdates`` (long
  polling: updates below ``offset`` are confirmed and forgotten, the rest answered; an empty
  answer after ``timeout`` seconds), ``sendMessage``, ``editMessageText``, ``deleteMessage``,
  ``sendChatAction`` (kept in ``typing``), ``answerCallbackQuery`` (kept in ``answered``),
  ``getFile`` and the file download.
- Text in ``parse_mode=HTML`` is parsed as Telegram does: only its tags, balanced, and only its
  entities; anything else is ``400 Bad Request: can't parse entities: ...``. A message holds what
  the user would see (the text after parsing) and must be at most 4,096 UTF-16 code units
  (``400 Bad Request: message is too long``).
- ``editMessageText`` with the same text and keyboard answers ``400 Bad Request: message is not
  modified``; an edit without ``reply_markup`` removes the keyboard, as Telegram does.
- ``rate_limit_every=N``: every N-th write answers 429 with ``parameters.retry_after``;
  ``chat_limit=(n, seconds)`` enforces n writes per that many seconds in each chat as a token
  bucket (n at once, then n per period), answering 429 past it, counted in ``limited``.
- ``faults`` (``bad_day.py``): 5xx (JSON or HTML), 400s, 403s, cut connections and slow answers by
  method (the route), chat and text.
- A message created by a request whose connection a fault cuts after handling it is kept in
  ``unanswered`` (the bot cannot know it was created).
- ``after_write(method)`` is called after a message was created or edited, before the answer is
  sent (the contract suite's kill -9 at the worst moment).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html import unescape
from typing import Any, Self

import aiohttp
from aiohttp import web
from bad_day import Faults

TEST_TOKEN = "7000000001:AAFakeTokenForTheCovenCodexTests_0123"
"""A token of Telegram's shape, which the fake accepts."""
BOT = {
    "id": 7000000001,
    "is_bot": True,
    "first_name": "coven",
    "username": "coven_bot",
    "can_join_groups": True,
    "can_read_all_group_messages": False,
    "supports_inline_queries": False,
}
LIMIT = 4096
TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a", "code", "pre"}
    | {"blockquote", "tg-emoji"}
)
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[a-zA-Z-]+(?:=\"[^\"<>]*\")?)*)\s*>")
_ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#[0-9]+|#x[0-9a-fA-F]+);")


class EntityError(ValueError):
    """The text is not Telegram HTML."""


def parse_html(text: str) -> str:
    """What Telegram shows for ``text`` in HTML parse mode; :class:`EntityError` as Telegram refuses it."""
    shown: list[str] = []
    stack: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "<":
            match = _TAG.match(text, i)
            if match is None:
                raise EntityError(f"Unsupported start tag at byte offset {len(text[:i].encode())}")
            closing, name = match.group(1), match.group(2).lower()
            if name not in TAGS:
                raise EntityError(f'Unsupported start tag "{name}" at byte offset {len(text[:i].encode())}')
            if closing:
                if not stack or stack[-1] != name:
                    raise EntityError(f"Unexpected end tag at byte offset {len(text[:i].encode())}")
                stack.pop()
            else:
                stack.append(name)
            i = match.end()
        elif char == "&":
            match = _ENTITY.match(text, i)
            if match is None:
                raise EntityError(f"Unsupported entity at byte offset {len(text[:i].encode())}")
            shown.append(unescape(match.group(0)))
            i = match.end()
        elif char == ">":
            raise EntityError(f"Unexpected character at byte offset {len(text[:i].encode())}")
        else:
            shown.append(char)
            i += 1
    if stack:
        raise EntityError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(shown)


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass
class FakeMessage:
    """A message in a chat, as the fake keeps it (``text`` is what the user sees)."""

    chat_id: int
    message_id: int
    text: str
    buttons: list[tuple[str, str]]
    """(label, callback_data) of its inline keyboard."""
    thread: int | None
    created: float
    from_bot: bool = True
    edits: int = 0
    raw: str = ""
    parse_mode: str | None = None
    document: tuple[str, bytes] | None = None
    """The file the bot sent with ``sendDocument``: its name and bytes (``text`` is its caption)."""


class ApiError(Exception):
    def __init__(self, code: int, description: str, retry_after: float | None = None) -> None:
        super().__init__(description)
        self.code = code
        self.description = description
        self.retry_after = retry_after


def _answer(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(error: ApiError) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": error.code, "description": error.description}
    if error.retry_after is not None:
        body["parameters"] = {"retry_after": error.retry_after}
    return web.json_response(body, status=error.code)


WRITES = frozenset({"sendMessage", "editMessageText", "sendDocument", "sendPhoto"})


@dataclass
class FakeTelegram:
    """The fake's state; :meth:`app` serves it."""

    token: str = TEST_TOKEN
    rate_limit_every: int = 0
    retry_after: int = 1
    chat_limit: tuple[int, float] | None = None
    messages: dict[tuple[int, int], FakeMessage] = field(default_factory=dict)
    deleted: list[tuple[int, int]] = field(default_factory=list)
    typing: list[tuple[int, int | None]] = field(default_factory=list)
    answered: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    declared: dict[str, int] = field(default_factory=dict)
    fetched: dict[str, int] = field(default_factory=dict)
    faults: Faults = field(default_factory=Faults)
    after_write: Callable[[str], None] | None = None
    requests: dict[str, int] = field(default_factory=dict)
    limited: int = 0
    """429s the fake's own enforcement (``rate_limit_every``, ``chat_limit``) answered."""
    polls: int = 0
    webhook: dict[str, str] | None = None
    """The webhook ``setWebhook`` set: its ``url`` and ``secret``; updates are then posted there."""
    webhook_answers: list[int] = field(default_factory=list)
    """The status of every webhook delivery (0: no answer)."""
    _deliverer: asyncio.Task[None] | None = None
    unanswered: list[str] = field(default_factory=list)
    """The texts (as sent) of messages created by a request whose answer was cut off."""
    updates: list[dict[str, Any]] = field(default_factory=list)
    _update_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    _message_ids: dict[int, itertools.count[int]] = field(default_factory=dict)
    _file_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _writes: int = 0
    _chat_writes: dict[int, tuple[float, float]] = field(default_factory=dict)
    _new_update: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None
    _closing: bool = False
    base: str = ""

    # ------------------------------------------------------------- serving

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/bot{token}/{method}", self._method)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        return app

    async def start(self, port: int = 0) -> str:
        """Serve on a local port; the API's base URL (the adapter's ``api_url``)."""
        self._closing = False
        self._runner = web.AppRunner(self.app())
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.base = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.base

    async def __aenter__(self) -> Self:
        """Serve on a free local port (:meth:`start`) until the block ends (:meth:`stop`)."""
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop serving (a long poll waiting for updates is answered at once)."""
        self._closing = True
        self._new_update.set()
        if self._deliverer is not None:
            self._deliverer.cancel()
            await asyncio.gather(self._deliverer, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            data = await request.json()
            return dict(data) if isinstance(data, dict) else {}
        form = await request.post()
        params: dict[str, Any] = {}
        for key, value in form.items():
            if not isinstance(value, str):
                params[key] = value
                continue
            try:
                params[key] = json.loads(value)
            except ValueError:
                params[key] = value
        if "text" in form and isinstance(form["text"], str):
            params["text"] = form["text"]  # never decoded as JSON ("42" stays text)
        return params

    async def _method(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        if request.match_info["token"] != self.token:
            return _error(ApiError(401, "Unauthorized"))
        self.requests[method] = self.requests.get(method, 0) + 1
        params = await self._params(request)
        body = json.dumps(params, default=str, ensure_ascii=False)
        chat = str(params.get("chat_id", ""))
        faulty = await self.faults.answer(request, method, chat, body, lambda: self._unanswered(method, params))
        if faulty is not None:
            return faulty
        return await self._handle(method, params)

    async def _unanswered(self, method: str, params: dict[str, Any]) -> web.StreamResponse:
        """Handle a request whose answer the bot will never get (a connection cut after it was handled)."""
        before = set(self.messages)
        response = await self._handle(method, params)
        self.unanswered += [self.messages[key].raw for key in set(self.messages) - before]
        return response

    async def _handle(self, method: str, params: dict[str, Any]) -> web.StreamResponse:
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return _error(ApiError(404, "Not Found"))
        try:
            if method in WRITES:
                self._limit(int(params["chat_id"]))
            result = await handler(params)
        except ApiError as error:
            return _error(error)
        return _answer(result)

    def _limit(self, chat: int) -> None:
        self._writes += 1
        if self.rate_limit_every and self._writes % self.rate_limit_every == 0:
            self.limited += 1
            raise ApiError(429, f"Too Many Requests: retry after {self.retry_after}", self.retry_after)
        if self.chat_limit is not None:
            count, window = self.chat_limit
            now = time.monotonic()
            tokens, then = self._chat_writes.get(chat, (float(count), now))
            tokens = min(float(count), tokens + (now - then) * count / window)
            if tokens < 1:
                self.limited += 1
                raise ApiError(429, f"Too Many Requests: retry after {self.retry_after}", self.retry_after)
            self._chat_writes[chat] = (tokens - 1, now)

    # ------------------------------------------------------------- the methods

    async def _api_getMe(self, params: dict[str, Any]) -> Any:
        return BOT

    async def _api_deleteWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook = None
        return True

    async def _api_setWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook = {"url": str(params["url"]), "secret": str(params.get("secret_token") or "")}
        if self._deliverer is None or self._deliverer.done():
            self._deliverer = asyncio.create_task(self._deliver())
        return True

    async def _deliver(self) -> None:
        """Post pending updates to the webhook one at a time, each until it is answered 2xx."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=70)) as session:
            while self.webhook is not None and not self._closing:
                if not self.updates:
                    self._new_update.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.5):
                            await self._new_update.wait()
                    continue
                update = self.updates[0]
                headers = {"X-Telegram-Bot-Api-Secret-Token": self.webhook["secret"]}
                try:
                    async with session.post(self.webhook["url"], json=update, headers=headers) as response:
                        self.webhook_answers.append(response.status)
                        delivered = 200 <= response.status < 300
                except (aiohttp.ClientError, TimeoutError):
                    self.webhook_answers.append(0)
                    delivered = False
                if delivered:
                    self.updates = [u for u in self.updates if u["update_id"] != update["update_id"]]
                else:
                    await asyncio.sleep(0.2)

    async def _api_setMyCommands(self, params: dict[str, Any]) -> Any:
        self.commands = list(params.get("commands") or [])
        return True

    async def _api_getUpdates(self, params: dict[str, Any]) -> Any:
        self.polls += 1
        if self.webhook is not None:
            raise ApiError(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook")
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        if offset:
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.updates and not self._closing:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return []
            self._new_update.clear()
            try:
                async with asyncio.timeout(left):
                    await self._new_update.wait()
            except TimeoutError:
                return []
        return list(self.updates[:100]) if not self._closing else []

    def _markup(self, params: dict[str, Any]) -> list[tuple[str, str]]:
        markup = params.get("reply_markup")
        if not isinstance(markup, dict):
            return []
        rows = markup.get("inline_keyboard") or []
        return [(str(b["text"]), str(b.get("callback_data", ""))) for row in rows for b in row]

    def _text(self, params: dict[str, Any]) -> str:
        raw = str(params.get("text") or "")
        mode = params.get("parse_mode")
        shown = raw
        if mode == "HTML":
            try:
                shown = parse_html(raw)
            except EntityError as exc:
                raise ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        elif mode is not None:
            raise ApiError(400, f"Bad Request: unsupported parse_mode {mode}")
        if not shown.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16(shown) > LIMIT:
            raise ApiError(400, "Bad Request: message is too long")
        return shown

    def _new_id(self, chat: int) -> int:
        return next(self._message_ids.setdefault(chat, itertools.count(1)))

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        chat = int(params["chat_id"])
        text = self._text(params)
        thread = params.get("message_thread_id")
        message = FakeMessage(
            chat,
            self._new_id(chat),
            text,
            self._markup(params),
            int(thread) if thread else None,
            time.time(),
            raw=str(params.get("text")),
            parse_mode=params.get("parse_mode"),
        )
        self.messages[(chat, message.message_id)] = message
        if self.after_write is not None:
            self.after_write("sendMessage")
        return self.payload(message)

    async def _api_sendDocument(self, params: dict[str, Any]) -> Any:
        chat = int(params["chat_id"])
        document = params.get("document")
        if not isinstance(document, web.FileField):
            raise ApiError(400, "Bad Request: there is no document in the request")
        caption = str(params.get("caption") or "")
        if len(caption) > 1024:
            raise ApiError(400, "Bad Request: message caption is too long")
        thread = params.get("message_thread_id")
        message = FakeMessage(
            chat, self._new_id(chat), caption, [], int(thread) if thread else None, time.time(), raw=caption
        )
        message.document = (document.filename, document.file.read())
        self.messages[(chat, message.message_id)] = message
        if self.after_write is not None:
            self.after_write("sendDocument")
        return self.payload(message)

    async def _api_editMessageText(self, params: dict[str, Any]) -> Any:
        chat, message_id = int(params["chat_id"]), int(params["message_id"])
        message = self.messages.get((chat, message_id))
        if message is None or (chat, message_id) in self.deleted:
            raise ApiError(400, "Bad Request: message to edit not found")
        text, buttons = self._text(params), self._markup(params)
        if text == message.text and buttons == message.buttons:
            raise ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and reply markup are"
                " exactly the same as a current content and reply markup of the message",
            )
        message.text, message.buttons, message.edits = text, buttons, message.edits + 1
        message.raw, message.parse_mode = str(params.get("text")), params.get("parse_mode")
        if self.after_write is not None:
            self.after_write("editMessageText")
        return self.payload(message)

    async def _api_deleteMessage(self, params: dict[str, Any]) -> Any:
        key = (int(params["chat_id"]), int(params["message_id"]))
        if key not in self.messages or key in self.deleted:
            raise ApiError(400, "Bad Request: message to delete not found")
        self.deleted.append(key)
        return True

    async def _api_sendChatAction(self, params: dict[str, Any]) -> Any:
        thread = params.get("message_thread_id")
        self.typing.append((int(params["chat_id"]), int(thread) if thread else None))
        return True

    async def _api_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        self.answered.append(params)
        return True

    async def _api_getFile(self, params: dict[str, Any]) -> Any:
        file_id = str(params["file_id"])
        if file_id not in self.files:
            raise ApiError(400, "Bad Request: invalid file_id")
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": self.declared.get(file_id, len(self.files[file_id])),
            "file_path": f"photos/{file_id}.png",
        }

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        file_id = request.match_info["path"].rsplit("/", 1)[-1].removesuffix(".png")
        self.fetched[file_id] = self.fetched.get(file_id, 0) + 1
        data = self.files.get(file_id)
        if data is None:
            return web.Response(status=404)
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await response.prepare(request)
        try:
            for start in range(0, len(data), 256 * 1024):
                await response.write(data[start : start + 256 * 1024])
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client stopped reading (a file past its limit)
        return response

    # ------------------------------------------------------------- shapes

    def chat(self, chat_id: int) -> dict[str, Any]:
        if chat_id > 0:
            return {"id": chat_id, "type": "private", "first_name": f"user{chat_id}"}
        return {"id": chat_id, "type": "supergroup", "title": "coven", "is_forum": True}

    def payload(self, message: FakeMessage) -> dict[str, Any]:
        data: dict[str, Any] = {
            "message_id": message.message_id,
            "date": int(message.created),
            "chat": self.chat(message.chat_id),
            "from": BOT,
            "text": message.text,
        }
        if message.document is not None:
            data["document"] = {
                "file_id": f"doc{message.message_id}",
                "file_unique_id": f"u{message.message_id}",
                "file_name": message.document[0],
                "file_size": len(message.document[1]),
            }
            data["caption"] = data.pop("text")
        if message.thread is not None:
            data["message_thread_id"] = message.thread
            data["is_topic_message"] = True
        if message.buttons:
            data["reply_markup"] = {
                "inline_keyboard": [[{"text": label, "callback_data": action} for label, action in message.buttons]]
            }
        return data

    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue ``update`` (its ``update_id`` set) for the next ``getUpdates``."""
        update = {"update_id": next(self._update_ids), **update}
        self.updates.append(update)
        self._new_update.set()
        return update

    def user(self, user_id: int, name: str = "", *, bot: bool = False) -> dict[str, Any]:
        return {"id": user_id, "is_bot": bot, "first_name": name or f"user{user_id}"}

    def user_message(
        self,
        user_id: int,
        text: str,
        *,
        chat_id: int | None = None,
        thread: int | None = None,
        mention: bool = False,
        reply_to: FakeMessage | None = None,
        photo: str | None = None,
        document: tuple[str, str] | None = None,
        bot: bool = False,
    ) -> dict[str, Any]:
        """A ``message`` update: ``user_id`` writes ``text`` in ``chat_id`` (their private chat by default).

        ``mention`` prefixes ``@coven_bot``; ``photo`` is a file id (:meth:`add_file`) sent as a
        photo with ``text`` as its caption; ``document`` (file id, MIME type) as a document.
        """
        chat = user_id if chat_id is None else chat_id
        if mention:
            text = f"@{BOT['username']} {text}"
        message: dict[str, Any] = {
            "message_id": self._new_id(chat),
            "date": int(time.time()),
            "chat": self.chat(chat),
            "from": self.user(user_id, bot=bot),
        }
        entities: list[dict[str, Any]] = []
        if mention:
            entities.append({"type": "mention", "offset": 0, "length": utf16(f"@{BOT['username']}")})
        if text.startswith("/"):
            command = text.split(" ", 1)[0]
            entities.append({"type": "bot_command", "offset": 0, "length": utf16(command)})
        if photo is not None or document is not None:
            if text:
                message["caption"] = text
                if entities:
                    message["caption_entities"] = entities
            if photo is not None:
                size = self.declared.get(photo, len(self.files.get(photo, b"")))
                message["photo"] = [
                    {"file_id": f"{photo}", "file_unique_id": f"u{photo}", "width": 1, "height": 1, "file_size": size}
                ]
            if document is not None:
                file_id, mime = document
                message["document"] = {
                    "file_id": file_id,
                    "file_unique_id": f"u{file_id}",
                    "file_name": f"{file_id}.bin",
                    "mime_type": mime,
                    "file_size": self.declared.get(file_id, len(self.files.get(file_id, b""))),
                }
        else:
            message["text"] = text
            if entities:
                message["entities"] = entities
        if thread is not None:
            message["message_thread_id"] = thread
            message["is_topic_message"] = True
        if reply_to is not None:
            message["reply_to_message"] = self.payload(reply_to)
        return self.push({"message": message})

    def press(self, user_id: int, message: FakeMessage, action: str) -> dict[str, Any]:
        """A ``callback_query`` update: ``user_id`` presses the button ``action`` under ``message``."""
        query = {
            "id": str(next(self._file_ids) + 900000),
            "from": self.user(user_id),
            "message": self.payload(message),
            "chat_instance": "1",
            "data": action,
        }
        return self.push({"callback_query": query})

    def add_file(self, data: bytes) -> str:
        """Serve ``data`` as a file; its ``file_id``."""
        file_id = f"file{next(self._file_ids)}"
        self.files[file_id] = data
        return file_id

    def in_chat(self, chat_id: int, thread: int | None = None, *, any_thread: bool = False) -> list[FakeMessage]:
        """The bot's messages in a chat (a topic, or the chat's general part), oldest first, not deleted."""
        return [
            m
            for key, m in sorted(self.messages.items())
            if m.chat_id == chat_id and key not in self.deleted and (any_thread or m.thread == thread)
        ]
