"""The driver interface: how a thought reaches Codex, whichever way the CLI is driven.

A driver serves one conversation (one Codex thread). Two implementations exist:
:class:`~coven_codex.codex.drivers.app_server.AppServerDriver` (one long-running
``codex app-server`` speaking JSON-RPC; Codex 0.169+) and
:class:`~coven_codex.codex.drivers.exec.ExecDriver` (one ``codex exec --json ... resume <id> -``
process per turn; every version). :func:`coven_codex.codex.drivers.create_driver` picks one.

Construction::

    driver = create_driver(executable, version, workspace, env=home.env,
                           settings=DriverSettings.from_settings(settings), sink=on_event)

``sink`` is an ``async`` callable receiving :data:`DriverEvent` values, one at a time and in
order, from a dispatcher task of the driver (so the sink may call back into the driver, e.g.
``submit`` the next thought, without deadlocking). :func:`queue_sink` adapts an
``asyncio.Queue``. An exception raised by the sink is logged and does not stop the driver.

Calls:

- ``await start(resume_thread_id)``: start Codex and open the thread (app-server), or just
  remember the thread to resume (exec, which starts a process per turn). When it returns,
  a :class:`ThreadStarted` for an app-server thread has been *delivered* to the sink (the agent
  persists the id there). For exec the thread id is known only when the first turn's process
  prints it; :class:`ThreadStarted` is emitted then, before that turn ends.
- ``await submit(text, client_id, images) -> Submission``: hand over a thought (with its
  :class:`ImageInput` images: app-server ``localImage``/``image`` input items, exec ``--image``); returns once Codex
  accepted it (app-server: ``turn/start``/``turn/steer`` answered) or its bytes are written to
  the process's stdin (exec), or once it is queued behind the running turn. Queued thoughts
  start in order as turns end. With ``mid_turn="steer"`` (app-server only) a thought arriving
  during a running turn is added to it with ``turn/steer``. ``client_id`` is the journal entry id;
  the app-server passes it as ``clientUserMessageId`` so the rollout records it.
- ``await cancel() -> bool``: interrupt the running turn (``turn/interrupt``; exec: SIGINT) and
  return at once; a turn still running ``kill_grace`` seconds later has its process tree killed
  (app-server: the driver fails with ``KILL_TIMEOUT``). Queued thoughts stay queued and run
  next. ``False`` if no turn was running.
- ``await answer_approval(request_id, approve, for_session=False)``: answer an
  :class:`ApprovalRequested`; ``for_session`` approves it for the rest of the session (Codex's
  ``acceptForSession``/``approved_for_session``: the same command is not asked about again).
  Unanswered requests are declined after ``approval_timeout``; with ``approval_policy``
  ``"approve"``/``"deny"`` they are answered at once (:class:`ApprovalResolved` says so).
- ``await aclose()``: end every Codex process tree of the driver; safe to call twice.

Errors: every failure reaches the sink classified (:class:`~coven_codex.codex.errors.ClassifiedError`):
a failed turn (the model answered 401, the turn timed out, ...) is a :class:`TurnFinished` with
``status="failed"``; a Codex process that dies is :class:`DriverFailed` for the app-server (the
driver is then dead: create a new one and ``start(thread_id)`` to resume; ``in_flight`` and
``undelivered`` name the thoughts concerned) and a failed :class:`TurnFinished` for exec (whose
next turn simply starts a new process that resumes). A turn running longer than
``turn_timeout`` or silent for ``stream_idle_timeout`` (paused while an approval is pending)
is interrupted (:class:`TurnExpired` says so at once) and finishes as failed (``OUTER_TIMEOUT`` /
``STREAM_IDLE``); one that does not end
``kill_grace`` seconds after the interrupt is killed with its tree (app-server: ``DriverFailed``
with ``KILL_TIMEOUT``). Every wait on Codex is bounded: app-server requests and writes by
``stream_idle_timeout``, closing by ``kill_grace``, the sweep after SIGKILL by a constant
(:data:`~coven_codex.codex.process.KILL_WAIT`). Calls on a driver
that cannot serve them raise :class:`DriverError`. After ``aclose()`` no more events arrive.

Events, in the order a turn produces them: :class:`ThreadStarted`, :class:`TurnStarted`,
:class:`Delta` (app-server, if ``stream_deltas``), :class:`ApprovalRequested` /
:class:`ApprovalResolved`, :class:`AgentMessageCompleted`, :class:`TurnFinished`; and
:class:`DriverFailed` at any time.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import re
import signal
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from coven_codex.codex.errors import HINTS, ClassifiedError, ErrorCode, classify, shorten
from coven_codex.codex.version import CodexVersion
from coven_codex.entries import TokenUsage
from coven_codex.settings import Settings

log = logging.getLogger(__name__)

STDERR_LINES = 20
"""How many of a Codex process's last stderr lines are kept to explain its end."""
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

