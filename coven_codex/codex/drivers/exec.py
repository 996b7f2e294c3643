"""The exec driver: one ``codex exec`` process per turn (every Codex version, e.g. 0.47).

Each thought runs ``codex exec --json --skip-git-repo-check - `` (first turn of a new thread)
or ``codex exec --json --skip-git-repo-check resume <thread-id> -`` with the thought on stdin
(written, then stdin closed). Thoughts arriving while a turn runs are queued and run in order;
``mid_turn = "steer"`` is not possible here and falls back to queueing.

``--json`` prints one event per line (verified on 0.47.0 and 0.169.0): ``thread.started``
(``thread_id``; first, before the model is called, so the id is persisted before the turn
ends), ``turn.started``, ``item.completed`` (``item.type`` ``agent_message`` with ``text``;
0.169 also reports warnings as ``error`` *items*, which are not failures), ``error``
(``message``), and ``turn.completed`` or ``turn.failed`` (``error.message``; a model answering
401 gives ``exceeded retry limit, last status: 401 Unauthorized`` on 0.47 and ``unexpected
status 401 Unauthorized: ...`` on 0.169). The exit code is 0 after a completed turn, 1 after a
failed one. 0.47 silently starts a *new* thread when asked to resume an unknown id; the driver
notices (the ``thread_id`` differs) and reports it in ``ThreadStarted``.

``cancel`` sends SIGINT to the turn's process group and returns; a process still running
``kill_grace`` seconds later is killed with its tree.
A turn that exceeds ``turn_timeout`` (or is silent for ``stream_idle_timeout``) has its
process tree ended and finishes as failed (``OUTER_TIMEOUT``/``STREAM_IDLE``). A process that
dies (``kill -9``) finishes its turn as failed with a classified error; the next thought
starts a new process that resumes the thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from coven_codex.codex.driver_settings import MODES, DriverSettings
from coven_codex.codex.drivers.base import CodexDriver, DriverPhase
from coven_codex.codex.drivers.clock import TurnClock
from coven_codex.codex.drivers.events import (
    AgentMessageCompleted,
    DriverFailed,
    EventSink,
    Submission,
    ThreadStarted,
    TurnExpired,
    TurnFinished,
    TurnStarted,
    TurnStatus,
)
from coven_codex.codex.errors import STDERR_LINES, ClassifiedError, DriverError, classify, process_error, shorten
from coven_codex.codex.process import STREAM_LIMIT, ChildProcess, signal_group, spawn, terminate_tree
from coven_codex.codex.thought import Thought
from coven_codex.codex.version import CodexVersion
from coven_codex.entries import TokenUsage

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _ExecTurn:
    thought: Thought
    child: ChildProcess
    clock: TurnClock
    completed: bool = False
    failure: str | None = None
    last_error: str | None = None
    cancel_requested: bool = False
    forced_error: ClassifiedError | None = None
    usage: TokenUsage | None = None
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_LINES))


class ExecDriver(CodexDriver):
    """See :mod:`coven_codex.codex.drivers.base` for the interface and this module for the CLI."""

    kind: ClassVar[str] = "exec"
    persistent: ClassVar[bool] = False
    supports_steer = False
    label: ClassVar[str] = "codex exec"

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
        super().__init__(executable, version, workspace, env=env, settings=settings, sink=sink, command=command)
        self._turn: _ExecTurn | None = None
        self._announced = False

    @property
    def busy(self) -> bool:
        """A turn's ``codex exec`` process is running."""
        return self._turn is not None

    @property
    def pids(self) -> list[int]:
        """The running turn's process while it lives, else nothing."""
        turn = self._turn
        return [turn.child.pid] if turn is not None and turn.child.returncode is None else []

    async def start(self, resume_thread_id: str | None) -> None:
        """Start the driver's tasks and remember the thread to resume; no process starts until a turn does."""
        if self.settings.fork_from is not None and resume_thread_id is None:
            raise DriverError(
                "codex exec cannot fork a thread; starting from another thread needs the app-server driver"
            )
        await self._start_runner()
        self._thread_id = resume_thread_id  # no turn can start before start() returns

    # -- thoughts ----------------------------------------------------------------------------------
    async def submit(self, thought: Thought) -> Submission:
        """Start a turn (a ``codex exec`` process) with ``thought``, or queue it behind the running turn.
        (``codex exec`` takes no schema for the answer: the thought's ``output_schema`` is not passed on.)"""
        async with self._lock:
            self._check_alive()
            if any(image.path is None for image in thought.images):
                raise DriverError("codex exec takes images as files only, not by URL")
            if self._turn is None and not self._queue:
                await self._start_turn(thought)
                return "started"
            self._queue.append(thought)
            return "queued"

    def _argv(self, thought: Thought) -> list[str]:
        # `--image` takes several values: a flag must follow its last one, or it would swallow `resume`
        argv = [*self.command, "exec", "--json", *image_args(thought), "--skip-git-repo-check"]
        if self.settings.model is not None:
            argv += ["--model", self.settings.model]
        mode = MODES.get(self.settings.mode) if self.settings.mode is not None else None
        if mode is not None:
            argv += ["-c", f'approval_policy="{mode.approval_policy}"', "-c", f'sandbox_mode="{mode.sandbox}"']
        if self._thread_id is not None:
            argv += ["resume", self._thread_id]
        return [*argv, "-"]

    async def _start_turn(self, thought: Thought) -> None:
        if not self._tasks.running:
            raise DriverError("the exec driver is not started")
        try:
            child = await spawn(self._argv(thought), env=self.env, cwd=self.workspace)
        except OSError as exc:
            error = classify(f"cannot start {self.executable}: {exc.strerror or exc}")
            self._queue.appendleft(thought)  # it never reached Codex
            self._fail(error, None)
            raise DriverError(error.message) from None
        turn = _ExecTurn(thought, child, TurnClock(self.settings.turn_timeout, self.settings.stream_idle_timeout))
        self._turn = turn
        assert child.stdin is not None
        try:
            child.stdin.write(thought.text.encode("utf-8"))
            # a stopped process reads nothing: its turn clock ends it, this wait must not block
            await asyncio.wait_for(child.stdin.drain(), self.settings.stream_idle_timeout)
            child.stdin.close()
        except TimeoutError:
            log.warning("codex exec read none of the thought for %gs", self.settings.stream_idle_timeout)
        except (ConnectionError, RuntimeError) as exc:
            log.warning("could not write the thought to codex exec: %s", exc)
        self._spawn(self._drive(turn), name=f"codex-exec-{child.pid}")

    # -- one turn ----------------------------------------------------------------------------------
    async def _drive(self, turn: _ExecTurn) -> None:
        child = turn.child
        try:
            async with asyncio.TaskGroup() as tg:
                reader = tg.create_task(self._read_events(turn))
                tg.create_task(self._collect_stderr(child.stderr, turn.stderr))
                watchdog = tg.create_task(self._watch(turn))
                await child.exited.wait()
                # what is left of the tree (the native binary when only its wrapper was killed)
                await terminate_tree(child, self.settings.kill_grace)
                await reader
                watchdog.cancel()
        finally:
            if child.returncode is None:
                await terminate_tree(child, self.settings.kill_grace)
        status, error = self._outcome(turn)
        if self._turn is turn:
            self._turn = None
        self._events.emit(TurnFinished(None, status, (turn.thought.id,), error, turn.usage))
        if self._queue and not self._lifecycle.is_in(DriverPhase.CLOSED):
            await self._pump()

    def _outcome(self, turn: _ExecTurn) -> tuple[TurnStatus, ClassifiedError | None]:
        if turn.forced_error is not None:
            return "failed", turn.forced_error
        if turn.completed:
            return "completed", None
        if turn.failure is not None:
            return "failed", classify(turn.failure)
        if turn.cancel_requested:
            return "interrupted", None
        lines = [*turn.stderr, *([f"error: {turn.last_error}"] if turn.last_error else [])]
        return "failed", process_error(turn.child.returncode, lines, what=self.label)

    async def _read_events(self, turn: _ExecTurn) -> None:
        stdout = turn.child.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readline()
            except ValueError:  # longer than STREAM_LIMIT: asyncio dropped it, reading goes on
                log.error("codex exec wrote a line over %d MiB; it was dropped", STREAM_LIMIT >> 20)
                continue
            except ConnectionError:
                return
            if not line:
                return
            turn.clock.touch()
            try:
                event = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                log.debug("codex exec wrote a line that is not JSON: %r", line[:200])
                continue
            if isinstance(event, dict):
                self._on_event(turn, event)

    def _on_event(self, turn: _ExecTurn, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "thread.started":
            thread_id = event.get("thread_id")
            if isinstance(thread_id, str) and thread_id:
                self._on_thread(thread_id)
        elif kind == "turn.started":
            self._events.emit(TurnStarted(None, (turn.thought.id,)))
        elif kind == "item.completed":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "agent_message":
                self._events.emit(AgentMessageCompleted(str(item.get("id", "")), str(item.get("text", ""))))
            elif isinstance(item, dict) and item.get("type") == "error":
                log.info("codex exec warning: %s", shorten(str(item.get("message", ""))))
        elif kind == "error":
            turn.last_error = str(event.get("message", ""))
        elif kind == "turn.completed":
            turn.completed = True
            turn.usage = exec_usage(event.get("usage"))
        elif kind == "turn.failed":
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            turn.failure = str(message or turn.last_error or "the turn failed without a reason from Codex")

    def _on_thread(self, thread_id: str) -> None:
        previous = self._thread_id
        if self._announced and previous == thread_id:
            return
        self._announced = True
        self._thread_id = thread_id
        if previous is None:
            self._events.emit(ThreadStarted(thread_id, resumed=False))
        elif previous == thread_id:
            self._events.emit(ThreadStarted(thread_id, resumed=True))
        else:
            note = f"Codex did not resume thread {previous} and started {thread_id} instead"
            log.warning("%s", note)
            self._events.emit(ThreadStarted(thread_id, resumed=False, note=note))

    async def _watch(self, turn: _ExecTurn) -> None:
        error = await turn.clock.expired()
        if turn.child.returncode is not None:
            return
        log.warning("codex exec turn: %s; ending its process", error.message)
        turn.forced_error = error
        self._events.emit(TurnExpired(None, error))
        await terminate_tree(turn.child, self.settings.kill_grace)

    # -- cancel, approvals, close ------------------------------------------------------------------
    async def cancel(self) -> bool:
        """SIGINT the running turn's process group and kill its tree after ``kill_grace``; ``False`` if none runs."""
        turn = self._turn
        if turn is None or turn.child.returncode is not None:
            return False
        turn.cancel_requested = True
        signal_group(turn.child.pid, signal.SIGINT)
        self._spawn(self._end_after_grace(turn), name=f"codex-exec-cancel-{turn.child.pid}")
        return True

    async def _end_after_grace(self, turn: _ExecTurn) -> None:
        """After SIGINT: a process still running ``kill_grace`` seconds later is killed with its tree."""
        if not await turn.child.wait_exit(self.settings.kill_grace):
            log.warning("codex exec did not stop %gs after SIGINT; killing it", self.settings.kill_grace)
            await terminate_tree(turn.child, 0.0)

    async def answer_approval(self, request_id: str, approve: bool, *, for_session: bool = False) -> None:
        """Always raises :class:`DriverError`: ``codex exec`` never asks for approval."""
        raise DriverError(
            f"approval {request_id!r} cannot be answered: `codex exec` never asks for approval "
            "(approval_policy is 'never' with the exec driver)"
        )

    async def _end_processes(self) -> None:
        turn = self._turn
        if turn is not None:
            await terminate_tree(turn.child, self.settings.kill_grace)

    def _fail(self, error: ClassifiedError, returncode: int | None) -> None:
        if not self._failing(error, returncode):
            return
        log.error("the exec driver failed: %s", error.message)
        turn = self._turn
        in_flight = (turn.thought.id,) if turn is not None else ()
        undelivered = self.queued
        self._queue.clear()
        self._events.emit(DriverFailed(error, returncode, undelivered, in_flight))


def exec_usage(usage: Any) -> TokenUsage | None:
    """The ``usage`` of exec's ``turn.completed`` (``input_tokens``, ``cached_input_tokens``,
    ``output_tokens``; the total is their sum where Codex gives none), or ``None``."""
    if not isinstance(usage, dict):
        return None
    counts = {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
    if not counts:
        return None
    if "total_tokens" not in counts and "input_tokens" in counts and "output_tokens" in counts:
        counts["total_tokens"] = counts["input_tokens"] + counts["output_tokens"]
    return TokenUsage(**counts)


def image_args(thought: Thought) -> list[str]:
    """``--image FILE`` for each of the thought's images. Given before ``resume`` (0.47's ``exec
    resume`` has no ``--image`` of its own, and takes the ``exec`` one) and followed by another
    flag (``--image`` takes several values and would take ``resume <thread> -`` as files)."""
    return [arg for image in thought.images if image.path is not None for arg in ("--image", str(image.path))]
