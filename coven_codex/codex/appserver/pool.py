"""Where the Codex processes live: a small pool of ``codex app-server`` processes for one CODEX_HOME.

Every conversation's thread runs on one of at most ``size`` shared processes (the
``app_servers`` setting, default 1): :meth:`AppServerPool.connect` hands out the least used live
connection, starting a process only when none runs or when every running one already serves
threads and the pool may grow. Processes start one at a time (two app-servers starting at the
same moment on one CODEX_HOME can fail on some versions: "failed to initialize sqlite state
runtime"). A conversation costs no process and no file descriptor: its thread is attached to a
connection while its session has it open (an idle conversation lets it go after
``release_thread_after``, or when it is evicted).

**One warm process.** When the last thread on a process is let go, the pool keeps that process
running with no thread (*warm*), so that the next thought pays a ``thread/resume`` on it rather
than a process start (docs/performance.md). Codex (0.160 and later, with the generated
``thread_unload_delay_secs = 0``) unloads a thread let go at once, and with it the watches that
wake it up, so a warm process is all but idle. It is ended once it has had no thread for
``keep_idle`` seconds (the daemon passes ``idle_reap``), so an idle daemon still ends with no
Codex process. At most one process is kept warm; a process that is *full* (below) or failed is
not kept.

A process keeps a thread it loaded open, holding two files for it (its rollout and its
thread-writer lock), and more while a thread starts: before 0.160 until it exits
(``thread/unsubscribe`` only stops the notifications); from 0.160 until the thread is let go
(unsubscribed) and ``thread_unload_delay_secs`` has passed, which the generated config sets to 0
(:func:`~coven_codex.codex.home.thread_defaults`). The pool counts every thread a process ever
took either way, which is right for every release. So each process takes
at most :attr:`AppServerPool.threads_per_process` threads (:func:`thread_budget`, from the
open-file limit Codex inherits from the daemon: 112 under ``ulimit -n 1024``); after that it is
*full*: new threads go to another process, started for them even when ``size`` are running
already (full ones do not count), and the full one ends when its last thread is let go. With the
idle conversations' threads let go (evicted when others wait for a ``max_sessions`` slot, or
released when idle), 1,000 conversations are served under ``ulimit -n 1024`` (docs/performance.md).
A thread is resumed on the process that has it loaded while that one runs (:meth:`connect`).

The daemon starts one process ahead (:meth:`AppServerPool.prestart`), while it recovers and
starts reading the journal, so that the first thought does not wait for Codex's start: the next
:meth:`connect` takes that process. Until then it is a warm process like any other: nobody taking
it within ``keep_idle`` seconds, it is ended (one mechanism for both). Should it fail to start,
that is logged once and the next :meth:`connect` starts one as it would have without the prestart.

A process that died (or was killed because it stopped answering) is replaced lazily, by the
next :meth:`connect`, after the restart backoff (:func:`~coven_codex.support.backoff.backoff` of
``restart_backoff``, doubling for each failure in a row; a process that completed a turn, or
ran longer than the backoff limit, starts the count over).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import resource
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import ValidationError

from coven_codex.codex.appserver.connection import AppServerConnection, RpcError
from coven_codex.codex.appserver.messages import LoadedThreads
from coven_codex.codex.driver_settings import DriverSettings
from coven_codex.codex.errors import HINTS, ClassifiedError, DriverError, ErrorCode, classify
from coven_codex.support.backoff import MAX_BACKOFF, backoff
from coven_codex.support.lifecycle import Lifecycle, transitions

log = logging.getLogger(__name__)

FDS_PER_THREAD = 8
"""Open files a thread may cost its Codex process: its rollout and its thread-writer lock (held
while the process runs), the pipes and process handle of the MCP server Codex starts for it (the
spells' shim): 6.2 a loaded thread on 0.169.0, measured (``tests/codex/test_app_server_pool.py``);
and what a starting thread holds for a moment (its shell snapshot, its config files). Issue 33: with 6,
300 conversations arriving over a minute filled a process at 149 threads to its 1,024 ("No file
descriptors available")."""
FD_RESERVE = 128
"""Open files a Codex process needs whatever its threads: its SQLite databases, logs, sockets,
pipes, inotify and the files of running commands."""
MIN_THREADS_PER_PROCESS = 16


def raise_fd_limit() -> tuple[int, int] | None:
    """Raise this process's soft open-file limit to its hard limit (as Node does for Codex's
    wrapper), so the Codex processes it starts inherit it too: the common soft limit of 1,024
    would fill a process at 112 threads where the hard limit (often 524,288) allows them all.
    Returns ``(before, after)`` when it changed, else ``None`` (already equal, or refused)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return None
    return soft, hard


def thread_budget(fd_limit: int | None = None) -> int:
    """How many threads one Codex process may take under the open-file limit ``fd_limit``
    (default: this process's soft ``RLIMIT_NOFILE``, which Codex inherits): 112 for 1,024."""
    if fd_limit is None:
        fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if fd_limit == resource.RLIM_INFINITY or fd_limit < 0:
        fd_limit = 1 << 20
    return max(MIN_THREADS_PER_PROCESS, (fd_limit - FD_RESERVE) // FDS_PER_THREAD)


class PoolPhase(enum.Enum):
    """Where the pool is in its life: it hands out connections until it is closed."""

    OPEN = "open"
    CLOSED = "closed"


POOL_TRANSITIONS = transitions((PoolPhase.OPEN, (PoolPhase.CLOSED,)))
"""A closed pool does not open again."""


class AppServerPool:
    """Up to ``size`` shared ``codex app-server`` processes (module docstring)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        settings: DriverSettings,
        size: int = 1,
        restart_backoff: float = 1.0,
        threads_per_process: int | None = None,
        keep_idle: float = 0.0,
    ) -> None:
        """``threads_per_process``: the threads one process takes before it is full (module
        docstring); default :func:`thread_budget` of the open-file limit. ``keep_idle``: seconds a
        process with no thread is kept warm before it is ended (0: ended at once)."""
        if size < 1:
            raise ValueError("an app-server pool needs at least one process")
        self.command = tuple(command)
        self.env = dict(env)
        self.cwd = cwd
        self.settings = settings
        self.size = size
        self.restart_backoff = restart_backoff
        self.threads_per_process = thread_budget() if threads_per_process is None else max(1, threads_per_process)
        self.keep_idle = keep_idle
        self._connections: list[AppServerConnection] = []
        self._lock = asyncio.Lock()
        self._failures = 0
        self._failed_at = 0.0
        self._lifecycle = Lifecycle("the app-server pool", POOL_TRANSITIONS, PoolPhase.OPEN, where=__name__)
        self._closing: set[asyncio.Future[None]] = set()
        self._prestart: asyncio.Task[None] | None = None
        self._warm: dict[AppServerConnection, asyncio.Task[None]] = {}
        """The processes kept with no thread, each with the task that ends it after ``keep_idle``."""

    @property
    def pids(self) -> list[int]:
        """The live processes (group leaders)."""
        return [pid for c in self._connections if c.alive and (pid := c.pid) is not None]

    @property
    def connections(self) -> list[AppServerConnection]:
        """The live connections."""
        return [c for c in self._connections if c.alive]

    async def connect(self, thread_id: str | None = None) -> AppServerConnection:
        """A live connection for one more thread (call :meth:`release` when the thread is closed);
        raises :class:`DriverError` when no process can be started. A thread to be resumed goes
        back to the process that has it loaded, if one runs, full or not: that process holds
        the thread's rollout writer, and any other would refuse it ("already has an active
        writer")."""
        async with self._lock:
            if self._lifecycle.is_in(PoolPhase.CLOSED):
                raise DriverError("the Codex app-server pool is closed")
            self._connections = self.connections
            holder = next((c for c in self._connections if thread_id is not None and thread_id in c.loaded), None)
            if holder is not None:
                self._unwarm(holder)
                holder.users += 1
                return holder
            open_ = [c for c in self._connections if c.opened < self.threads_per_process]
            unused = [c for c in open_ if c.users == 0]
            if open_ and (unused or len(open_) >= self.size):
                chosen = min(open_, key=lambda c: c.users)
            else:
                chosen = await self._start()
            self._unwarm(chosen)
            chosen.users += 1
            chosen.opened += 1
            if chosen.opened == self.threads_per_process:
                log.info(
                    "the shared Codex app-server (pid %s) has taken %d threads, what its open-file limit allows; "
                    "new threads go to a new process, and this one ends once its conversations are idle",
                    chosen.pid,
                    chosen.opened,
                )
            return chosen

    @property
    def warm_pids(self) -> list[int]:
        """The live processes kept warm (no thread on them), waiting for one."""
        return [pid for c in self._warm if c.alive and (pid := c.pid) is not None]

    def prestart(self) -> None:
        """Start one process now, in the background, unless one runs (module docstring): the next
        :meth:`connect` takes it; it is warm until then, ended after ``keep_idle`` seconds. A
        failure is logged once (with what to do) and left to the next :meth:`connect` to retry."""
        if self._prestart is None and not self._lifecycle.is_in(PoolPhase.CLOSED):
            self._prestart = asyncio.create_task(self._start_ahead(), name="codex-app-server-prestart")

    async def _start_ahead(self) -> None:
        async with self._lock:
            if self._lifecycle.is_in(PoolPhase.CLOSED) or self.connections:
                return
            try:
                connection = await self._start()
            except DriverError as exc:
                error = classify(str(exc))
                log.warning(
                    "could not start the shared Codex app-server ahead of the first thought (%s): %s; %s."
                    " It is started again when a thought needs it",
                    error.code,
                    error.message,
                    error.hint,
                )
                return
            except Exception:  # a bug, not Codex: said once here, the first thought starts Codex as usual
                log.exception("starting the shared Codex app-server ahead of the first thought failed")
                return
            self._keep_warm(connection)

    def _keep_warm(self, connection: AppServerConnection) -> None:
        """Keep ``connection`` (no thread on it) for the next thread, ending it after ``keep_idle``."""
        self._warm[connection] = asyncio.create_task(self._cool(connection), name="codex-app-server-warm")

    def _unwarm(self, connection: AppServerConnection) -> None:
        """``connection`` takes a thread: it is not waiting to be ended any more."""
        timer = self._warm.pop(connection, None)
        if timer is not None:
            timer.cancel()

    async def _cool(self, connection: AppServerConnection) -> None:
        """End the warm ``connection`` once it has had no thread for ``keep_idle`` seconds."""
        await asyncio.sleep(self.keep_idle)
        async with self._lock:
            if self._warm.get(connection) is not asyncio.current_task():
                return  # (taken meanwhile)
            del self._warm[connection]
            if self._lifecycle.is_in(PoolPhase.CLOSED) or connection.users > 0 or connection not in self._connections:
                return
            log.info(
                "the shared Codex app-server (pid %s) has had no thread for %gs (idle_reap); ending it",
                connection.pid,
                self.keep_idle,
            )
            closing = self._end(connection)
        await asyncio.shield(closing)  # (a cancelled timer leaves it to finish; aclose() waits for it)

    async def _start(self) -> AppServerConnection:
        """Start one more process (after the restart backoff) and add it; the caller holds the lock."""
        await self._wait_backoff()
        started = AppServerConnection(
            self.command, env=self.env, cwd=self.cwd, settings=self.settings, on_lost=self._lost
        )
        try:
            await started.start()
        except DriverError:
            if started.lost is None:  # (a process that died was counted when it was lost)
                self._note_failure(None)
            raise
        self._connections.append(started)
        log.info("started a shared Codex app-server (pid %s; %d running)", started.pid, len(self._connections))
        return started

    async def unload(self, thread_id: str) -> bool:
        """End the process that has ``thread_id`` loaded, if one runs; whether one did.

        Codex cannot be told to unload one thread, and resuming it goes back to that process
        (:meth:`connect`), which would continue it from the history it holds in memory, appending to
        the file it opened. When that file was replaced underneath it (a daemon of a cluster adopting
        a conversation that another daemon continued meanwhile, docs/distributed.md), the thread must
        be resumed from the new file. A process that has unloaded the thread by itself (Codex 0.160
        and later unload a thread let go: ``thread/loaded/list`` no longer names it) reads it afresh
        on the next resume and is kept: a warm process is not ended for a thread it let go. Else the
        process is ended; its other threads hear that it ended, as after a crash, and are resumed on
        a new one."""
        async with self._lock:
            holder = next((c for c in self.connections if thread_id in c.loaded), None)
            if holder is None:
                return False
            if not await self._has_loaded(holder, thread_id):
                holder.loaded.discard(thread_id)  # (resumed there, Codex reads the new file)
                return False
            self._unwarm(holder)
            self._connections = [c for c in self._connections if c is not holder]  # (never handed out again)
        log.warning(
            "ending the shared Codex app-server (pid %s, %d thread(s) on it): it still has thread %s loaded, whose"
            " rollout another daemon continued; the thread is resumed from the new rollout by a new process",
            holder.pid,
            holder.threads,
            thread_id,
        )
        await holder.kill(
            ClassifiedError(
                ErrorCode.PROCESS_EXITED,
                f"the shared Codex app-server was ended to resume thread {thread_id[:60]} from its new rollout",
                HINTS[ErrorCode.PROCESS_EXITED],
            ),
            blameless=True,
        )
        return True

    async def _has_loaded(self, connection: AppServerConnection, thread_id: str) -> bool:
        """Whether ``connection``'s process has ``thread_id`` loaded, as far as it says
        (``thread/loaded/list``); ``True`` when it cannot tell (an older Codex, no answer)."""
        if connection.has_thread(thread_id):
            return True  # (attached here: loaded whatever the list says)
        try:
            listed = LoadedThreads.model_validate(
                await connection.request("thread/loaded/list", {}, within=self.settings.kill_grace)
            )
        except (RpcError, DriverError, ValidationError) as exc:
            log.debug("thread/loaded/list not answered (%s); taking the thread as loaded", exc)
            return True
        return thread_id in listed.data or listed.next_cursor is not None

    async def release(self, connection: AppServerConnection) -> None:
        """A thread that :meth:`connect` placed on ``connection`` is closed. After the last one the
        process is kept warm (module docstring) when it runs, is not full, and no other process is
        warm already; else it is ended (and this returns once it is gone)."""
        connection.users = max(0, connection.users - 1)
        if connection.users > 0 or self._lifecycle.is_in(PoolPhase.CLOSED):
            return
        full = connection.opened >= self.threads_per_process
        if connection.alive and not full and self.keep_idle > 0 and not any(c.alive for c in self._warm):
            log.debug("no conversation uses the shared Codex app-server (pid %s); keeping it warm", connection.pid)
            self._keep_warm(connection)
            return
        if connection.lost is None:
            log.info("no conversation uses the shared Codex app-server (pid %s) any more; ending it", connection.pid)
        await asyncio.shield(self._end(connection))  # (a cancelled caller leaves it to finish; aclose() waits)

    def _end(self, connection: AppServerConnection) -> asyncio.Future[None]:
        """Hand ``connection`` out no more and end its process; the future is done once it is gone."""
        connection.retire()  # at once: connect() never hands it out again
        self._connections = [c for c in self._connections if c is not connection]
        closing = asyncio.ensure_future(connection.aclose())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        return closing

    async def aclose(self) -> None:
        """End every process (politely first: see :meth:`AppServerConnection.aclose`), and wait
        for those being ended already."""
        self._lifecycle.move(PoolPhase.CLOSED)
        if self._prestart is not None:
            self._prestart.cancel()  # (a process it is starting is ended by the start itself)
            with contextlib.suppress(asyncio.CancelledError):
                await self._prestart
        timers = list(self._warm.values())
        self._warm.clear()
        for timer in timers:
            timer.cancel()
        await asyncio.gather(*timers, return_exceptions=True)
        connections, self._connections = self._connections, []
        await asyncio.gather(*(c.aclose() for c in connections), *self._closing)

    def _lost(self, connection: AppServerConnection) -> None:
        self._note_failure(connection)

    def _note_failure(self, connection: AppServerConnection | None) -> None:
        now = asyncio.get_running_loop().time()
        lived_well = connection is not None and (connection.served or now - connection.started_at > MAX_BACKOFF)
        self._failures = 1 if lived_well else self._failures + 1
        self._failed_at = now

    async def _wait_backoff(self) -> None:
        if self._failures == 0:
            return
        loop = asyncio.get_running_loop()
        delay = backoff(self.restart_backoff, self._failures) - (loop.time() - self._failed_at)
        if delay > 0:
            log.info("restarting the shared Codex app-server in %.1fs (failure %d in a row)", delay, self._failures)
            await asyncio.sleep(delay)
