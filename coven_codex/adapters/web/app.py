"""The page server: a Starlette app with the page, the live channel, uploads and stored images.

Routes (all behind :class:`~coven_codex.adapters.web.auth.Guard`):

- ``GET /``: the page; ``GET /static/app.js``, ``/static/style.css``: its script and style
- ``WS /live``: the live channel (:mod:`.protocol`), which logs in with its first message
- ``POST /upload``: an image (raw body, at most 10 MiB); answers ``{"name": ...}``
- ``GET /attachments/<name>``: a stored image
- ``GET /files/<name>?name=<shown name>``: a file Codex sent (files out), as a download
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket, WebSocketDisconnect

from coven_codex.adapters.kit.commands import DECISIONS, HELP, Command, parse_command, settings_entry, settings_sent
from coven_codex.adapters.kit.history import (
    SENDER_ID_FIELD,
    format_history,
    format_list,
    parse_count,
    sender_id,
    settled,
)
from coven_codex.adapters.kit.resume import resume_command
from coven_codex.adapters.web.auth import NEEDS_TOKEN, Access, Guard, Sessions
from coven_codex.adapters.web.hub import Hub
from coven_codex.adapters.web.protocol import (
    CLIENT_MESSAGE,
    LOGIN_MESSAGE,
    Challenge,
    Conversations,
    Device,
    Entries,
    Hello,
    LoginDevice,
    LoginToken,
    Notice,
    Refused,
    SendApproval,
    SendCancel,
    SendReset,
    SendThought,
    Subscribe,
)
from coven_codex.adapters.web.render import WireEntry, clip
from coven_codex.attachments import (
    FILE_KINDS,
    MAX_IMAGE_BYTES,
    OUT_FOLDER,
    SENT_NAME,
    ImageStore,
    UnsentUploads,
    UploadError,
)
from coven_codex.entries import ApprovalEntry, BaseEntry, CancelEntry, ResetEntry, SettingsEntry, ThoughtEntry
from coven_codex.journal import Journal, JournalError
from coven_codex.metrics.checks import report_lag
from coven_codex.metrics.server import MetricsServer

log = logging.getLogger(__name__)

WEB = "web"
"""The web page's platform name in a thought's ``sender_id`` (``web:<sender>``)."""
NOTICE_LIMIT = 16_000
"""Characters of a notice at most: a command's answer (``/history 20``: 40 lines of at most ~330) fits."""
STATIC = Path(__file__).resolve().parent / "static"
STATIC_FILES = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
BATCH = 200
"""Entries per ``entries`` message."""
SEND_TIMEOUT = 30.0
"""A tab that takes longer than this to take one message is disconnected (it reconnects and resumes)."""
IDLE_WAKE = 30.0
"""The push loop's longest sleep; it normally wakes on new entries."""
SWEEP_INTERVAL = 600.0
"""How often unsent uploads past their age are deleted (also before every upload)."""
LOGIN_TIMEOUT = 10.0
"""A new live channel that has not logged in within this is closed."""
MAX_PENDING_LOGINS = 32
"""Live channels waiting to log in, at most: a newer one closes the oldest (a page logs in at once)."""
STALE_DEVICE = (
    "This browser's saved login is not valid any more (the page server was started with another token). "
    "Open the address that `coven-codex web` printed (it ends with ?token=...)."
)


class _TabGone(Exception):
    """The tab closed its connection."""


