"""Starting Codex processes and ending their whole process tree (issue 4 item 7).

Codex on npm is a Node wrapper that spawns the native binary, which in turn starts MCP
servers and shell commands. Every Codex process is therefore started in its own session and
process group (``start_new_session=True``) and ended as a tree by :func:`terminate_tree`:

1. snapshot the descendants with psutil (after the wrapper dies, its children are reparented
   and can no longer be found through it);
2. SIGTERM the process group, wait up to ``grace`` seconds for the leader to exit;
3. SIGKILL the process group;
4. sweep: every snapshotted descendant still alive (one that escaped the group with
   ``setsid``) is killed too, and so is every process whose environment carries this tree's
   marker (``COVEN_PROCESS_TREE=<random token>``, set at spawn and inherited), which finds
   descendants orphaned when their parent was killed from outside.

Ending a tree that is already gone is a no-op, so it is safe to call more than once.
:class:`ChildProcess` also exposes the moment the process itself exits (``exited``), which
``Process.wait()`` does not on Python 3.11 while a surviving grandchild holds the pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

STREAM_LIMIT = 64 * 2**20  # app-server lines can carry whole turns (e.g. thread/resume results)
SWEEP_ROUNDS = 5
"""Extra sweeps for descendants forked while the tree was being killed."""
SWEEP_WAIT = 10.0
"""How long a killed process may take to be gone. Usually milliseconds; but a process killed in
uninterruptible sleep (``D``, e.g. a thread in an fsync on a busy disk) goes only when that call
returns, and under load that was seen to take over 2 s."""
TREE_MARKER = "COVEN_PROCESS_TREE"
PIPE_CLOSE_WAIT = 5.0


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Stream protocol that also signals the moment the process exits.

    ``Process.wait()`` (Python 3.11) only returns once every pipe is closed too, and a
    grandchild that outlives its parent (Codex's native binary after its Node wrapper was
    killed) keeps them open; ``exited`` is set when the process itself is gone.
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


@dataclass(slots=True)
class ChildProcess:
    """A started process (leading its own process group) and its exit event."""

    process: asyncio.subprocess.Process
    exited: asyncio.Event
    tree_token: str  # value of TREE_MARKER in the environment of the process and its descendants

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def stdin(self) -> asyncio.StreamWriter | None:
        return self.process.stdin

    @property
    def stdout(self) -> asyncio.StreamReader | None:
        return self.process.stdout

    @property
    def stderr(self) -> asyncio.StreamReader | None:
        return self.process.stderr

    async def wait(self) -> int:
        """Like ``Process.wait()``: the exit code, once the process exited and its pipes closed."""
        return await self.process.wait()

    async def wait_exit(self, seconds: float | None = None) -> bool:
        """Wait until the process itself has exited (pipes may still be open); ``False`` on timeout."""
        try:
            await asyncio.wait_for(self.exited.wait(), seconds)
        except TimeoutError:
            return False
        return True


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    stdin: int | None = subprocess.PIPE,
    stdout: int | None = subprocess.PIPE,
    stderr: int | None = subprocess.PIPE,
) -> ChildProcess:
    """Start ``argv`` in its own session/process group with pipes; see the module docstring."""
    log.debug("starting %s in %s", argv[0], cwd)
    loop = asyncio.get_running_loop()
    protocol_holder: list[_ExitAwareProtocol] = []

    def factory() -> _ExitAwareProtocol:
        protocol = _ExitAwareProtocol(limit=STREAM_LIMIT, loop=loop)
        protocol_holder.append(protocol)
        return protocol

    token = uuid.uuid4().hex
    transport, protocol = await loop.subprocess_exec(
        factory,
        *argv,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env={**env, TREE_MARKER: token},
        cwd=str(cwd),
        start_new_session=True,
    )
    process = asyncio.subprocess.Process(transport, protocol, loop)
    return ChildProcess(process=process, exited=protocol.exited, tree_token=token)


def descendants(pid: int) -> list[psutil.Process]:
    """All living descendants of ``pid`` (empty if it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def signal_group(pgid: int, signum: signal.Signals) -> bool:
    """Send ``signum`` to process group ``pgid``; ``False`` if the group no longer exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        log.warning("not allowed to signal process group %d", pgid)
        return False
    return True


async def terminate_tree(child: ChildProcess, grace: float) -> int | None:
    """End ``child``, its process group and every descendant that escaped; return its exit code."""
    pgid = child.pid
    snapshot = {p.pid: p for p in descendants(child.pid)}
    if child.returncode is None:
        signal_group(pgid, signal.SIGTERM)
        if not await child.wait_exit(grace):
            log.warning("Codex process %d did not stop %.1fs after SIGTERM; killing it", child.pid, grace)
        snapshot.update({p.pid: p for p in descendants(child.pid)})
    # The leader may be gone while group members (the native binary, MCP servers) linger. Once
    # the leader is reaped its pid (= the group id) is only safe to signal while a member lives.
    if child.returncode is None or group_has_member(pgid, snapshot.values()):
        signal_group(pgid, signal.SIGKILL)
    await child.wait_exit()
    await asyncio.to_thread(_sweep_tree, child.tree_token, list(snapshot.values()))
    # Every holder of our pipes is dead now, so they close and the transport finishes.
    try:
        await asyncio.wait_for(child.process.wait(), PIPE_CLOSE_WAIT)
    except TimeoutError:
        log.warning("pipes of Codex process %d are still open (held by an unknown process)", child.pid)
    return child.returncode


def group_has_member(pgid: int, processes: Iterable[psutil.Process]) -> bool:
    """Whether one of ``processes`` is still running in process group ``pgid``."""
    for process in processes:
        with contextlib.suppress(psutil.Error, OSError):
            if process.is_running() and os.getpgid(process.pid) == pgid:
                return True
    return False


def processes_with_environ(matches: Callable[[Mapping[str, str]], bool]) -> list[psutil.Process]:
    """Processes (of this user, not this one) whose environment ``matches``: one process-table walk.

    The environment finds descendants even after their parent died and they were reparented, as
    long as they kept the environment they inherited.
    """
    found: list[psutil.Process] = []
    me = os.getpid()
    for process in psutil.process_iter():
        if process.pid == me:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if matches(process.environ()):
                found.append(process)
    return found


def marked_processes(token: str) -> list[psutil.Process]:
    """Processes whose environment carries ``TREE_MARKER=token`` (the tree :func:`spawn` started)."""
    return processes_with_environ(lambda environ: environ.get(TREE_MARKER) == token)


def _sweep_tree(token: str, snapshot: list[psutil.Process]) -> list[int]:
    """Kill what is left of a tree, again until a fresh look finds nothing of it running.

    One pass is not enough: a descendant can fork between being listed and being killed (a
    shell loop such as pyenv's rehash spawning ``sleep``, run by Codex's login-shell snapshot),
    and its new child was in no list. A killed process cannot fork again, so this ends.
    """
    killed = sweep(snapshot)
    for _ in range(1 + SWEEP_ROUNDS):  # one process-table scan when nothing is left, the usual case
        stragglers = [p for p in marked_processes(token) if running(p)]
        if not stragglers:
            break
        killed += sweep(stragglers)
    return killed


def sweep(processes: Sequence[psutil.Process], wait: float = SWEEP_WAIT) -> list[int]:
    """Kill every process in ``processes`` that is still running and wait (up to ``wait``
    seconds) until none of them runs any more; return the pids this call killed.

    Processes already signalled through their group are waited for too: a killed process may
    take a moment to go (uninterruptible sleep while it tears down), and callers rely on the
    tree being gone when :func:`terminate_tree` returns.
    """
    killed: list[int] = []
    for process in processes:
        if running(process):
            with contextlib.suppress(psutil.Error):
                # psutil checks the creation time, so a reused pid is never signalled.
                process.kill()
                killed.append(process.pid)
                log.warning("killed Codex descendant %d that outlived its group", process.pid)
    deadline = time.monotonic() + wait
    while any(running(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.02)
    for process in processes:
        if running(process):
            log.warning("Codex process %d is still not gone %.0fs after SIGKILL (uninterruptible sleep?)",
                        process.pid, wait)
    # Reap zombies that are our own children so they do not linger in the process table.
    me = os.getpid()
    for process in processes:
        with contextlib.suppress(psutil.Error, ChildProcessError, OSError):
            if process.ppid() == me:
                os.waitpid(process.pid, os.WNOHANG)
    return killed


def running(process: psutil.Process) -> bool:
    """Alive and not a zombie (a zombie has exited; only its parent's reaping is missing)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def run_captured(
    argv: Sequence[str], *, env: Mapping[str, str], timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a short command in its own process group; on timeout kill the whole group.

    Raises :class:`subprocess.TimeoutExpired` after the group is killed (unlike
    ``subprocess.run``, which kills only the direct child and can then hang on pipes that a
    grandchild keeps open).
    """
    with subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env),
        cwd=None if cwd is None else str(cwd),
        start_new_session=True,
    ) as popen:
        try:
            out, err = popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            snapshot = descendants(popen.pid)
            signal_group(popen.pid, signal.SIGKILL)
            sweep(snapshot)
            popen.communicate()
            raise
        return subprocess.CompletedProcess(list(argv), popen.returncode, out, err)
