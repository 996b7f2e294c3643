"""The exec link (every Codex version, the only one for 0.47): one ``codex exec`` per turn.

A turn is ``codex exec --json --skip-git-repo-check [resume <thread>] -`` with the thought on
stdin (closed after it, which is when Codex has the input). Its ``--json`` events on stdout give
the thread id (``thread.started``), the turn's start and its failure (``turn.failed`` /
``error``); the process exiting ends the turn (one :class:`TurnEnded`, carrying the exit code
when the process died rather than reporting a failure; an exec link never emits
:class:`ProcessExited`, since a process per turn is its normal life). There is no steering and no approval channel
(the exec driver runs with ``approval_policy = "never"``); interrupting sends SIGINT to the
process group, like Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from coven_codex.agent.link import (
    CodexReportedError,
    LinkError,
    LinkEvent,
    ThreadReady,
    TurnEnded,
    TurnStarted,
)
from coven_codex.codex.process import ChildProcess, signal_group, spawn, terminate_tree

log = logging.getLogger(__name__)

STDERR_LINES = 20
StdinHook = Callable[[str, float], None]
"""Benchmark hook: (thought id, ``time.perf_counter()`` right after the bytes were written)."""


class ExecLink:
    persistent = False
    enforces_turn_limits = False
    supports_steer = False
    records_client_id = False

    def __init__(self, executable: Path, *, env: Mapping[str, str], cwd: Path, grace: float,
                 stdin_hook: StdinHook | None = None) -> None:
        self._executable = str(executable)
        self._env = env
        self._cwd = cwd
        self._grace = grace
        self._hook = stdin_hook
        self._thread_id: str | None = None
        self._child: ChildProcess | None = None
        self._reader: asyncio.Task[None] | None = None
        self._events: asyncio.Queue[LinkEvent | None] = asyncio.Queue()
        self._closing = False
        self._interrupted = False
        self.last_activity = time.monotonic()

    @property
    def thread_id(self) -> str | None:
        return self._thread_id

    @property
    def pids(self) -> list[int]:
        child = self._child
        return [child.pid] if child is not None and child.returncode is None else []

    @property
    def tree_tokens(self) -> list[str]:
        return [self._child.tree_token] if self._child is not None else []

    async def open(self, resume_thread: str | None) -> None:
        self._thread_id = resume_thread

    def _argv(self) -> list[str]:
        argv = [self._executable, "exec", "--json", "--skip-git-repo-check"]
        if self._thread_id is not None:
            argv += ["resume", self._thread_id]
        return [*argv, "-"]

    async def send(self, thought_id: str, text: str) -> None:
        if self._child is not None and self._child.returncode is None:
            raise LinkError("a turn is still running")
        try:
            child = await spawn(self._argv(), env=self._env, cwd=self._cwd)
        except OSError as exc:
            raise LinkError(f"cannot start {self._executable}: {exc.strerror or exc}") from None
        self._child = child
        self._interrupted = False
        stdin = child.process.stdin
        assert stdin is not None
        try:
            stdin.write(text.encode("utf-8"))
            if self._hook is not None:
                self._hook(thought_id, time.perf_counter())
            await stdin.drain()
            stdin.close()
        except (ConnectionError, RuntimeError) as exc:
            # Codex died before reading its prompt: it never had the thought.
            await terminate_tree(child, self._grace)
            raise LinkError(f"Codex exec exited before reading the thought: {exc}") from None
        self._reader = asyncio.create_task(self._read(child), name="exec-stdout")

    async def _read(self, child: ChildProcess) -> None:
        stdout, stderr = child.process.stdout, child.process.stderr
        assert stdout is not None and stderr is not None
        tail: deque[str] = deque(maxlen=STDERR_LINES)
        stderr_task = asyncio.create_task(_collect(stderr, tail))
        failure: str | None = None
        try:
            while line := await stdout.readline():
                self.last_activity = time.monotonic()
                failure = self._dispatch(line) or failure
        except (ValueError, ConnectionError) as exc:
            log.error("codex exec output unreadable: %s", exc)
        await child.wait_exit()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stderr_task, 1.0)
        stderr_task.cancel()
        code = child.returncode
        if self._closing or self._interrupted:
            status = "interrupted"
        elif failure is not None or code not in (0, None):
            status = "failed"
        else:
            status = "completed"
        if status == "failed" and failure is None:
            # Not a failure Codex reported (turn.failed) but the process dying: say how it ended.
            failure = f"Codex exec exited (exit {code}): " + (" | ".join(tail) or "no output on stderr")
            self._events.put_nowait(TurnEnded(None, status, failure, exit_code=code))
        else:
            self._events.put_nowait(TurnEnded(None, status, failure))

    def _dispatch(self, line: bytes) -> str | None:
        try:
            event: Any = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(event, dict):
            return None
        kind = event.get("type")
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            self._thread_id = event["thread_id"]
            self._events.put_nowait(ThreadReady(event["thread_id"], None))
        elif kind == "turn.started":
            self._events.put_nowait(TurnStarted(None))
        elif kind == "turn.failed":
            error = event.get("error")
            return str(error.get("message", error)) if isinstance(error, dict) else str(error)
        elif kind == "error":
            self._events.put_nowait(CodexReportedError(str(event.get("message", "")), will_retry=False))
        return None

    async def steer(self, thought_id: str, text: str) -> None:
        raise LinkError("codex exec cannot add to a running turn")

    async def interrupt(self) -> None:
        child = self._child
        if child is not None and child.returncode is None:
            self._interrupted = True
            signal_group(child.pid, signal.SIGINT)

    async def answer(self, request_id: str, approve: bool) -> None:
        raise LinkError("codex exec has no approval requests to answer")

    async def events(self) -> AsyncIterator[LinkEvent]:
        while (event := await self._events.get()) is not None:
            yield event

    async def close(self) -> None:
        self._closing = True
        child = self._child
        if child is not None:
            await terminate_tree(child, self._grace)
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), 2.0)
            self._reader.cancel()
        self._events.put_nowait(None)


async def _collect(stream: asyncio.StreamReader, tail: deque[str]) -> None:
    with contextlib.suppress(ValueError, ConnectionError):
        while line := await stream.readline():
            text = line.decode("utf-8", "replace").strip()
            if text:
                tail.append(text[:400])
