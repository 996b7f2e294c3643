"""The app-server driver: one conversation's thread on a shared ``codex app-server`` (every
Codex whose protocol offers what it uses: :mod:`coven_codex.codex.capabilities`; 0.140 on).

The process and its wire live in :mod:`coven_codex.codex.appserver` (a pool of connections, one
per process, routing messages by ``threadId``); this driver is one thread on one of them: its
turn, its queue, its approvals and its clocks. It holds no process and no file descriptor of
its own. The process dying is :class:`~coven_codex.codex.drivers.base.DriverFailed` for every
thread on it; a new driver resumes the thread (``thread/resume``) on the next process.

The protocol (verified against ``codex app-server generate-json-schema`` and the real 0.169.0):
JSON-RPC messages, one JSON object per line, on the process's stdin/stdout (no ``"jsonrpc"``
member). ``initialize`` (``clientInfo``) then the ``initialized`` notification; ``thread/start``
(``cwd``) or ``thread/resume`` (``threadId``), whose result carries ``thread.id``; per thought
``turn/start`` (``threadId``, ``input: [{type: text, text}]``, ``clientUserMessageId``), answered
with ``turn.id`` before ``turn/started``; ``turn/steer`` (``expectedTurnId``) adds input to the
running turn; ``turn/interrupt`` (``turnId``) ends it with status ``interrupted``.

Notifications used: ``turn/started``, ``item/agentMessage/delta`` (``itemId``, ``delta``),
``item/completed`` (``item.type == "agentMessage"``), ``error`` (``error.message``,
``willRetry``), ``turn/completed`` (``turn.status`` ``completed|interrupted|failed`` and
``turn.error.message``; a model answering 401 gives ``unexpected status 401 Unauthorized: ...``
there), ``serverRequest/resolved``. Server requests used: ``item/commandExecution/requestApproval``
and ``item/fileChange/requestApproval`` (answer ``{decision: accept|decline}``), the legacy
``execCommandApproval``/``applyPatchApproval`` (``approved|denied``) and
``mcpServer/elicitation/request`` (``{action: accept|decline}``); any other server request is
answered with a JSON-RPC error so Codex does not wait for it.

Verified quirks: the thread's rollout file appears only with its first turn, and a thread
without one cannot be resumed (``thread/resume`` fails); the driver then starts a new thread
and says so in :class:`~coven_codex.codex.drivers.base.ThreadStarted`. ``approval_policy =
"untrusted"`` is rejected by 0.169 ("no longer supported"). Closing a driver interrupts its
running turn and unsubscribes its thread (``thread/unsubscribe``), so the process can let it go;
the process itself exits when the pool closes its stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

from pydantic import BaseModel, JsonValue, ValidationError

from coven_codex.codex.appserver.connection import AppServerConnection, ConnectionLost, RpcId
from coven_codex.codex.appserver.messages import (
    AgentMessageDelta,
    ErrorNotification,
    ItemCompleted,
    ThreadOpened,
    TurnNotification,
    TurnStartResult,
)
from coven_codex.codex.appserver.pool import AppServerPool
from coven_codex.codex.capabilities import DriverPlan
from coven_codex.codex.driver_settings import MODES, DriverSettings
from coven_codex.codex.drivers.approvals import APPROVAL_ACTIONS, ApprovalDesk
from coven_codex.codex.drivers.base import CodexDriver
from coven_codex.codex.drivers.clock import TurnClock
from coven_codex.codex.drivers.events import (
    AgentMessageCompleted,
    Delta,
    DriverFailed,
    EventSink,
    Submission,
    ThreadStarted,
    TurnExpired,
    TurnFinished,
    TurnStarted,
    TurnStatus,
)
from coven_codex.codex.errors import HINTS, ClassifiedError, DriverError, ErrorCode, classify, shorten
from coven_codex.codex.thought import Thought
from coven_codex.codex.version import CodexVersion
from coven_codex.jsonrpc import RpcError
from coven_codex.support.lifecycle import Lifecycle, transitions

log = logging.getLogger(__name__)


RELAYED_REQUESTS = frozenset(APPROVAL_ACTIONS)
"""The server requests the driver relays to the chat as approvals; any other is refused."""


def unrelayed_approvals(plan: DriverPlan) -> list[str]:
    """Approval requests this Codex may send that the driver does not relay (it refuses them)."""
    return sorted(plan.approval_requests - RELAYED_REQUESTS)


_STATUSES: dict[str, TurnStatus] = {"completed": "completed", "interrupted": "interrupted", "failed": "failed"}


class Attachment(enum.Enum):
    """The driver's thread on the shared process: not attached yet, attached, let go (for good)."""

    NOT_YET = "not_yet"
    ATTACHED = "attached"
    DETACHED = "detached"


