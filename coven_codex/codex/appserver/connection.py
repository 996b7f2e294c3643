"""One ``codex app-server`` process, shared by the threads of many conversations.

The connection owns the process and the wire: it starts the process, says ``initialize`` once,
matches JSON-RPC responses to requests by id, and routes every notification and server request
(approvals) to the :class:`ThreadClient` attached for the message's ``threadId`` (the legacy
approval requests name it ``conversationId``). A conversation's state never lives here: the
client (:class:`~coven_codex.codex.drivers.app_server.AppServerDriver`) keeps its thread, its
turn and its approvals. A message for a thread nobody is attached to is dropped; such a server
request is answered with a JSON-RPC error so Codex does not wait for it.

**Letting a thread go, and resuming it.** A thread is let go with :meth:`AppServerConnection.unsubscribe`.
Codex 0.160 and later then unload it, and say ``thread/closed`` when that is done; until then a
``thread/resume`` of it on the same process can be refused, with "thread … is closing" or (Codex
0.169) with "no rollout found for thread id …" although its rollout is on disk: Codex's thread store
does not find the rollout of a thread it is still closing. Starting a new thread then would lose the
conversation's history for the model, so :meth:`AppServerConnection.resume` resumes a thread let go
on this process only once the process said it closed it (bounded by ``kill_grace``), and resumes
again after the closing when it was refused for either reason. Releases that keep a thread let go
loaded (before 0.160) never say ``thread/closed``, and never refuse such a resume; a process is
waited for only once it said ``thread/closed`` of some thread (:attr:`AppServerConnection.unloads`),
or when it refused.

When the process dies, or stops answering and is killed, that is one event for every thread on
it: each attached client hears :meth:`ThreadClient.on_connection_lost` once, and the pool
(:mod:`coven_codex.codex.appserver.pool`) starts a new process for the next thread that needs one.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import signal
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import JsonValue, ValidationError

from coven_codex import __version__
from coven_codex.codex.appserver.messages import ThreadUnsubscribed
from coven_codex.codex.driver_settings import DriverSettings
from coven_codex.codex.errors import STDERR_LINES, ClassifiedError, DriverError, classify, collect_stderr, process_error
from coven_codex.codex.process import STREAM_LIMIT, ChildProcess, spawn, terminate_tree
from coven_codex.codex.tasks import TaskRunner
from coven_codex.jsonrpc import JsonRpcPeer, RequestId, RequestTimeout, RpcError
from coven_codex.jsonrpc.messages import METHOD_NOT_FOUND
from coven_codex.support.lifecycle import Lifecycle, transitions

__all__ = [  # RpcError is re-exported: callers of request() catch it from here
    "OVERLOADED",
    "AppServerConnection",
    "ConnectionLost",
    "RpcError",
    "RpcId",
    "ThreadClient",
    "thread_of",
]

log = logging.getLogger(__name__)

LABEL = "the Codex app-server"
"""How messages name the process."""

RpcId = RequestId
"""A JSON-RPC request id (re-exported for the driver)."""


OVERLOADED = -32001
"""The error code of Codex's "Server overloaded; retry later.": its queue of incoming requests is
full and the request was dropped unprocessed, so sending it again is safe."""
OVERLOAD_FIRST_DELAY = 0.05
OVERLOAD_MAX_DELAY = 1.0
"""An overloaded request is sent again after 50 ms, doubling up to 1 s, within its own bound."""
CLOSING_THREAD = "is closing; retry"
"""What Codex (0.160 and later) answers a ``thread/resume`` of a thread it is unloading at that
moment: "thread … is closing; retry thread/resume after the thread is closed", or, when the
resume had loaded the thread but could not yet subscribe this connection to it, "thread … is
closing; retry after the thread is closed". The resume is sent again like an overloaded request:
starting a new thread instead would lose the conversation's history."""
NO_ROLLOUT = "no rollout found for thread id"
"""What Codex 0.169 may answer a ``thread/resume`` of a thread it is still closing after it was let
go (module docstring), and what every release answers for a thread whose rollout was never written."""


class ConnectionLost(DriverError):
    """The process died (or was killed) before it answered; ``error`` says why, classified."""

    def __init__(self, error: ClassifiedError, returncode: int | None) -> None:
        super().__init__(error.message, returncode=returncode)
        self.error = error