class LiveConnection:
    """One tab's live channel: what it asked to see, and what it has been sent."""

    def __init__(self, websocket: WebSocket, hub: Hub, writer: JournalWriter, hello: Hello) -> None:
        self.websocket = websocket
        self.hub = hub
        self.writer = writer
        self.hello = hello
        self._conversation: str | None = None
        self._after: int | None = None
        self._subscription: Subscribe | None = None
        self._wake = asyncio.Event()

    async def run(self) -> None:
        """Serve the tab until it goes away."""
        await self._send(self.hello.model_copy(update={"conversations": self.hub.names()}).model_dump_json())
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._receive())
                group.create_task(self._push())
        except* (_TabGone, WebSocketDisconnect):
            pass

    async def _send(self, text: str) -> None:
        try:
            await asyncio.wait_for(self.websocket.send_text(text), SEND_TIMEOUT)
        except TimeoutError:
            log.warning("a tab took more than %.0f s to take a message; disconnecting it", SEND_TIMEOUT)
            with contextlib.suppress(Exception):
                await self.websocket.close(code=1013)
            raise _TabGone from None
        except (RuntimeError, OSError):
            raise _TabGone from None

    async def _receive(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                raise _TabGone
            raw = message.get("text") or message.get("bytes") or ""
            try:
                request = CLIENT_MESSAGE.validate_json(raw)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "message"
                await self._notice(f"message refused: {where}: {first['msg']}")
                continue
            if isinstance(request, Subscribe):
                self._subscription = request
                self._wake.set()
                continue
            problem = await self.writer.act(request)
            if problem:
                await self._notice(problem)

    async def _notice(self, text: str) -> None:
        await self._send(Notice(text=clip(text, NOTICE_LIMIT)).model_dump_json())

    async def _push(self) -> None:
        names_sent = -1
        while True:
            version, event = self.hub.version, self.hub.event
            self._wake.clear()
            if self.hub.names_version != names_sent:
                names_sent = self.hub.names_version
                await self._send(Conversations(conversations=self.hub.names()).model_dump_json())
            history = False
            if self._subscription is not None:
                self._conversation, self._after = self._subscription.conversation, self._subscription.after
                self._subscription, history = None, True
            if self._conversation is not None:
                await self._send_entries(self._conversation, history)
            if self.hub.version == version and self._subscription is None:
                await _first(event.wait(), self._wake.wait(), within=IDLE_WAKE)

    async def _send_entries(self, conversation: str, history: bool) -> None:
        entries = self.hub.entries_after(conversation, self._after)
        if not entries and not history:
            return
        batches: list[list[WireEntry]] = [entries[i : i + BATCH] for i in range(0, len(entries), BATCH)] or [[]]
        for batch in batches:
            await self._send(Entries(conversation=conversation, history=history, entries=batch).model_dump_json())
            if batch:
                self._after = batch[-1].end
            if self._subscription is not None:
                return  # the tab switched conversation; the rest is not wanted


class LoginGate:
    """The live channels waiting to log in: at most :data:`MAX_PENDING_LOGINS`, the oldest evicted
    (connections that never log in cannot hold the server's connection slots)."""

    def __init__(self, limit: int = MAX_PENDING_LOGINS) -> None:
        self.limit = limit
        self._pending: collections.OrderedDict[int, asyncio.Event] = collections.OrderedDict()
        self._next = 0
        self.evicted = 0

    @contextlib.contextmanager
    def waiting(self) -> Iterator[asyncio.Event]:
        """A slot while a channel logs in; its event is set when a newer channel evicts it."""
        while len(self._pending) >= self.limit:
            _, oldest = self._pending.popitem(last=False)
            oldest.set()
            self.evicted += 1
        self._next += 1
        key, evicted = self._next, asyncio.Event()
        self._pending[key] = evicted
        try:
            yield evicted
        finally:
            self._pending.pop(key, None)


async def login(websocket: WebSocket, access: Access, evicted: asyncio.Event) -> Device | Refused | None:
    """Challenge a new live channel and check its answer: the device key handed out (None for a
    device login), or what was refused. Raises TimeoutError when no answer comes in time or a
    newer channel took its place (``evicted``)."""
    nonce = secrets.token_urlsafe(32)
    await websocket.send_text(Challenge(nonce=nonce).model_dump_json())
    receiving = asyncio.ensure_future(websocket.receive())
    await _first(_done(receiving), evicted.wait(), within=LOGIN_TIMEOUT)
    if not receiving.done() or receiving.cancelled():
        receiving.cancel()
        await asyncio.gather(receiving, return_exceptions=True)
        raise TimeoutError
    message = receiving.result()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    try:
        answer = LOGIN_MESSAGE.validate_json(message.get("text") or message.get("bytes") or "")
    except ValidationError:
        return Refused(text="the live channel must log in first; " + NEEDS_TOKEN.strip())
    match answer:
        case LoginToken() if access.token_ok(answer.token):
            if not answer.device:
                return None
            device, secret = access.new_device()
            return Device(id=device, secret=base64.urlsafe_b64encode(secret).rstrip(b"=").decode())
        case LoginDevice() if access.device_ok(answer.device, nonce, answer.proof):
            return None
        case LoginDevice():
            return Refused(text=STALE_DEVICE)
        case _:
            return Refused(text=NEEDS_TOKEN.strip())


async def _done(task: asyncio.Future[Any]) -> None:
    await asyncio.wait([task])


async def _first(*waits: Coroutine[Any, Any, object], within: float) -> None:
    """Wait until the first of ``waits`` is done, at most ``within`` seconds; cancel the others."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _measure(metrics: MetricsServer, hub: Hub, serving: Callable[[], bool]) -> None:
    """The page's part of its metrics port (docs/operations.md, Metrics and health): ``/readyz``'s
    ``platform`` check (the page is served and its hub has read the journal's history), and, when
    scraped, ``coven_platform_connected`` and the journal lag of reader ``adapter`` (what the hub
    has not read yet)."""
    instruments = metrics.instruments

    async def page() -> str | None:
        if not serving():
            return "not serving the page (starting, stopping, or the journal can no longer be read)"
        if not hub.caught_up.is_set():
            return "still reading the journal's history"
        return None

    async def refresh() -> None:
        instruments.platform_connected.set(1 if serving() else 0)
        await report_lag(hub.journal, instruments, "adapter", hub.position)

    instruments.refreshers.append(refresh)
    metrics.checks["platform"] = page


async def _follow(hub: Hub) -> None:
    """Run the hub; if the journal cannot be read any more, say so once (the page stops updating)."""
    try:
        await hub.run()
    except (JournalError, OSError) as exc:
        log.error(
            "cannot read the journal any more: %s; the page shows no new entries until coven-codex web is restarted",
            clip(str(exc), 300),
        )


async def _sweep_unsent(hub: Hub, unsent: UnsentUploads) -> None:
    """Delete unsent uploads past their age: once the hub knows every thought's images, then every
    :data:`SWEEP_INTERVAL` seconds."""
    await hub.caught_up.wait()
    while True:
        try:
            await unsent.sweep(hub.attached)
        except OSError as exc:
            log.warning("cannot clean up unsent images: %s", exc)
        await asyncio.sleep(SWEEP_INTERVAL)


class JournalWriter:
    """Appends what the page's buttons and composer ask for."""

    def __init__(self, journal: Journal, store: ImageStore, sender: str, hub: Hub, unsent: UnsentUploads) -> None:
        self.journal = journal
        self.hub = hub
        self.store = store
        self.unsent = unsent
        self.sender = sender
        self._failing = False

    async def act(self, request: SendThought | SendCancel | SendReset | SendApproval) -> str | None:
        """Append the entry ``request`` asks for; a message for the user when it cannot."""
        entry: BaseEntry
        match request:
            case SendThought() if (command := parse_command(request.text)) is not None and not request.attachments:
                return await self._command(request.conversation, command)
            case SendThought():
                attachments = [self.store.find(name) for name in request.attachments]
                if any(found is None for found in attachments):
                    return "an attached image is no longer stored; attach it again"
                if not request.text.strip() and not attachments:
                    return "nothing to send: type a message or attach an image"
                thought = ThoughtEntry(
                    conversation=request.conversation,
                    sender=self.sender,
                    text=request.text,
                    attachments=[a.attachment() for a in attachments if a is not None],
                ).model_copy(update={SENDER_ID_FIELD: sender_id(WEB, self.sender)})
                problem = await self._append(thought)
                if problem is None:
                    await self.unsent.sent(request.attachments)
                return problem
            case SendCancel():
                entry = CancelEntry(conversation=request.conversation, sender=self.sender)
            case SendReset():
                entry = ResetEntry(conversation=request.conversation, sender=self.sender)
            case SendApproval():
                entry = ApprovalEntry(
                    conversation=request.conversation,
                    sender=self.sender,
                    request_id=request.request_id,
                    decision=request.decision,
                )
        return await self._append(entry)

    async def _command(self, conversation: str, command: Command) -> str | None:
        """A ``/command`` typed in the composer (the kit's commands, the same in every chat)."""
        state = self.hub.state(conversation)
        match command.name:
            case "cancel":
                return await self._append(CancelEntry(conversation=conversation, sender=self.sender))
            case "new":
                return await self._append(ResetEntry(conversation=conversation, sender=self.sender))
            case "status":
                if state.settings is None:  # (not seen since this page's server started: the daemon says them)
                    problem = await self._append(SettingsEntry(conversation=conversation, sender=self.sender))
                    if problem is not None:
                        return problem
                return state.describe()
            case "project" | "model" | "mode":
                return await self._append(settings_entry(command, conversation, self.sender)) or settings_sent(command)
            case "approve" | "approve-session" | "deny":
                request_id = command.argument or (state.pending_approvals[0] if state.pending_approvals else "")
                if not request_id:
                    return "no approval request is waiting in this conversation"
                return await self._append(
                    ApprovalEntry(
                        conversation=conversation,
                        sender=self.sender,
                        request_id=request_id[:200],
                        decision=DECISIONS[command.name],
                    )
                )
            case "resume":  # (whoever has the page's token is its one user: every thread is theirs)
                note = await settled(self.hub.index, self.hub.caught_up)
                answer = resume_command(
                    self.hub.threads,
                    command.argument,
                    conversation,
                    sender=self.sender,
                    origin="web",
                    user_id="",
                    admin=True,
                )
                if answer.reset is not None:
                    problem = await self._append(answer.reset)
                    if problem is not None:
                        return problem
                return note + answer.reply
            case "list":
                note = await settled(self.hub.index, self.hub.caught_up)
                return note + format_list(self.hub.index.listed(sender_id(WEB, self.sender)), str)
            case "history":
                count = parse_count(command.argument)
                if isinstance(count, str):
                    return count
                note = await settled(self.hub.index, self.hub.caught_up)
                return note + format_history(self.hub.index.history(conversation, count), count)
            case "help":
                return HELP
        return f"unknown command /{command.name[:40]}; /help lists the commands"

    async def _append(self, entry: BaseEntry) -> str | None:
        try:
            await self.journal.append(entry)
        except (JournalError, OSError) as exc:
            if not self._failing:
                log.error("cannot append to the journal: %s", clip(str(exc), 300))
            self._failing = True
            return f"could not write to the journal: {clip(str(exc), 300)}; check the disk and the journal file"
        self._failing = False
        return None


def create_app(
    journal: Journal, store: ImageStore, access: Access, sender: str, metrics: MetricsServer | None = None
) -> ASGIApp:
    """The page server for ``journal``, guarded by ``access``; thoughts are sent as ``sender``.
    ``metrics``: the process's metrics port, which gets the page's readiness and measures."""
    hub = Hub(journal, store.folder)
    unsent = UnsentUploads(store)
    writer = JournalWriter(journal, store, sender, hub, unsent)
    sessions = Sessions()
    gate = LoginGate()
    tasks: list[asyncio.Task[None]] = []

    def serving() -> bool:
        """The page is served and its hub follows the journal."""
        return bool(tasks) and not tasks[0].done()

    if metrics is not None:
        _measure(metrics, hub, serving)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        tasks[:] = [
            asyncio.create_task(_follow(hub), name="web-hub"),
            asyncio.create_task(_sweep_unsent(hub, unsent), name="web-unsent-sweep"),
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def page(_request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return PlainTextResponse("not found\n", status_code=404)
        return FileResponse(STATIC / name, media_type=STATIC_FILES[name])

    async def attachment(request: Request) -> Response:
        found = store.find(request.path_params["name"])
        if found is None:
            return PlainTextResponse("no such image\n", status_code=404)
        return FileResponse(found.path, media_type=found.media_type)

    async def sent_file(request: Request) -> Response:
        stored = request.path_params["name"]
        path = store.folder / OUT_FOLDER / stored
        if not SENT_NAME.match(stored) or not path.is_file():
            return PlainTextResponse("no such file\n", status_code=404)
        shown = request.query_params.get("name") or stored
        media_type = FILE_KINDS[stored.rsplit(".", 1)[1]]
        return FileResponse(path, media_type=media_type, filename=shown[:200], content_disposition_type="attachment")

    async def upload(request: Request) -> Response:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_IMAGE_BYTES:
            return JSONResponse(
                {"error": f"the image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB; send a smaller one"},
                status_code=413,
            )
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > MAX_IMAGE_BYTES:
                return JSONResponse(
                    {"error": f"the image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB; send a smaller one"},
                    status_code=413,
                )
        try:
            if hub.caught_up.is_set():
                await unsent.sweep(hub.attached)
            stored = await unsent.save(bytes(data))
        except UploadError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        except OSError as exc:
            return JSONResponse({"error": f"could not store the image: {exc.strerror}"}, status_code=507)
        return JSONResponse({"name": stored.path.name, "url": f"/attachments/{stored.path.name}"})

    async def live(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            with gate.waiting() as evicted:
                outcome = await login(websocket, access, evicted)
        except (TimeoutError, WebSocketDisconnect, RuntimeError, OSError):
            with contextlib.suppress(Exception):
                await websocket.close(code=1008)
            return
        if isinstance(outcome, Refused):
            with contextlib.suppress(Exception):
                await websocket.send_text(outcome.model_dump_json())
                await websocket.close(code=1008)
            return
        session = sessions.issue()
        try:
            hello = Hello(sender=sender, conversations=[], session=session, device=outcome)
            await LiveConnection(websocket, hub, writer, hello).run()
        finally:
            sessions.revoke(session)

    app = Starlette(
        routes=[
            Route("/", page),
            Route("/static/{name}", static),
            Route("/attachments/{name}", attachment),
            Route("/files/{name}", sent_file),
            Route("/upload", upload, methods=["POST"]),
            WebSocketRoute("/live", live),
        ],
        lifespan=lifespan,
    )
    return Guard(app, access, sessions)
