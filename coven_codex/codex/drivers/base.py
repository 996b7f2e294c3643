"""The driver interface: how a thought reaches Codex, whichever way the CLI is driven.

A driver serves one conversation (one Codex thread). Two implementations exist:
:class:`~coven_codex.codex.drivers.app_server.AppServerDriver` (one long-running
``codex app-server`` speaking JSON-RPC; Codex 0.169+) and
:class:`~coven_codex.codex.drivers.exec.ExecDriver` (one ``codex exec --json ... resume <id> -``
process per turn; every version). :func:`coven_codex.codex.drivers.create_driver` picks one.

Construction::

    driver = create_driver(executable, version, workspace, env=home.env,
                           settings=driver_settings(settings), sink=on_event)

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
- ``await submit(thought) -> Submission``: hand over a :class:`~coven_codex.codex.thought.Thought`, the
  conversation's own value, kept as it is in the driver's queue and turned into Codex's input only
  here, at the driver's edge (its :class:`~coven_codex.codex.thought.ImageInput` images: app-server
  ``localImage``/``image`` input items, exec ``--image``); returns once Codex
  accepted it (app-server: ``turn/start``/``turn/steer`` answered) or its bytes are written to
  the process's stdin (exec), or once it is queued behind the running turn. Queued thoughts
  start in order as turns end. With ``mid_turn="steer"`` (app-server only) a thought arriving
  during a running turn is added to it with ``turn/steer``. The thought's id is the journal entry id;
  the app-server passes it as ``clientUserMessageId`` so the rollout records it (the events name
  thoughts by it: their client ids).
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
import enum
import logging
from collections import deque
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from coven_codex.codex.driver_settings import DriverSettings
from coven_codex.codex.drivers.events import EventDispatcher, EventSink, Submission
from coven_codex.codex.errors import ClassifiedError, DriverError, classify, collect_stderr
from coven_codex.codex.tasks import Job, TaskRunner
from coven_codex.codex.thought import Thought
from coven_codex.codex.version import CodexVersion
from coven_codex.support.lifecycle import Lifecycle, transitions

log = logging.getLogger(__name__)


class DriverPhase(enum.Enum):
    """Where a driver is in its life (:data:`DRIVER_TRANSITIONS`; moved by the driver alone)."""

    NEW = "new"
    """Made, not started."""
    RUNNING = "running"
    """Its tasks run: it takes thoughts."""
    FAILED = "failed"
    """Its Codex died or stopped answering (:attr:`CodexDriver.failed` says why): it takes nothing more."""
    CLOSED = "closed"
    """:meth:`CodexDriver.aclose` was called: its processes end, then its tasks."""


DRIVER_TRANSITIONS = transitions(
    (DriverPhase.NEW, (DriverPhase.RUNNING, DriverPhase.FAILED, DriverPhase.CLOSED)),
    (DriverPhase.RUNNING, (DriverPhase.FAILED, DriverPhase.CLOSED)),
    (DriverPhase.FAILED, (DriverPhase.CLOSED,)),
)
"""Every move a driver may make; any other is a bug (:class:`~coven_codex.support.lifecycle.LifecycleError`)."""


class CodexDriver(abc.ABC):
    """The interface both drivers implement (see the module docstring), and what they share.

    A driver's tasks (the event dispatcher, the readers of its processes, its timers) live in one
    task group (a :class:`~coven_codex.codex.tasks.TaskRunner`), started by :meth:`_start_runner`,
    until :meth:`aclose`. A task that fails with a bug fails the driver (:meth:`_fail`) instead of
    vanishing. Queued thoughts are started, in order, by :meth:`_pump` whenever no turn runs.
    """

    kind: ClassVar[str]
    persistent: ClassVar[bool]
    """One process serves every turn (app-server); ``False``: a process per turn (exec)."""
    supports_steer: bool
    """Thoughts can join a running turn (app-server with `turn/steer`; see the driver's plan)."""
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
        self._queue: deque[Thought] = deque()
        self._thread_id: str | None = None
        self._tasks = TaskRunner(f"codex-{self.kind}-driver", self._on_task_failure)
        self._lock = asyncio.Lock()
        """Held while a thought is being handed over, so thoughts reach Codex in order."""
        self._lifecycle = Lifecycle(
            f"the {self.kind} driver", DRIVER_TRANSITIONS, DriverPhase.NEW, where="coven_codex/codex/drivers/base.py"
        )
        self._failed: ClassifiedError | None = None
        """Why the driver failed (:attr:`DriverPhase.FAILED`)."""
        self._failed_returncode: int | None = None

    @property
    def thread_id(self) -> str | None:
        """The Codex thread, once known."""
        return self._thread_id

    @property
    def queued(self) -> tuple[str, ...]:
        """Client ids of thoughts waiting for the running turn to end."""
        return tuple(thought.id for thought in self._queue)

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

    @abc.abstractmethod
    async def submit(self, thought: Thought) -> Submission:
        """Hand over ``thought`` (its text, images and the schema its answer must match, where the driver
        can constrain it: app-server); returns once Codex has it or it is queued (module docstring)."""
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
    def phase(self) -> DriverPhase:
        """Where the driver is in its life."""
        return self._lifecycle.phase

    @property
    def failed(self) -> ClassifiedError | None:
        """Why the driver died, if it did."""
        return self._failed

    async def aclose(self) -> None:
        """End every Codex process of the driver, then its tasks; deliver what was emitted."""
        if self._lifecycle.is_in(DriverPhase.CLOSED):
            return
        self._lifecycle.move(DriverPhase.CLOSED)
        await self._end_processes()
        await self._tasks.stop()
        await self._events.drain()

    # -- for the implementations ---------------------------------------------------------------
    @abc.abstractmethod
    async def _start_turn(self, thought: Thought) -> None:
        """Hand ``thought`` to Codex as a new turn (called with :attr:`_lock` held)."""

    @abc.abstractmethod
    def _fail(self, error: ClassifiedError, returncode: int | None) -> None:
        """The driver cannot go on: remember why (:meth:`_failing`), end its turn, emit :class:`DriverFailed` once."""

    def _failing(self, error: ClassifiedError, returncode: int | None) -> bool:
        """Move to :attr:`DriverPhase.FAILED` for ``error``; ``False`` if the driver failed or was closed before."""
        if not self._lifecycle.is_in(DriverPhase.NEW, DriverPhase.RUNNING):
            return False
        self._lifecycle.move(DriverPhase.FAILED)
        self._failed = error
        self._failed_returncode = returncode
        return True

    @abc.abstractmethod
    async def _end_processes(self) -> None:
        """:meth:`aclose`'s first step: end the driver's Codex process trees."""

    async def _start_runner(self, *jobs: Job) -> None:
        """Start the task group with the event dispatcher and ``jobs`` (name, coroutine)."""
        if not self._lifecycle.is_in(DriverPhase.NEW):
            for _, coro in jobs:
                coro.close()
            raise DriverError(f"the {self.kind} driver was already started ({self.phase.value})")
        await self._tasks.start(("driver-events", self._events.run()), *jobs)
        self._lifecycle.move(DriverPhase.RUNNING)

    async def _on_task_failure(self, group: BaseExceptionGroup[Exception]) -> None:
        for exc in group.exceptions:
            log.error("%s driver task failed", self.kind, exc_info=exc)
        bug = _innermost(group)
        self._fail(classify(f"internal error in the {self.kind} driver: {type(bug).__name__}: {bug}"), None)
        await self._events.drain()  # the dispatcher went down with the group

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str | None = None) -> asyncio.Task[None]:
        """Run ``coro`` in the driver's task group."""
        task = self._tasks.spawn(coro, name)
        if task is None:
            raise DriverError(f"the {self.kind} driver is not running")
        return task

    def _check_alive(self) -> None:
        if self._failed is not None:
            raise DriverError(
                f"the {self.kind} driver failed ({self._failed.message}); start a new driver",
                returncode=self._failed_returncode,
            )
        if not self._lifecycle.is_in(DriverPhase.RUNNING):
            raise DriverError(f"the {self.kind} driver is not running")

    async def _pump(self) -> None:
        """Start queued thoughts, in order, while no turn runs."""
        async with self._lock:
            while not self.busy and self._queue and self._lifecycle.is_in(DriverPhase.RUNNING):
                try:
                    await self._start_turn(self._queue.popleft())
                except DriverError as exc:  # the driver failed meanwhile; DriverFailed says so
                    log.info("queued thought not started: %s", exc)
                    return

    async def _collect_stderr(self, stream: asyncio.StreamReader | None, into: deque[str]) -> None:
        """Keep the last lines a Codex process writes on stderr (they explain its end); log them."""
        await collect_stderr(stream, into, self.label)


def _innermost(exc: BaseException) -> BaseException:
    """The first exception an exception group (of groups) holds."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