class ThreadClient(Protocol):
    """What a connection routes a thread's messages to (called from the connection's reader)."""

    def on_notification(self, method: str, params: Mapping[str, JsonValue]) -> None:
        """A notification about this thread."""
        ...

    def on_server_request(self, rpc_id: RpcId, method: str, params: Mapping[str, JsonValue]) -> None:
        """A request of Codex about this thread (an approval); answer with :meth:`AppServerConnection.respond`."""
        ...

    def on_connection_lost(self, error: ClassifiedError, returncode: int | None) -> None:
        """The process is gone (``error`` says why); the thread is detached already."""
        ...


def thread_of(params: Mapping[str, JsonValue]) -> str | None:
    """The thread a notification or server request is about, if it names one."""
    thread = params.get("threadId") or params.get("conversationId")
    return thread if isinstance(thread, str) else None


class ConnectionPhase(enum.Enum):
    """Where a connection to a shared app-server is in its life (:data:`CONNECTION_TRANSITIONS`)."""

    OPEN = "open"
    """Its process starts or serves threads."""
    RETIRED = "retired"
    """The pool hands it out no more; :meth:`AppServerConnection.aclose` ends it."""
    KILLING = "killing"
    """Being killed (:meth:`AppServerConnection.kill`): its threads hear of it once its tree is gone."""
    LOST = "lost"
    """Its process died or stopped answering (:attr:`AppServerConnection.lost` says why)."""
    CLOSED = "closed"
    """Closed by the pool: its process ends."""


CONNECTION_TRANSITIONS = transitions(
    (
        ConnectionPhase.OPEN,
        (ConnectionPhase.RETIRED, ConnectionPhase.KILLING, ConnectionPhase.LOST, ConnectionPhase.CLOSED),
    ),
    (ConnectionPhase.RETIRED, (ConnectionPhase.CLOSED,)),
    (ConnectionPhase.KILLING, (ConnectionPhase.LOST, ConnectionPhase.CLOSED)),
    (ConnectionPhase.LOST, (ConnectionPhase.CLOSED,)),
)
"""Every move a connection may make; any other is a bug (:class:`~coven_codex.support.lifecycle.LifecycleError`)."""


