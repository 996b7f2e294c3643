"""The app-server link (Codex 0.169+): one long-lived ``codex app-server`` per conversation.

JSON-RPC, one object per line, on the process's stdin/stdout: ``initialize`` + ``initialized``,
``thread/start`` (or ``thread/resume``), then per thought ``turn/start`` with
``clientUserMessageId = <thought id>`` (Codex records it in the rollout, which is how a restarted
daemon knows whether an in-flight thought arrived). ``turn/steer`` adds to a running turn,
``turn/interrupt`` stops it. Approval requests from the server become
:class:`~coven_codex.agent.link.ApprovalAsked` events and are answered with :meth:`answer`.

Closing is graceful first: the app-server exits on its own when its stdin closes (verified,
within milliseconds, recording ``turn_aborted`` for a running turn); whatever remains after the
grace period is ended as a process tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from coven_codex import __version__
from coven_codex.agent.link import (
    ApprovalAsked,
    CodexReportedError,
    Delta,
    LinkError,
    LinkEvent,
    ProcessExited,
    ThreadReady,
    TurnEnded,
    TurnStarted,
)
from coven_codex.codex.process import ChildProcess, spawn, terminate_tree

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 60.0
STDERR_LINES = 20
WireHook = Callable[[str, Mapping[str, Any], float], None]
"""Benchmark hook: (direction "in"/"out" + method, message, ``time.perf_counter()``)."""

_V2_APPROVALS = {
    "item/commandExecution/requestApproval": "run a command",
    "item/fileChange/requestApproval": "change files",
}
_LEGACY_APPROVALS = {"execCommandApproval": "run a command", "applyPatchApproval": "apply a patch"}


class AppServerLink:
    persistent = True
    enforces_turn_limits = False
    supports_steer = True
    records_client_id = True

    def __init__(self, executable: Path, *, env: Mapping[str, str], cwd: Path, grace: float,
                 wire_hook: WireHook | None = None) -> None:
        self._argv = [str(executable), "app-server"]
        self._env = env
        self._cwd = cwd
        self._grace = grace
        self._hook = wire_hook
        self._child: ChildProcess | None = None
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._server_requests: dict[str, tuple[int | str, str]] = {}
        self._events: asyncio.Queue[LinkEvent | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._thread_id: str | None = None
        self._turn_id: str | None = None
        self._closing = False
        self._exited = asyncio.Event()
        self._nonce = secrets.token_hex(3)  # keeps approval ids of a restarted app-server distinct
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

    # -- start ---------------------------------------------------------------------------------
    async def open(self, resume_thread: str | None) -> None:
        try:
            await self._open(resume_thread)
        except _RpcError as exc:
            raise LinkError(f"the Codex app-server refused to start the session: {exc}") from None

    async def _open(self, resume_thread: str | None) -> None:
        try:
            self._child = await spawn(self._argv, env=self._env, cwd=self._cwd)
        except OSError as exc:
            raise LinkError(f"cannot start {self._argv[0]}: {exc.strerror or exc}") from None
        self._tasks = [asyncio.create_task(self._read_stdout(), name="app-server-stdout"),
                       asyncio.create_task(self._read_stderr(), name="app-server-stderr"),
                       asyncio.create_task(self._watch_leader(), name="app-server-leader")]
        await self._request("initialize", {"clientInfo": {"name": "coven-codex", "title": "coven-codex",
                                                          "version": __version__}})
        await self._send({"method": "initialized"})
        result: Any = None
        if resume_thread is not None:
            try:
                result = await self._request("thread/resume", {"threadId": resume_thread, "cwd": str(self._cwd)})
            except _RpcError as exc:
                # A thread that never ran a turn has no rollout and cannot be resumed.
                log.warning("cannot resume thread %s (%s); starting a new thread", resume_thread, exc)
        if result is None:
            result = await self._request("thread/start", {"cwd": str(self._cwd)})
        thread = result.get("thread", {}) if isinstance(result, dict) else {}
        thread_id = thread.get("id")
        if not isinstance(thread_id, str):
            raise LinkError("app-server answered thread/start without a thread id")
        self._thread_id = thread_id
        path = thread.get("path")
        self._events.put_nowait(ThreadReady(thread_id, Path(path) if isinstance(path, str) else None))

    # -- requests ------------------------------------------------------------------------------
    async def send(self, thought_id: str, text: str) -> None:
        result = await self._turn_request("turn/start", {
            "threadId": self._require_thread(), "input": [{"type": "text", "text": text}],
            "clientUserMessageId": thought_id,
        })
        turn = result.get("turn", {}) if isinstance(result, dict) else {}
        if isinstance(turn.get("id"), str):
            self._turn_id = turn["id"]

    async def steer(self, thought_id: str, text: str) -> None:
        if self._turn_id is None:
            raise LinkError("no running turn to steer")
        await self._turn_request("turn/steer", {
            "threadId": self._require_thread(), "input": [{"type": "text", "text": text}],
            "expectedTurnId": self._turn_id, "clientUserMessageId": thought_id,
        })

    async def interrupt(self) -> None:
        if self._turn_id is None:
            return
        with contextlib.suppress(_RpcError):
            await self._request("turn/interrupt", {"threadId": self._require_thread(),
                                                                 "turnId": self._turn_id})

    async def answer(self, request_id: str, approve: bool) -> None:
        pending = self._server_requests.pop(request_id, None)
        if pending is None:
            raise LinkError(f"no pending approval request {request_id}")
        rpc_id, method = pending
        if method in _LEGACY_APPROVALS:
            decision = "approved" if approve else "denied"
        else:
            decision = "accept" if approve else "decline"
        await self._send({"id": rpc_id, "result": {"decision": decision}})

    def _require_thread(self) -> str:
        if self._thread_id is None:
            raise LinkError("the Codex thread is not open")
        return self._thread_id

    async def _turn_request(self, method: str, params: dict[str, Any]) -> Any:
        try:
            return await self._request(method, params)
        except _RpcError as exc:
            raise LinkError(f"Codex refused {method}: {exc}", delivered=False) from None
        except LinkError as exc:
            # The process went away after the request was written: Codex may have it.
            raise LinkError(str(exc), delivered=True) from None

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._send({"id": request_id, "method": method, "params": params})
            return await asyncio.wait_for(future, REQUEST_TIMEOUT)
        except TimeoutError:
            raise LinkError(f"Codex did not answer {method} within {REQUEST_TIMEOUT:.0f}s") from None
        finally:
            self._pending.pop(request_id, None)

    async def _send(self, message: dict[str, Any]) -> None:
        proc = self._child.process if self._child is not None else None
        if proc is None or proc.stdin is None or proc.returncode is not None or self._exited.is_set():
            raise LinkError("the Codex app-server is not running")
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        try:
            proc.stdin.write(data)
            if self._hook is not None:
                self._hook(f"out:{message.get('method', 'response')}", message, time.perf_counter())
            await proc.stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise LinkError(f"lost the Codex app-server's stdin: {exc}") from None

    # -- reading -------------------------------------------------------------------------------
    async def _read_stdout(self) -> None:
        child = self._child
        assert child is not None and child.process.stdout is not None
        try:
            while line := await child.process.stdout.readline():
                self._dispatch(line)
        except (ValueError, ConnectionError) as exc:
            log.error("app-server output unreadable: %s", exc)
        await child.wait_exit()
        returncode = child.returncode
        self._exited.set()
        # Let stderr reach its end too: its last lines say why Codex stopped.
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._tasks[1]), 1.0)
        detail = " | ".join(self._stderr) or f"exit {returncode}"
        why = f"the Codex app-server exited (exit {returncode}): {_why(self._stderr)}"
        for future in self._pending.values():
            if not future.done():
                future.set_exception(LinkError(why))
        self._events.put_nowait(ProcessExited(returncode, detail, expected=self._closing))
        self._events.put_nowait(None)

    async def _watch_leader(self) -> None:
        """If the process we started dies (say, the npm wrapper is killed), end its whole tree.

        The native binary it started would otherwise keep our pipes open and run on unseen.
        """
        child = self._child
        assert child is not None
        await child.wait_exit()
        if not self._closing:
            log.warning("Codex app-server %d exited (exit %s); ending what is left of its process tree",
                        child.pid, child.returncode)
            await terminate_tree(child, self._grace)

    async def _read_stderr(self) -> None:
        child = self._child
        assert child is not None and child.process.stderr is not None
        with contextlib.suppress(ValueError, ConnectionError):
            while line := await child.process.stderr.readline():
                text = line.decode("utf-8", "replace").strip()
                if text:
                    self._stderr.append(text[:400])
                    log.debug("app-server stderr: %s", text[:400])

    def _dispatch(self, line: bytes) -> None:
        self.last_activity = time.monotonic()
        try:
            message = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("app-server wrote a line that is not JSON: %r", line[:200])
            return
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if self._hook is not None and isinstance(method, str):
            self._hook(f"in:{method}", message, time.perf_counter())
        if method is None:
            self._on_response(message)
        elif "id" in message:
            self._on_server_request(message["id"], str(method), message.get("params") or {})
        else:
            self._on_notification(str(method), message.get("params") or {})

    def _on_response(self, message: dict[str, Any]) -> None:
        rpc_id = message.get("id")
        future = self._pending.get(rpc_id) if isinstance(rpc_id, int) else None
        if future is None or future.done():
            return
        if "error" in message:
            error = message["error"]
            text = error.get("message", str(error)) if isinstance(error, dict) else str(error)
            future.set_exception(_RpcError(text))
        else:
            future.set_result(message.get("result"))

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "item/agentMessage/delta":
            self._events.put_nowait(Delta(params.get("itemId"), str(params.get("delta", ""))))
        elif method == "turn/started":
            turn = params.get("turn") or {}
            self._turn_id = turn.get("id") or self._turn_id
            self._events.put_nowait(TurnStarted(self._turn_id))
        elif method == "turn/completed":
            turn = params.get("turn") or {}
            error = turn.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            status = str(turn.get("status", "completed"))
            self._events.put_nowait(TurnEnded(turn.get("id"), status, message))
            if turn.get("id") == self._turn_id:
                self._turn_id = None
        elif method == "error":
            error = params.get("error") or {}
            text = error.get("message", "") if isinstance(error, dict) else str(error)
            self._events.put_nowait(CodexReportedError(text, will_retry=bool(params.get("willRetry"))))

    def _on_server_request(self, rpc_id: int | str, method: str, params: dict[str, Any]) -> None:
        action = _V2_APPROVALS.get(method) or _LEGACY_APPROVALS.get(method)
        if action is None:
            log.info("app-server asked %s, which coven-codex does not handle; declining", method)
            self._spawn_send({"id": rpc_id, "error": {"code": -32601,
                                                      "message": f"{method} is not supported by coven-codex"}})
            return
        detail = params.get("command") or params.get("reason") or ""
        if isinstance(detail, list):
            detail = " ".join(str(part) for part in detail)
        request_id = f"{self._thread_id}:{self._nonce}:{rpc_id}"
        self._server_requests[request_id] = (rpc_id, method)
        text = f"{action}: {detail}" if detail else action
        call_id = params.get("itemId") or params.get("callId")
        self._events.put_nowait(ApprovalAsked(request_id, text, call_id if isinstance(call_id, str) else None))

    def _spawn_send(self, message: dict[str, Any]) -> None:
        task = asyncio.get_running_loop().create_task(self._send_quietly(message))
        self._tasks.append(task)

    async def _send_quietly(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(LinkError):
            await self._send(message)

    # -- events and closing --------------------------------------------------------------------
    async def events(self) -> AsyncIterator[LinkEvent]:
        while (event := await self._events.get()) is not None:
            yield event

    async def close(self) -> None:
        self._closing = True
        child = self._child
        if child is None:
            return
        stdin = child.process.stdin
        if child.returncode is None and stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                stdin.close()
            await child.wait_exit(self._grace)
        await terminate_tree(child, self._grace)
        for task in self._tasks:
            if not task.done():
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(task), 1.0)
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _why(stderr: deque[str]) -> str:
    """The most telling stderr line: the last one that says "error", else the last one."""
    for line in reversed(stderr):
        if "error" in line.lower():
            return line
    return stderr[-1] if stderr else "no output on stderr"


class _RpcError(Exception):
    """The app-server answered a request with an error."""