MidTurn = Literal["queue", "steer"]
ApprovalPolicy = Literal["ask", "approve", "deny"]
TurnStatus = Literal["completed", "interrupted", "failed"]
Submission = Literal["started", "steered", "queued"]
ResolvedBy = Literal["chat", "policy", "timeout"]


@dataclass(frozen=True, slots=True)
class DriverSettings:
    """The settings a driver needs (see :class:`coven_codex.settings.Settings`)."""

    turn_timeout: float = 600.0
    stream_idle_timeout: float = 540.0
    kill_grace: float = 5.0
    mid_turn: MidTurn = "queue"
    approval_policy: ApprovalPolicy = "ask"
    approval_timeout: float = 300.0
    stream_deltas: bool = True
    model: str | None = None
    """The model of the thread (``None``: Codex's configured one)."""
    fork_from: str | None = None
    """Open a new thread as a fork of this one (its history included) instead of an empty one (app-server only)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> DriverSettings:
        """The driver's part of the daemon's settings."""
        return cls(
            turn_timeout=settings.turn_timeout,
            stream_idle_timeout=settings.stream_idle_timeout,
            kill_grace=settings.kill_grace,
            mid_turn=settings.mid_turn,
            approval_policy=settings.approval_policy,
            approval_timeout=settings.approval_timeout,
            stream_deltas=settings.stream_deltas,
        )


# -- events -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ThreadStarted:
    """The Codex thread id is known: persist it now so a restart resumes this thread.

    ``resumed`` is ``False`` when a new thread was started, including when resuming the
    requested one failed (the reason is in ``note``).
    """

    thread_id: str
    resumed: bool
    note: str | None = None


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """A turn started in Codex; ``client_ids``: the thoughts it carries so far."""

    turn_id: str | None
    client_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """A turn ended. ``client_ids``: the thoughts it carried (started with it or steered in)."""

    turn_id: str | None
    status: TurnStatus
    client_ids: tuple[str, ...]
    error: ClassifiedError | None = None
    usage: TokenUsage | None = None
    """The tokens the turn used, when Codex reported them to the driver (exec's ``turn.completed``)."""

    @property
    def ok(self) -> bool:
        """The turn completed (not interrupted, not failed)."""
        return self.status == "completed"


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """Codex asks permission for ``action`` (e.g. ``run a command: touch x``)."""

    request_id: str
    action: str
    call_id: str | None


@dataclass(frozen=True, slots=True)
class ApprovalResolved:
    """An approval request was answered, by the chat, by the policy or by the timeout."""

    request_id: str
    approved: bool
    by: ResolvedBy


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of assistant text as it streams (app-server only; ephemeral)."""

    item_id: str
    text: str


@dataclass(frozen=True, slots=True)
class AgentMessageCompleted:
    """An assistant message is complete (the app-server's ``item/completed``; exec's item event)."""

    item_id: str
    text: str


@dataclass(frozen=True, slots=True)
class DriverFailed:
    """The driver cannot go on (its Codex process died or stopped answering).

    ``undelivered``: client ids of queued thoughts that never reached Codex. ``in_flight``:
    client ids of the turn that was running; they may or may not have reached Codex (the
    rollout tells: the app-server records them as ``client_id``).
    """

    error: ClassifiedError
    returncode: int | None
    undelivered: tuple[str, ...] = ()
    in_flight: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnExpired:
    """The running turn ran out of time (``OUTER_TIMEOUT`` / ``STREAM_IDLE``): the driver is ending it
    now; its :class:`TurnFinished` (failed, with the same error) follows once it has ended."""

    turn_id: str | None
    error: ClassifiedError


DriverEvent = (
    ThreadStarted
    | TurnStarted
    | TurnExpired
    | TurnFinished
    | ApprovalRequested
    | ApprovalResolved
    | Delta
    | AgentMessageCompleted
    | DriverFailed
)
EventSink = Callable[[DriverEvent], Awaitable[None]]


def queue_sink(queue: asyncio.Queue[DriverEvent]) -> EventSink:
    """An :data:`EventSink` that puts every event on ``queue``."""

    async def put(event: DriverEvent) -> None:
        await queue.put(event)

    return put


class DriverError(RuntimeError):
    """A driver call that cannot be served (not started, dead, unknown approval, ...)."""

    def __init__(self, message: str, *, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode
        """The Codex process's exit status when its end is why (see :func:`killed_from_outside`)."""


# -- classification helpers -------------------------------------------------------------------
def describe_exit(returncode: int | None) -> str:
    """A process's end for messages: ``exit N``, ``killed by signal N`` or ``still running``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exit {returncode}"


OUTSIDE_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""Signals that end Codex from outside (an operator, the OOM killer), unlike a crash (SIGSEGV, SIGABRT)."""


def killed_from_outside(returncode: int | None) -> bool:
    """Codex ended by one of :data:`OUTSIDE_SIGNALS`: a thought being handed over is not to blame."""
    return returncode is not None and returncode < 0 and -returncode in OUTSIDE_SIGNALS


def process_error(returncode: int | None, stderr_lines: Sequence[str], *, what: str = "Codex") -> ClassifiedError:
    """Classify an unexpected process end.

    A process killed by a signal is ``PROCESS_EXITED``. Otherwise its last *error* lines on
    stderr (Codex logs warnings there too, e.g. about the sandbox, which must not decide the
    code) are classified; when they say nothing known, it is ``PROCESS_EXITED`` as well.
    """
    detail = f"{what} exited unexpectedly ({describe_exit(returncode)})"
    errors = [line for line in stderr_lines if _ERROR_LINE.search(line) and not _WARNING_LINE.search(line)]
    tail = " | ".join(errors[-2:])
    if tail and (returncode is None or returncode > 0):
        by_text = classify(tail)
        if by_text.code is not ErrorCode.UNKNOWN:
            return by_text
    if tail:
        detail = f"{detail}: {tail}"
    return ClassifiedError(ErrorCode.PROCESS_EXITED, shorten(detail), HINTS[ErrorCode.PROCESS_EXITED])


_ERROR_LINE = re.compile(r"\berror\b|\bfatal\b|panicked", re.I)
_WARNING_LINE = re.compile(r"^\s*(?:WARNING|WARN)\b|\sWARN\s", re.I)


def timeout_error(turn_timeout: float) -> ClassifiedError:
    """The error of a turn that ran longer than ``turn_timeout`` (``OUTER_TIMEOUT``)."""
    return classify(f"the turn ran longer than the turn timeout ({turn_timeout:.0f}s)", exit_code=124)


def idle_error(idle_timeout: float) -> ClassifiedError:
    """The error of a turn silent for ``idle_timeout`` seconds (``STREAM_IDLE``)."""
    return classify(f"no output from Codex for {idle_timeout:.0f}s: stream idle, turn abandoned")


# -- shared machinery -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ImageInput:
    """An image a thought carries: a local file (``path``) or, where the driver takes one, an ``https`` ``url``."""

    path: Path | None = None
    url: str | None = None


@dataclass(slots=True)
class TurnInput:
    """One thought as the driver hands it to Codex: its text, client (journal entry) id and images.

    The driver queues it while another turn runs and starts a turn with it; it is not the session's
    :class:`coven_codex.agent.services.PendingThought`, which also carries the journal position.
    """

    text: str
    client_id: str
    images: tuple[ImageInput, ...] = ()


@dataclass(slots=True)
class EventDispatcher:
    """Delivers events to the sink in order from its own task."""

    sink: EventSink
    _queue: asyncio.Queue[tuple[DriverEvent, asyncio.Future[None] | None]] = field(default_factory=asyncio.Queue)

    def emit(self, event: DriverEvent) -> None:
        """Queue ``event`` for the sink without waiting for it to be handled."""
        self._queue.put_nowait((event, None))

    async def deliver(self, event: DriverEvent) -> None:
        """Emit ``event`` and wait until the sink has handled it."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((event, done))
        await done

    async def run(self) -> None:
        """Hand queued events to the sink one at a time; a sink that raises is logged and skipped."""
        while True:
            event, done = await self._queue.get()
            try:
                await self.sink(event)
            except Exception:
                log.exception("the driver's event sink failed on %s", type(event).__name__)
            finally:
                if done is not None and not done.done():
                    done.set_result(None)

    async def drain(self) -> None:
        """Deliver what is queued (used while closing, after :meth:`run` was cancelled)."""
        while not self._queue.empty():
            event, done = self._queue.get_nowait()
            with contextlib.suppress(Exception):
                await self.sink(event)
            if done is not None and not done.done():
                done.set_result(None)


class TurnClock:
    """Deadlines of one running turn: the turn timeout and the stream-idle timeout.

    :meth:`expired` sleeps until the next deadline (no polling while nothing happens) and
    returns the error once one has passed. Activity pushes the idle deadline back; while
    approvals are pending the idle deadline does not apply.
    """

    def __init__(self, turn_timeout: float, idle_timeout: float) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._turn_timeout = turn_timeout
        self._idle_timeout = idle_timeout
        self._deadline = loop.time() + turn_timeout
        self._last_activity = loop.time()
        self._waiting_for_approval = 0
        self._changed = asyncio.Event()

    def touch(self) -> None:
        """Codex showed activity: push the idle deadline back."""
        self._last_activity = self._loop.time()

    def approval_started(self) -> None:
        """An approval is pending: the idle deadline does not apply until it ends."""
        self._waiting_for_approval += 1
        self._changed.set()

    def approval_ended(self) -> None:
        """An approval was answered: activity, and the idle deadline applies again once none is pending."""
        self._waiting_for_approval = max(0, self._waiting_for_approval - 1)
        self.touch()
        self._changed.set()

    async def expired(self) -> ClassifiedError:
        """Sleep until the turn or idle deadline passes; returns the matching error."""
        while True:
            now = self._loop.time()
            if now >= self._deadline:
                return timeout_error(self._turn_timeout)
            idle_at = self._last_activity + self._idle_timeout
            if not self._waiting_for_approval and now >= idle_at:
                return idle_error(self._idle_timeout)
            wake = self._deadline if self._waiting_for_approval else min(self._deadline, idle_at)
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.0, wake - now))


class CodexDriver(abc.ABC):
    """The interface both drivers implement (see the module docstring), and what they share.

    A driver's tasks (the event dispatcher, the readers of its processes, its timers) live in one
    task group, run by a runner task from :meth:`_start_runner` until :meth:`aclose`. A task that
    fails with a bug fails the driver (:meth:`_fail`) instead of vanishing. Queued thoughts are
    started, in order, by :meth:`_pump` whenever no turn runs.
    """

    kind: ClassVar[str]
    persistent: ClassVar[bool]
    """One process serves every turn (app-server); ``False``: a process per turn (exec)."""
    supports_steer: bool
    """Thoughts can join a running turn (app-server with `turn/steer`; see the driver's plan)."""
    records_client_id: ClassVar[bool]
    label: ClassVar[str]
    """How messages name the driver's Codex process, e.g. ``the Codex app-server``."""

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
    ) -> None:
        self.executable = executable
        self.command: tuple[str, ...] = tuple(command) or (str(executable),)
        """What starts Codex, before its arguments (:class:`coven_codex.codex.launch.CodexLaunch`)."""
        self.version = version
        self.workspace = workspace
        self.env = dict(env)
        self.settings = settings
        self._events = EventDispatcher(sink)
        self._queue: deque[TurnInput] = deque()
        self._thread_id: str | None = None
        self._runner: asyncio.Task[None] | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._tg_ready = asyncio.Event()
        self._lock = asyncio.Lock()
        """Held while a thought is being handed over, so thoughts reach Codex in order."""
        self._closing = False
        self._closed = False
        self._failed: ClassifiedError | None = None
        self._failed_returncode: int | None = None

    @property
    def thread_id(self) -> str | None:
        """The Codex thread, once known."""
        return self._thread_id

    @property
    def queued(self) -> tuple[str, ...]:
        """Client ids of thoughts waiting for the running turn to end."""
        return tuple(thought.client_id for thought in self._queue)

    @property
    @abc.abstractmethod
    def busy(self) -> bool:
        """A turn is running."""

    @property
    @abc.abstractmethod
    def pids(self) -> list[int]:
        """Process-group leaders currently running for this driver."""

    @abc.abstractmethod
    async def start(self, resume_thread_id: str | None) -> None:
        """Start Codex and open the thread (app-server) or remember the thread to resume (exec)."""
        ...

    image_urls: ClassVar[bool]
    """Takes images by ``https`` URL as well as local files."""

    @abc.abstractmethod
    async def submit(self, text: str, client_id: str, images: tuple[ImageInput, ...] = ()) -> Submission:
        """Hand over a thought and its images; returns once Codex has it or it is queued (module docstring)."""
        ...

    @abc.abstractmethod
    async def cancel(self) -> bool:
        """Interrupt the running turn and return at once; ``False`` if no turn was running."""
        ...

    @abc.abstractmethod
    async def answer_approval(self, request_id: str, approve: bool, *, for_session: bool = False) -> None:
        """Answer an :class:`ApprovalRequested` (``for_session``: approve it for the rest of the session);
        :class:`DriverError` if it cannot be answered."""
        ...

    @property
    def failed(self) -> ClassifiedError | None:
        """Why the driver died, if it did."""
        return self._failed

    async def aclose(self) -> None:
        """End every Codex process of the driver, then its tasks; deliver what was emitted."""
        if self._closed:
            return
        self._closed = True
        self._closing = True
        await self._end_processes()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        await self._events.drain()

    # -- for the implementations ---------------------------------------------------------------
    @abc.abstractmethod
    async def _start_turn(self, thought: TurnInput) -> None:
        """Hand ``thought`` to Codex as a new turn (called with :attr:`_lock` held)."""

    @abc.abstractmethod
    def _fail(self, error: ClassifiedError, returncode: int | None) -> None:
        """The driver cannot go on: remember why, end its turn and emit :class:`DriverFailed` once."""

    @abc.abstractmethod
    async def _end_processes(self) -> None:
        """:meth:`aclose`'s first step: end the driver's Codex process trees."""

    async def _start_runner(self, *jobs: tuple[str, Coroutine[Any, Any, None]]) -> None:
        """Start the task group with the event dispatcher and ``jobs`` (name, coroutine)."""
        if self._runner is not None:
            raise DriverError(f"the {self.kind} driver was already started")
        self._runner = asyncio.create_task(self._run(jobs), name=f"codex-{self.kind}-driver")
        await self._tg_ready.wait()

    async def _run(self, jobs: tuple[tuple[str, Coroutine[Any, Any, None]], ...]) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                self._tg_ready.set()
                tg.create_task(self._events.run(), name="driver-events")
                for name, job in jobs:
                    tg.create_task(job, name=name)
        except* Exception as group:
            for exc in group.exceptions:
                log.error("%s driver task failed", self.kind, exc_info=exc)
            bug = _innermost(group)
            self._fail(classify(f"internal error in the {self.kind} driver: {type(bug).__name__}: {bug}"), None)
            await self._events.drain()  # the dispatcher went down with the group
        finally:
            self._tg = None  # a finished group takes no more tasks: _spawn says the driver is not running
            self._tg_ready.set()
            for _, coro in jobs:  # unstarted if the group failed at once: close, never leave unawaited
                coro.close()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str | None = None) -> asyncio.Task[None]:
        """Run ``coro`` in the driver's task group."""
        if self._tg is None:
            coro.close()
            raise DriverError(f"the {self.kind} driver is not running")
        return self._tg.create_task(coro, name=name)

    def _check_alive(self) -> None:
        if self._failed is not None:
            raise DriverError(
                f"the {self.kind} driver failed ({self._failed.message}); start a new driver",
                returncode=self._failed_returncode,
            )
        if self._closing or self._runner is None:
            raise DriverError(f"the {self.kind} driver is not running")

    async def _pump(self) -> None:
        """Start queued thoughts, in order, while no turn runs."""
        async with self._lock:
            while not self.busy and self._queue and self._failed is None and not self._closing:
                try:
                    await self._start_turn(self._queue.popleft())
                except DriverError as exc:  # the driver failed meanwhile; DriverFailed says so
                    log.info("queued thought not started: %s", exc)
                    return

    async def _collect_stderr(self, stream: asyncio.StreamReader | None, into: deque[str]) -> None:
        """Keep the last lines a Codex process writes on stderr (they explain its end); log them."""
        await collect_stderr(stream, into, self.label)


async def collect_stderr(stream: asyncio.StreamReader | None, into: deque[str], label: str) -> None:
    """Keep the last lines a Codex process writes on stderr in ``into`` (they explain its end); log them."""
    if stream is None:
        return
    with contextlib.suppress(ConnectionError, ValueError):
        while line := await stream.readline():
            text = ANSI.sub("", line.decode("utf-8", "replace")).strip()
            if text:
                into.append(text[:400])
                log.debug("%s stderr: %s", label, text[:400])


def _innermost(exc: BaseException) -> BaseException:
    """The first exception an exception group (of groups) holds."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