class AppServerConnection:
    """One ``codex app-server`` process and the threads attached to it (module docstring)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        settings: DriverSettings,
        on_lost: Callable[[AppServerConnection], None] | None = None,
    ) -> None:
        self.command = tuple(command)
        self.env = dict(env)
        self.cwd = cwd
        self.settings = settings
        self._on_lost = on_lost
        self._child: ChildProcess | None = None
        self._peer = JsonRpcPeer(
            self._write,
            self._drain,
            on_request=self._on_server_request,
            on_notification=self._on_notification,
            answer_within=settings.stream_idle_timeout,
            label=LABEL,
        )
        self._threads: dict[str, ThreadClient] = {}
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._tasks = TaskRunner("codex-app-server", self._on_task_failure)
        self._lifecycle = Lifecycle(
            "an app-server connection", CONNECTION_TRANSITIONS, ConnectionPhase.OPEN, where=__name__
        )
        self.lost: ClassifiedError | None = None
        """Why the process is gone, once it is (:attr:`ConnectionPhase.LOST`)."""
        self.lost_returncode: int | None = None
        """Its exit status then (``None``: unknown, e.g. it stopped answering)."""
        self.users = 0
        """Threads the pool handed this connection to and that are not closed yet."""
        self.opened = 0
        """Threads the pool ever handed this connection to (the process keeps each one loaded)."""
        self.loaded: set[str] = set()
        """The threads opened on the process: it may keep each loaded, and the writer of its rollout,
        until it exits (before 0.160; from 0.160 it unloads a thread let go), so they are resumed
        here while it runs: no other process could resume one it still holds."""
        self.started_at = 0.0
        """When the process was started (event-loop clock)."""
        self._overload_noted = False
        self.served = False
        """A turn completed on the process: it was healthy (its death starts the restart count over)."""
        self.unloads = False
        """The process said ``thread/closed`` of a thread: it unloads the threads let go (Codex 0.160 and later)."""
        self._let_go: dict[str, asyncio.Event] = {}
        """Threads let go here since they were last opened here; each is set once the process
        closed the thread (``thread/closed``), or once nothing is to be closed."""

    # -- state -----------------------------------------------------------------------------------
    @property
    def phase(self) -> ConnectionPhase:
        """Where the connection is in its life."""
        return self._lifecycle.phase

    @property
    def pid(self) -> int | None:
        """The process (group leader), while it runs."""
        child = self._child
        return child.pid if child is not None and child.returncode is None else None

    @property
    def alive(self) -> bool:
        """The process runs and serves requests."""
        child = self._child
        return (
            child is not None
            and self._lifecycle.is_in(ConnectionPhase.OPEN)
            and not child.exited.is_set()
            and child.returncode is None
        )

    @property
    def threads(self) -> int:
        """Threads attached now."""
        return len(self._threads)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the process and initialize the protocol; raises :class:`DriverError`."""
        argv = [*self.command, "app-server"]
        loop = asyncio.get_running_loop()
        try:
            self._child = await spawn(argv, env=self.env, cwd=self.cwd)
        except OSError as exc:
            raise DriverError(f"cannot start {argv[0]} app-server: {exc.strerror or exc}") from None
        self.started_at = loop.time()
        child = self._child
        await self._tasks.start(
            ("app-server-stdout", self._read_stdout(child)),
            ("app-server-stderr", collect_stderr(child.stderr, self._stderr, LABEL)),
            ("app-server-exit", self._watch_exit(child)),
        )
        try:
            await self.request(
                "initialize", {"clientInfo": {"name": "coven-codex", "title": "coven-codex", "version": __version__}}
            )
            await self._peer.notify("initialized", within=self.settings.stream_idle_timeout)
        except RpcError as exc:
            await self.aclose()
            raise DriverError(f"the Codex app-server refused to initialize: {exc}") from None
        except BaseException:
            await self.aclose()
            raise

    async def _on_task_failure(self, group: BaseExceptionGroup[Exception]) -> None:
        for exc in group.exceptions:
            log.error("app-server connection task failed", exc_info=exc)
        self._lose(classify(f"internal error in the app-server connection: {group.exceptions[0]!r}"), None)
        if self._child is not None:
            await terminate_tree(self._child, 0.0)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._tasks.spawn(coro)

    async def kill(self, error: ClassifiedError, *, blameless: bool = False) -> None:
        """Kill the process's tree at once (it stopped answering, or the pool ends it); every
        thread hears ``error``. ``blameless``: the kill is the daemon's own decision, not the
        fault of what a thread was doing: the threads hear SIGKILL's exit status, so a thought
        being handed over is sent again without counting against it (``killed_from_outside``).

        The threads hear it once the tree is gone (:attr:`ConnectionPhase.KILLING` until then), so
        that when a driver reports its failure nothing of this Codex runs any more."""
        child = self._child
        if child is None:
            return
        if not self._lifecycle.is_in(ConnectionPhase.OPEN):  # retired, lost or closed: nobody to tell
            await terminate_tree(child, 0.0)
            return
        self._lifecycle.move(ConnectionPhase.KILLING)  # takes nothing more; its exit is not news
        try:
            await terminate_tree(child, 0.0)
        finally:
            self._lose(error, -signal.SIGKILL if blameless else None)

    def retire(self) -> None:
        """Take no more threads (:attr:`alive` is ``False`` from now on); :meth:`aclose` ends it."""
        if self._lifecycle.is_in(ConnectionPhase.OPEN):  # (a lost or closed one takes none anyway)
            self._lifecycle.move(ConnectionPhase.RETIRED)

    async def aclose(self) -> None:
        """End the process: stdin closed (it exits by itself), TERM after half of ``kill_grace``,
        KILL at its end; no thread hears about it (they were closed first)."""
        if self._lifecycle.is_in(ConnectionPhase.CLOSED):
            return
        self._lifecycle.move(ConnectionPhase.CLOSED)
        self._threads.clear()
        self._peer.fail_pending(DriverError("the Codex app-server is closing"))
        child = self._child
        if child is not None:
            if child.returncode is None and child.stdin is not None:
                with contextlib.suppress(OSError, RuntimeError):
                    child.stdin.close()
            grace = self.settings.kill_grace
            await terminate_tree(child, grace, patience=grace / 2)
        await self._tasks.stop()

    # -- threads -----------------------------------------------------------------------------------
    def has_thread(self, thread_id: str) -> bool:
        """A client is attached for ``thread_id`` now."""
        return thread_id in self._threads

    def attach(self, thread_id: str, client: ThreadClient) -> None:
        """Route ``thread_id``'s messages to ``client`` from now on."""
        if not self.alive:
            raise self._not_running()
        self._threads[thread_id] = client
        self.loaded.add(thread_id)
        self._let_go.pop(thread_id, None)

    async def unsubscribe(self, thread_id: str) -> None:
        """Let ``thread_id`` go (``thread/unsubscribe``, within ``kill_grace``): the process may
        unload it, and a later :meth:`resume` of it here waits until it did (module docstring).
        Raises :class:`RpcError` or :class:`DriverError` as :meth:`request` does."""
        closed = self._let_go[thread_id] = asyncio.Event()  # (before the answer: thread/closed may come first)
        answer = await self.request("thread/unsubscribe", {"threadId": thread_id}, within=self.settings.kill_grace)
        try:
            status = ThreadUnsubscribed.model_validate(answer).status
        except ValidationError:
            status = None
        if status != "unsubscribed":
            closed.set()  # not loaded, or not ours to let go: nothing is closed

    async def resume(self, params: Mapping[str, JsonValue]) -> JsonValue:
        """``thread/resume``, as :meth:`request` sends it; a thread let go on this process is
        resumed once the process closed it, and resumed again after the closing when the process
        refused it while closing (module docstring)."""
        thread_id = params.get("threadId")
        closed = self._let_go.get(thread_id) if isinstance(thread_id, str) else None
        if closed is not None and self.unloads:
            await self._until_closed(closed)
        try:
            return await self.request("thread/resume", params)
        except RpcError as exc:
            if closed is None or not (NO_ROLLOUT in str(exc) or CLOSING_THREAD in str(exc)):
                raise
        log.debug("thread/resume was refused while the thread was being closed; resuming it again once it is")
        await self._until_closed(closed)
        return await self.request("thread/resume", params)

    async def _until_closed(self, closed: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(closed.wait(), self.settings.kill_grace)

    def detach(self, thread_id: str, client: ThreadClient) -> None:
        """Stop routing ``thread_id`` to ``client`` (if it is still the one attached)."""
        if self._threads.get(thread_id) is client:
            del self._threads[thread_id]

    # -- wire --------------------------------------------------------------------------------------
    async def request(self, method: str, params: Mapping[str, JsonValue], *, within: float | None = None) -> JsonValue:
        """Send a request and wait for its answer: at most ``within`` seconds in all, by default
        ``stream_idle_timeout`` (the longest Codex may be silent). Raises :class:`RpcError` for an
        error answer, :class:`DriverError` when there is no answer. A request Codex refuses as
        overloaded (:data:`OVERLOADED`), and a resume of a thread it is unloading
        (:data:`CLOSING_THREAD`), is sent again with backoff, within the same bound."""
        limit = self.settings.stream_idle_timeout if within is None else within
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        delay = OVERLOAD_FIRST_DELAY
        while True:
            try:
                return await self._peer.request(method, params, within=max(0.0, deadline - loop.time()))
            except RequestTimeout:
                raise DriverError(f"the Codex app-server did not answer {method} within {limit:g}s") from None
            except RpcError as exc:
                closing = method == "thread/resume" and CLOSING_THREAD in str(exc)
                if not (exc.code == OVERLOADED or closing) or loop.time() + delay >= deadline:
                    raise
            if closing:
                log.debug("thread/resume: the thread is being unloaded; resuming it again in %gs", delay)
            elif not self._overload_noted:  # said once per process, not once per retry
                self._overload_noted = True
                log.warning(
                    "the Codex app-server is overloaded (too many requests at once); requests it refuses "
                    "are sent again, within their time bound"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, OVERLOAD_MAX_DELAY)

    async def respond(self, rpc_id: RpcId, result: Mapping[str, JsonValue]) -> None:
        """Answer a server request."""
        await self._answer(self._peer.respond(rpc_id, dict(result), within=self.settings.stream_idle_timeout))

    async def respond_error(self, rpc_id: RpcId, message: str, code: int = METHOD_NOT_FOUND) -> None:
        """Refuse a server request (by default: "method not found")."""
        await self._answer(self._peer.respond_error(rpc_id, code, message, within=self.settings.stream_idle_timeout))

    async def _answer(self, sending: Coroutine[Any, Any, None]) -> None:
        try:
            await sending
        except RequestTimeout as exc:
            raise DriverError(str(exc)) from None

    def _write(self, data: bytes) -> None:
        """Queue one line on the process's stdin."""
        child = self._stdin_owner()
        assert child.stdin is not None
        try:
            child.stdin.write(data)
        except (ConnectionError, RuntimeError) as exc:
            raise DriverError(f"lost the Codex app-server's stdin: {exc}", returncode=child.returncode) from None

    async def _drain(self, within: float) -> None:
        """Wait for room in the stdin pipe (a stopped Codex reads nothing): at most ``within``
        seconds, then ``TimeoutError``."""
        child = self._stdin_owner()
        assert child.stdin is not None
        try:
            await asyncio.wait_for(child.stdin.drain(), within)
        except (ConnectionError, RuntimeError) as exc:
            # Its stdin closed: it is ending. Its exit status tells whether it was killed from
            # outside (then the thought being handed over is not to blame: killed_from_outside).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(child.exited.wait(), self.settings.kill_grace)
            raise DriverError(f"lost the Codex app-server's stdin: {exc}", returncode=child.returncode) from None

    def _stdin_owner(self) -> ChildProcess:
        child = self._child
        if child is None or child.stdin is None or child.exited.is_set() or self.lost is not None:
            raise self._not_running()
        return child

    def _not_running(self) -> DriverError:
        child = self._child
        returncode = child.returncode if child is not None and child.returncode is not None else self.lost_returncode
        return DriverError("the Codex app-server is not running", returncode=returncode)

    async def _refuse_quietly(self, rpc_id: RpcId, message: str) -> None:
        with contextlib.suppress(DriverError):
            await self.respond_error(rpc_id, message)

    # -- reading -----------------------------------------------------------------------------------
    async def _read_stdout(self, child: ChildProcess) -> None:
        assert child.stdout is not None
        while True:
            try:
                line = await child.stdout.readline()
            except ValueError:  # longer than STREAM_LIMIT: asyncio dropped it, reading goes on
                log.error("the Codex app-server wrote a message over %d MiB; it was dropped", STREAM_LIMIT >> 20)
                continue
            except ConnectionError:
                return
            if not line:
                return
            await self._peer.feed(line)

    def _on_server_request(self, rpc_id: RpcId, method: str, params: dict[str, JsonValue]) -> None:
        thread = thread_of(params)
        client = self._threads.get(thread) if thread is not None else None
        if client is None:
            log.info("the app-server asked %s for no thread of ours; refusing", method)
            self._spawn(self._refuse_quietly(rpc_id, f"{method} has no client here"))
            return
        client.on_server_request(rpc_id, method, params)

    def _on_notification(self, method: str, params: dict[str, JsonValue]) -> None:
        if method == "turn/completed":
            self.served = True
        thread = thread_of(params)
        if method == "thread/closed" and thread is not None:
            self.unloads = True
            closed = self._let_go.get(thread)
            if closed is not None:
                closed.set()
        client = self._threads.get(thread) if thread is not None else None
        if client is not None:
            client.on_notification(method, params)

    async def _watch_exit(self, child: ChildProcess) -> None:
        await child.exited.wait()
        if not self._lifecycle.is_in(ConnectionPhase.OPEN):
            return
        await asyncio.sleep(0.1)  # give stderr a moment to deliver the last words of the process
        self._lose(process_error(child.returncode, list(self._stderr), what=LABEL), child.returncode)
        await terminate_tree(child, self.settings.kill_grace)

    def _lose(self, error: ClassifiedError, returncode: int | None) -> None:
        """The process is gone: one event for every thread on it."""
        if not self._lifecycle.is_in(ConnectionPhase.OPEN, ConnectionPhase.KILLING):
            return
        self._lifecycle.move(ConnectionPhase.LOST)
        self.lost = error
        self.lost_returncode = returncode
        clients = list(self._threads.values())
        self._threads.clear()
        log.error("the shared Codex app-server failed (%d thread(s) on it): %s", len(clients), error.message)
        self._peer.fail_pending(ConnectionLost(error, returncode))
        for client in clients:
            try:
                client.on_connection_lost(error, returncode)
            except Exception:
                log.exception("a thread of the app-server failed to take the news of its end")
        if self._on_lost is not None:
            self._on_lost(self)