ATTACHMENT_TRANSITIONS = transitions(
    (Attachment.NOT_YET, (Attachment.ATTACHED, Attachment.DETACHED)),
    (Attachment.ATTACHED, (Attachment.DETACHED,)),
)
"""A thread is attached once; a driver whose thread was let go (closed, failed, process lost) does not attach again."""


@dataclass(slots=True)
class _Turn:
    client_ids: list[str]
    clock: TurnClock
    turn_id: str | None = None
    announced: bool = False
    forced_error: ClassifiedError | None = None
    cancel_requested: bool = False
    stopping: bool = False
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    watchdog: asyncio.Task[None] | None = None


class AppServerDriver(CodexDriver):
    """See :mod:`coven_codex.codex.drivers.base` for the interface and this module for the wire."""

    kind: ClassVar[str] = "app-server"
    persistent: ClassVar[bool] = True
    label: ClassVar[str] = "the Codex app-server"

    def __init__(
        self,
        executable: Path,
        version: CodexVersion,
        workspace: Path,
        *,
        env: Mapping[str, str],
        settings: DriverSettings,
        sink: EventSink,
        command: Sequence[str] = (),
        pool: AppServerPool | None = None,
        plan: DriverPlan,
    ) -> None:
        """``pool``: the shared app-servers to put the thread on; without one the driver has a
        pool of its own, of one process, which it ends when it is closed. ``plan``: what this
        Codex's protocol offers (:func:`coven_codex.codex.capabilities.plan_driver`)."""
        super().__init__(executable, version, workspace, env=env, settings=settings, sink=sink, command=command)
        self.supports_steer = plan.steer
        self._unsubscribe = plan.unsubscribe
        self._own_pool = pool is None
        self._pool = pool or AppServerPool(self.command, env=self.env, cwd=workspace, settings=settings)
        self._conn: AppServerConnection | None = None
        self._attachment = Lifecycle(
            "the app-server driver's thread", ATTACHMENT_TRANSITIONS, Attachment.NOT_YET, where=__name__
        )
        self._turn: _Turn | None = None
        self._desk = ApprovalDesk(
            settings,
            emit=self._events.emit,
            spawn=self._spawn,
            respond=lambda rpc_id, answer: self._require_conn().respond(rpc_id, answer),
            refuse=lambda rpc_id, message: self._require_conn().respond_error(rpc_id, message),
            clock=lambda: self._turn.clock if self._turn is not None else None,
        )
        self._killed_because: ClassifiedError | None = None

    # -- properties ----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """A turn is running."""
        return self._turn is not None

    @property
    def pids(self) -> list[int]:
        """The shared process this thread is on (while attached): a hint for the process registry."""
        conn = self._conn
        pid = conn.pid if conn is not None and self._attachment.is_in(Attachment.ATTACHED) and conn.alive else None
        return [pid] if pid is not None else []

    # -- start -----------------------------------------------------------------------------------
    async def start(self, resume_thread_id: str | None) -> None:
        """Attach to a shared app-server and open the thread (resumed, or a new one); :class:`DriverError` if not."""
        if self._conn is not None or self._tasks.started:
            raise DriverError("the app-server driver was already started")
        await self._start_runner()
        try:
            self._conn = await self._pool.connect(resume_thread_id)
            await self._open_thread(resume_thread_id)
        except ConnectionLost as exc:  # the process died while the thread was opened: say why
            self._fail(exc.error, exc.returncode)
            await self.aclose()
            raise
        except BaseException:
            await self.aclose()
            raise

    async def _open_thread(self, resume_thread_id: str | None) -> None:
        try:
            result: JsonValue = None
            note = None
            if resume_thread_id is not None:
                try:
                    resume: dict[str, JsonValue] = {
                        "threadId": resume_thread_id,
                        "cwd": str(self.workspace),
                        **chosen_options(self.settings),
                    }
                    result = await self._live_conn().resume(resume)
                except RpcError as exc:
                    note = f"could not resume thread {resume_thread_id} ({exc}); started a new thread"
                    log.warning("%s", note)
            resumed = result is not None
            if result is None:
                options: dict[str, JsonValue] = {"cwd": str(self.workspace), **chosen_options(self.settings)}
                if self.settings.fork_from is not None:
                    result = await self._request("thread/fork", {"threadId": self.settings.fork_from, **options})
                else:
                    result = await self._request("thread/start", options)
        except RpcError as exc:
            raise DriverError(f"the Codex app-server refused to open the thread: {exc}") from None
        try:
            thread_id = ThreadOpened.model_validate(result).thread.id
        except ValidationError:
            raise DriverError("the Codex app-server opened a thread without telling its id") from None
        self._thread_id = thread_id
        assert self._conn is not None
        self._conn.attach(thread_id, self)
        self._attachment.move(Attachment.ATTACHED)
        await self._events.deliver(ThreadStarted(thread_id, resumed=resumed, note=note))

    # -- thoughts ----------------------------------------------------------------------------------
    async def submit(self, thought: Thought) -> Submission:
        """Start a turn with ``thought``, steer it into the running turn (``mid_turn="steer"``) or queue it."""
        async with self._lock:
            self._check_alive()
            turn = self._turn
            if turn is None and not self._queue:
                await self._start_turn(thought)
                return "started"
            if (
                turn is not None
                and self.settings.mid_turn == "steer"
                and self.supports_steer
                and turn.turn_id is not None
            ):
                try:
                    await self._request("turn/steer", {**self._turn_params(thought), "expectedTurnId": turn.turn_id})
                except RpcError as exc:
                    log.info("could not steer turn %s (%s); queueing the thought", turn.turn_id, exc)
                else:
                    turn.client_ids.append(thought.id)
                    turn.clock.touch()
                    return "steered"
            self._queue.append(thought)
            if self._turn is None:
                self._spawn(self._pump())
            return "queued"

    def _turn_params(self, thought: Thought) -> dict[str, JsonValue]:
        """The params ``turn/start`` and ``turn/steer`` share: the thread, the thought's input items
        (its images, then its text) and its id as ``clientUserMessageId``."""
        return {
            "threadId": self._require_thread(),
            "input": input_items(thought),
            "clientUserMessageId": thought.id,
        }

    async def _start_turn(self, thought: Thought) -> None:
        turn = _Turn([thought.id], TurnClock(self.settings.turn_timeout, self.settings.stream_idle_timeout))
        self._turn = turn
        turn.watchdog = self._spawn(self._watch_turn(turn))
        try:
            params = self._turn_params(thought)
            if thought.output_schema is not None:
                params["outputSchema"] = thought.output_schema
            result = await self._request("turn/start", params)
        except RpcError as exc:
            self._finish_turn(turn, "failed", classify(f"Codex refused the thought: {exc}"))
            return
        started = _parsed(TurnStartResult, result)
        if started is not None and started.turn is not None and started.turn.id is not None and turn.turn_id is None:
            turn.turn_id = started.turn.id
        if turn.cancel_requested and not turn.ended.is_set():
            self._spawn(self._stop_turn(turn, None))

    # -- cancel and approvals ----------------------------------------------------------------------
    async def cancel(self) -> bool:
        """Ask the app-server to interrupt the running turn and return at once; ``False`` if none runs."""
        turn = self._turn
        if turn is None or self._failed is not None:
            return False
        turn.cancel_requested = True
        if turn.turn_id is not None:  # else turn/start's answer brings the id, and the stop follows
            self._spawn(self._stop_turn(turn, None), name="app-server-stop-turn")
        return True

    async def _stop_turn(self, turn: _Turn, error: ClassifiedError | None) -> None:
        """Interrupt ``turn``; if it has not ended ``kill_grace`` seconds later (acknowledged or
        not: a stopped Codex answers nothing), the driver fails with ``KILL_TIMEOUT`` and the
        process tree is killed at once. Every wait here shares that one deadline."""
        if turn.stopping or turn.ended.is_set():
            return
        turn.stopping = True
        grace = self.settings.kill_grace
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        answered = await self._interrupt(turn, grace)
        try:
            await asyncio.wait_for(turn.ended.wait(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            reason = error.message if error is not None else "the turn was cancelled"
            conn = self._conn
            if answered or conn is None:
                # The shared process answers: only this thread is stuck. It is let go (the turn
                # is abandoned in Codex); the others on the process go on.
                self._fail(
                    ClassifiedError(
                        ErrorCode.KILL_TIMEOUT,
                        shorten(f"{reason}; Codex did not stop the turn within {grace:g}s of the interrupt"),
                        HINTS[ErrorCode.KILL_TIMEOUT],
                    ),
                    None,
                )
                return
            # The process answers nothing at all: it is killed, which ends every thread on it.
            # Killed first, so that when DriverFailed arrives nothing of this Codex runs any more.
            self._killed_because = ClassifiedError(
                ErrorCode.KILL_TIMEOUT,
                shorten(f"{reason}; Codex did not stop the turn within {grace:g}s of the interrupt, so it was killed"),
                HINTS[ErrorCode.KILL_TIMEOUT],
            )
            await conn.kill(
                ClassifiedError(
                    ErrorCode.KILL_TIMEOUT,
                    shorten(f"the Codex app-server stopped answering for {grace:g}s, so it was killed"),
                    HINTS[ErrorCode.KILL_TIMEOUT],
                )
            )

    async def _interrupt(self, turn: _Turn, within: float) -> bool:
        """Ask Codex to interrupt ``turn``; ``True`` if the process answered (yes or no)."""
        if turn.turn_id is None or turn.ended.is_set():
            return True
        try:
            await self._request(
                "turn/interrupt", {"threadId": self._require_thread(), "turnId": turn.turn_id}, within=within
            )
        except RpcError as exc:
            log.info("turn/interrupt of %s: %s", turn.turn_id, exc)
        except DriverError as exc:
            log.info("turn/interrupt of %s not acknowledged: %s", turn.turn_id, exc)
            return False
        return True

    async def answer_approval(self, request_id: str, approve: bool, *, for_session: bool = False) -> None:
        """Answer a pending approval request from the chat (``for_session``: for the rest of the
        session); :class:`DriverError` if it is no longer pending."""
        await self._desk.answer(request_id, approve, for_session=for_session)

    # -- closing -----------------------------------------------------------------------------------
    async def _end_processes(self) -> None:
        """Let the thread go: interrupt its running turn and unsubscribe it (each bounded by
        ``kill_grace``), detach it from the shared process; end the process only if it is the
        driver's own."""
        conn, self._conn = self._conn, None
        if conn is not None:
            thread = self._thread_id
            if self._attachment.is_in(Attachment.ATTACHED) and thread is not None and conn.alive:
                turn = self._turn
                if turn is not None and turn.turn_id is not None and not turn.ended.is_set():
                    await self._interrupt_quietly(conn, thread, turn.turn_id)
                if self._unsubscribe:
                    with contextlib.suppress(RpcError, DriverError):
                        await conn.unsubscribe(thread)
                conn.detach(thread, self)
            self._attachment.move(Attachment.DETACHED)
            await self._pool.release(conn)
        if self._own_pool:
            await self._pool.aclose()

    async def _interrupt_quietly(self, conn: AppServerConnection, thread: str, turn_id: str) -> None:
        with contextlib.suppress(RpcError, DriverError):
            await conn.request(
                "turn/interrupt", {"threadId": thread, "turnId": turn_id}, within=self.settings.kill_grace
            )

    # -- the shared process ------------------------------------------------------------------------
    def on_connection_lost(self, error: ClassifiedError, returncode: int | None) -> None:
        """The shared process is gone (:class:`~coven_codex.codex.appserver.connection.ThreadClient`)."""
        self._attachment.move(Attachment.DETACHED)
        self._fail(self._killed_because or error, returncode)

    def _fail(self, error: ClassifiedError, returncode: int | None) -> None:
        if not self._failing(error, returncode):
            return
        conn = self._conn
        if conn is not None and self._attachment.is_in(Attachment.ATTACHED) and self._thread_id is not None:
            conn.detach(self._thread_id, self)  # the process may go on serving other threads
            self._attachment.move(Attachment.DETACHED)
        log.info("app-server thread %s failed: %s", self._thread_id, error.message)
        undelivered = self.queued
        self._queue.clear()
        turn, self._turn = self._turn, None
        in_flight: tuple[str, ...] = ()
        if turn is not None:
            in_flight = tuple(turn.client_ids)
            turn.ended.set()
            if turn.watchdog is not None and turn.watchdog is not asyncio.current_task():
                turn.watchdog.cancel()
        self._desk.clear()
        self._events.emit(DriverFailed(error, returncode, undelivered, in_flight))

    def on_notification(self, method: str, params: Mapping[str, JsonValue]) -> None:
        """A notification about this thread, routed here by the shared connection."""
        turn = self._turn
        if turn is not None:
            turn.clock.touch()
        if method == "item/agentMessage/delta":
            delta = _parsed(AgentMessageDelta, params)
            if self.settings.stream_deltas and delta is not None:
                self._events.emit(Delta(delta.item_id, delta.delta))
        elif method == "item/completed":
            completed = _parsed(ItemCompleted, params)
            if completed is not None and completed.item.type == "agentMessage":
                self._events.emit(AgentMessageCompleted(completed.item.id, completed.item.text))
        elif method == "turn/started":
            started = _parsed(TurnNotification, params)
            turn_id = started.turn.id if started is not None else None
            if turn is not None and (turn.turn_id is None or turn.turn_id == turn_id):
                turn.turn_id = turn_id if turn_id is not None else turn.turn_id
                if not turn.announced:
                    turn.announced = True
                    self._events.emit(TurnStarted(turn.turn_id, tuple(turn.client_ids)))
        elif method == "turn/completed":
            ended = _parsed(TurnNotification, params)
            if ended is None or turn is None:
                return
            if turn.turn_id is not None and ended.turn.id != turn.turn_id:
                return
            turn.turn_id = turn.turn_id or ended.turn.id
            status = _STATUSES.get(str(ended.turn.status), "failed")
            error = None
            if ended.turn.error is not None and ended.turn.error.message:
                error = classify(ended.turn.error.message)
            if status == "failed" and error is None:
                error = classify("the turn failed without a reason from Codex")
            self._finish_turn(turn, status, error)
        elif method == "error":
            reported = _parsed(ErrorNotification, params)
            text = reported.error.message if reported is not None and reported.error is not None else None
            if reported is not None and reported.will_retry:
                log.info("Codex will retry after: %s", shorten(str(text)))
            else:
                log.warning("Codex reported: %s", shorten(str(text)))
        elif method == "serverRequest/resolved":
            self._desk.resolved_by_codex(params.get("requestId"))

    def on_server_request(self, rpc_id: RpcId, method: str, params: Mapping[str, JsonValue]) -> None:
        """A request of Codex about this thread (an approval), routed here by the shared connection."""
        if self._turn is not None:
            self._turn.clock.touch()
        self._desk.asked(rpc_id, method, params)

    # -- turn bookkeeping --------------------------------------------------------------------------
    def _finish_turn(self, turn: _Turn, status: TurnStatus, error: ClassifiedError | None) -> None:
        if turn.ended.is_set():
            return
        turn.ended.set()
        if turn.forced_error is not None:
            status, error = "failed", turn.forced_error
        if self._turn is turn:
            self._turn = None
        if turn.watchdog is not None and turn.watchdog is not asyncio.current_task():
            turn.watchdog.cancel()
        self._desk.turn_ended(turn.turn_id)
        self._events.emit(TurnFinished(turn.turn_id, status, tuple(turn.client_ids), error))
        if self._queue:
            self._spawn(self._pump())

    async def _watch_turn(self, turn: _Turn) -> None:
        error = await turn.clock.expired()
        if turn.ended.is_set():
            return
        log.warning("turn %s: %s; interrupting it", turn.turn_id, error.message)
        turn.forced_error = error
        self._events.emit(TurnExpired(turn.turn_id, error))
        await self._stop_turn(turn, error)

    # -- wire ----------------------------------------------------------------------------------------
    def _require_thread(self) -> str:
        if self._thread_id is None:
            raise DriverError("the Codex thread is not open yet")
        return self._thread_id

    def _require_conn(self) -> AppServerConnection:
        conn = self._conn
        if conn is None or not self._attachment.is_in(Attachment.ATTACHED) or self._failed is not None:
            raise DriverError("the Codex app-server is not running")
        return conn

    async def _request(self, method: str, params: Mapping[str, JsonValue], *, within: float | None = None) -> JsonValue:
        """A request on the shared connection (see :meth:`AppServerConnection.request`)."""
        return await self._live_conn().request(method, params, within=within)

    def _live_conn(self) -> AppServerConnection:
        """The shared connection, unless the thread failed; raises :class:`DriverError`."""
        conn = self._conn
        if conn is None or self._failed is not None:
            raise DriverError("the Codex app-server is not running")
        return conn


_M = TypeVar("_M", bound=BaseModel)


def chosen_options(settings: DriverSettings) -> dict[str, JsonValue]:
    """The thread's model and mode (``approvalPolicy``, ``sandbox``) where the conversation chose them."""
    chosen: dict[str, JsonValue] = {}
    if settings.model is not None:
        chosen["model"] = settings.model
    mode = MODES.get(settings.mode) if settings.mode is not None else None
    if mode is not None:
        chosen["approvalPolicy"] = mode.approval_policy
        chosen["sandbox"] = mode.sandbox
    return chosen


def _parsed(model: type[_M], data: object) -> _M | None:
    """``data`` (a notification's params, a result) as ``model``, or ``None`` when it does not fit."""
    try:
        return model.model_validate(data)
    except ValidationError:
        log.warning("the app-server sent a %s that does not fit its schema; ignored", model.__name__)
        return None


def input_items(thought: Thought) -> list[JsonValue]:
    """The ``input`` of ``turn/start``/``turn/steer``: the thought's images (``localImage`` with a
    ``path``, or ``image`` with a ``url``), then its text."""
    items: list[JsonValue] = []
    for image in thought.images:
        if image.path is not None:
            items.append({"type": "localImage", "path": str(image.path)})
        elif image.url is not None:
            items.append({"type": "image", "url": image.url})
    items.append({"type": "text", "text": thought.text})
    return items
