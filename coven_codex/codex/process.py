"""Starting Codex processes and ending their whole process tree (issue 4 item 7, issue 9).

Codex on npm is a Node wrapper that spawns the native binary, which in turn starts MCP
servers, shell commands, and a login-shell snapshot (``bash -lc`` sourcing ``~/.bashrc``) in a
session of its own. Every Codex process is therefore started in its own session and process
group (``start_new_session=True``), its environment carries a per-tree marker
(``COVEN_PROCESS_TREE=<random token>``, inherited by every descendant), and it is ended as a
tree by :func:`terminate_tree`:

1. the polite phase, at most ``grace`` seconds in all: optionally a moment for the process to
   exit on its own (the app-server exits when its stdin closes), then SIGTERM to the group;
2. SIGKILL to the group (the kernel signals a whole group atomically: a member forking at that
   moment has its fork undone, so nothing in the group survives);
3. the sweep, bounded by :data:`KILL_WAIT`: every member of the tree outside the group (escaped
   with ``setsid``, like the shell snapshot, or orphaned) is killed the moment a look places it,
   with its whole process group when it leads one (:func:`_kill_member`: a fork loop stops at
   once, and what it forked dies with it), and the tree is looked at again until one look finds
   nothing of it running;
4. the pipes are closed from our side, so readers of the tree's output end even if something
   unknown still holds the other end.

**Why descendants used to escape, and what catches them now.** The sweep found escaped members
by reading every process's environment for the marker. A process in the middle of ``execve``
(a fresh ``sleep 0.1`` from pyenv's rehash loop in the shell snapshot, say) has no readable
environment for a moment: ``/proc/PID/environ`` reads empty while the new image is being set
up, and under load that moment is long. Its parent had just been killed, so it was already
reparented to init (ppid 1): no ancestry led to it either. One such look was enough for the
sweep to conclude that nothing was left. Two changes close this:

- The daemon (any process, at its first :func:`spawn`) makes itself a *child subreaper* (:func:`become_subreaper`,
  ``prctl(PR_SET_CHILD_SUBREAPER)``): an orphaned descendant is reparented to the daemon, not to
  init, so every process a Codex tree ever started stays a descendant of the daemon until it is
  gone. The sweep then walks only the daemon's descendants (small, and complete), and a process
  whose environment cannot be read is placed by ancestry: its parent is a member, or its session
  is one of the tree's sessions (the leader's, or one a member leads; a session cannot be
  re-entered, so a process in it was started inside the tree).
- A live process that still cannot be placed (environment unreadable, no link to the tree)
  is *unknown*: the look is repeated after a short pause until no member and no unknown is left
  (a quiet look) or :data:`KILL_WAIT` is over. Without the subreaper (not Linux, or ``prctl``
  refused) the whole process table is searched as before, with the same rule for unknowns among
  orphans (ppid 1).

Freezing the tree first (SIGSTOP, or the cgroup freezer) is not needed on top of this: SIGKILL
stops a process from forking as surely as SIGSTOP, and every child forked before the kill is
found by the next look. cgroups would give an atomic ``cgroup.kill``, but an unprivileged daemon
usually cannot create one.

Orphans reparented to the daemon must be reaped by it: every sweep reaps the zombies among the
daemon's children that were reparented (in the tree's sessions, or outside the daemon's session
without leading one), never a process the daemon started itself, whose exit status asyncio or
``subprocess`` collects. An orphan that leads its own session and exits while its tree runs
stays a zombie until the daemon exits (init reaps it then).

Ending a tree that is already gone is a no-op, so it is safe to call more than once.
:func:`end_all_trees` ends every tree this process started and has not ended yet (shutdown).
:class:`ChildProcess` also exposes the moment the process itself exits (``exited``), which
``Process.wait()`` does not on Python 3.11 while a surviving grandchild holds the pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from coven_codex.tailing.libc import linux_libc

log = logging.getLogger(__name__)

STREAM_LIMIT = 64 * 2**20  # app-server lines can carry whole turns (e.g. thread/resume results)
KILL_WAIT = 2.0
"""How long the sweep after SIGKILL may take in all: looking again for members forked meanwhile,
and waiting for killed processes to be gone (usually milliseconds; a process killed in
uninterruptible sleep, ``D``, goes only when that call returns; it is reported, and its marker
lets the next start find it). Part of the shutdown bound in ``docs/operations.md``."""
PIPE_WAIT = 0.5
"""After the sweep: how long the tree's pipes may take to close before we close our side."""
UNKNOWN_PATIENCE = 0.5
"""How long a process that cannot be placed (environment unreadable) keeps the sweep looking."""
SCAN_PAUSE = 0.02
"""Pause before looking again when a process could not be placed (it is probably mid-exec)."""
TREE_MARKER = "COVEN_PROCESS_TREE"
PR_SET_CHILD_SUBREAPER = 36


@dataclass(slots=True)
class _Trees:
    subreaper: bool = False
    """Whether this process is the subreaper of its descendants (:func:`become_subreaper`)."""
    subreaper_tried: bool = False
    """Whether :func:`become_subreaper` was called (:func:`spawn` calls it before the first tree)."""
    live: dict[int, ChildProcess] = field(default_factory=dict)
    """Trees started by :func:`spawn` and not yet ended by :func:`terminate_tree`, by leader pid."""
    reported: set[int] = field(default_factory=set)
    """Processes already reported as not gone after SIGKILL (each is reported once)."""


_trees = _Trees()


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``).

    Afterwards every process a Codex tree starts remains a descendant of this process until it is
    gone, which is what lets :func:`terminate_tree` find all of it (see the module docstring).
    Returns ``False`` (and the sweep falls back to searching the whole process table) where the
    call is not available.
    """
    _trees.subreaper_tried = True
    libc = linux_libc()
    if libc is None:
        return False
    if libc.prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0) != 0:
        log.warning(
            "cannot become the subreaper of Codex processes (errno %d); searching the "
            "whole process table for them instead",
            ctypes.get_errno(),
        )
        return False
    _trees.subreaper = True
    return True


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
    transport: asyncio.SubprocessTransport | None = None
    sessions: set[int] = field(default_factory=set)
    """Sessions known to belong to the tree (the leader's, and those its members lead)."""
    started: float = field(default_factory=time.time)
    left: list[int] = field(default_factory=list)
    """Members still running after the last :func:`terminate_tree` (not gone after SIGKILL)."""

    @property
    def pid(self) -> int:
        """The process's pid, which is also its process-group id."""
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has exited (negative: killed by that signal), else ``None``."""
        return self.process.returncode

    @property
    def stdin(self) -> asyncio.StreamWriter | None:
        """The process's stdin stream, if it was piped."""
        return self.process.stdin

    @property
    def stdout(self) -> asyncio.StreamReader | None:
        """The process's stdout stream, if it was piped."""
        return self.process.stdout

    @property
    def stderr(self) -> asyncio.StreamReader | None:
        """The process's stderr stream, if it was piped."""
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
    """Start ``argv`` in its own session/process group with pipes; see the module docstring.

    The first call makes this process the subreaper of its descendants (:func:`become_subreaper`)
    unless that was done already: whoever starts a Codex tree (the daemon, ``coven-codex exec``,
    a driver used as a library) can then end all of it, however loaded the machine.
    """
    if not _trees.subreaper_tried:
        become_subreaper()
    log.debug("starting %s in %s", argv[0], cwd)
    loop = asyncio.get_running_loop()

    def factory() -> _ExitAwareProtocol:
        return _ExitAwareProtocol(limit=STREAM_LIMIT, loop=loop)

    token = uuid.uuid4().hex
    started = time.time() - 1.0  # create times are rounded to the clock tick
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
    child = ChildProcess(
        process=process,
        exited=protocol.exited,
        tree_token=token,
        transport=transport,
        sessions={process.pid},
        started=started,
    )
    _trees.live[child.pid] = child
    return child


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


async def terminate_tree(child: ChildProcess, grace: float, *, patience: float = 0.0) -> int | None:
    """End ``child``, its process group and every other member of its tree; return its exit code.

    The polite phase takes at most ``grace`` seconds: the first ``patience`` of them (capped at
    ``grace``) the process may exit by itself, then the group gets SIGTERM, and once ``grace``
    is over SIGKILL. What follows (the sweep, the exit and the pipes) takes at most
    :data:`KILL_WAIT` + :data:`PIPE_WAIT`, so this returns within ``grace + KILL_WAIT + PIPE_WAIT``
    plus one look at the process table.
    """
    loop = asyncio.get_running_loop()
    pgid = child.pid
    deadline = loop.time() + max(grace, 0.0)
    if child.returncode is None and patience > 0:
        await child.wait_exit(min(patience, grace))
    if child.returncode is None and grace > 0:
        signal_group(pgid, signal.SIGTERM)
        if not await child.wait_exit(max(0.0, deadline - loop.time())):
            log.warning("Codex process %d did not stop %.1fs after SIGTERM; killing it", child.pid, grace)
    # Until asyncio has reaped the leader its pid (= the group id) cannot be reused, so the group
    # is safe to signal. Afterwards members that outlived the leader are found by the sweep.
    if child.returncode is None:
        signal_group(pgid, signal.SIGKILL)
    left = await asyncio.to_thread(_sweep_tree, child.tree_token, child.sessions, child.started, KILL_WAIT)
    child.left = left
    # Every holder of our pipes is dead now, so they close and the transport finishes; if one
    # still holds them (not gone after SIGKILL, or never found), closing our side ends the
    # readers all the same.
    try:
        await asyncio.wait_for(child.process.wait(), PIPE_WAIT)
    except TimeoutError:
        holder = f"process(es) {_describe_pids(left)}" if left else "an unknown process"
        log.warning("the pipes of Codex process %d are still open (held by %s); closing them", child.pid, holder)
        if child.transport is not None:
            child.transport.close()
    if child.returncode is not None and not left:
        _trees.live.pop(child.pid, None)
    return child.returncode


async def end_all_trees(grace: float) -> list[int]:
    """End every tree :func:`spawn` started that is not ended yet, all at once (shutdown); then,
    when this process is their subreaper, every other descendant outside its own session (any
    Codex descendant a tree lost track of: a session cannot be re-entered, so everything Codex
    started is outside ours). Returns the pids still running afterwards; the caller reports
    them, once."""
    children = list(_trees.live.values())
    outside: asyncio.Future[list[int]] | None = None
    if _trees.subreaper:  # at the same time: what the trees' sweeps cannot place is killed too
        outside = asyncio.ensure_future(asyncio.to_thread(_sweep_outside_session, KILL_WAIT))
    await asyncio.gather(*(terminate_tree(child, grace) for child in children))
    left = {pid for child in children for pid in child.left}
    left.update(child.pid for child in children if child.returncode is None)
    if outside is not None:
        left.update(await outside)
    return sorted(left)


def _sweep_outside_session(wait: float) -> list[int]:
    """Kill this process's descendants outside its session until none runs (at most ``wait``
    seconds); return those still running. Zombies among our children are reaped, except those
    of processes :func:`spawn` started (asyncio collects their status)."""
    own = os.getsid(0)
    deadline = time.monotonic() + wait
    doomed: dict[int, psutil.Process] = {}
    while True:
        found = [p for p in descendants(os.getpid()) if running(p) and _sid(p.pid) not in (own, None)]
        for process in found:
            with contextlib.suppress(psutil.Error):
                process.kill()
                doomed[process.pid] = process
        if not found or time.monotonic() >= deadline:
            break
    while any(running(p) for p in doomed.values()) and time.monotonic() < deadline:
        time.sleep(SCAN_PAUSE)
    with contextlib.suppress(psutil.Error):
        for process in psutil.Process().children():
            ours = process.pid in doomed and process.pid not in _trees.live
            with contextlib.suppress(psutil.Error, OSError):
                if ours and process.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(process.pid, os.WNOHANG)
    return [pid for pid, p in doomed.items() if running(p)]


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


def _candidates() -> list[psutil.Process]:
    """Where members of a tree can be: this process's descendants when it is their subreaper,
    else every process."""
    if _trees.subreaper:
        return descendants(os.getpid())
    me = os.getpid()
    return [p for p in psutil.process_iter() if p.pid != me]


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _tree_members(
    token: str, sessions: set[int], since: float, on_member: Callable[[psutil.Process], None]
) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """One look: the running members of the tree ``token``, and the running processes that could
    not be placed yet (environment unreadable, no link to the tree, started after the tree was).

    A process carrying the marker is a member. One without it (environment unreadable mid-exec,
    or cleared by whatever started it) is a member when its parent is one or its session is one
    of ``sessions``, which grows with the sessions members lead. ``on_member`` gets each member
    as soon as it is placed, while the look goes on (the sweep kills it then, see :func:`_kill_member`).
    """
    members: dict[int, psutil.Process] = {}
    unplaced: list[tuple[psutil.Process, bool]] = []  # (process, environment unreadable)
    candidates = _candidates()
    # Parents as they were before this look kills anything: a child whose parent a kill of this
    # look ends is reparented to us at once, and is still placed by the parent it had.
    parents: dict[int, int] = {}
    for process in candidates:
        with contextlib.suppress(psutil.Error):
            parents[process.pid] = process.ppid()
    for process in candidates:
        if not running(process):
            continue
        try:
            environ = process.environ()
        except psutil.AccessDenied:
            continue  # another user's process: never ours
        except psutil.Error:
            environ = {}
        marker = environ.get(TREE_MARKER)
        if marker == token:
            members[process.pid] = process
            if _sid(process.pid) == process.pid:
                sessions.add(process.pid)
            on_member(process)
        elif marker is None:
            unplaced.append((process, not environ))
    unknown: list[psutil.Process] = []
    changed = True
    while changed:  # parents before children, whatever order the table was read in
        changed = False
        rest: list[tuple[psutil.Process, bool]] = []
        for process, unreadable in unplaced:
            with contextlib.suppress(psutil.Error):
                if parents.get(process.pid) in members or _sid(process.pid) in sessions:
                    members[process.pid] = process
                    on_member(process)
                    changed = True
                else:
                    rest.append((process, unreadable))
        unplaced = rest
    for process, unreadable in unplaced:
        with contextlib.suppress(psutil.Error):
            if unreadable and (_trees.subreaper or process.ppid() == 1) and process.create_time() >= since:
                unknown.append(process)
    return list(members.values()), unknown


def _sweep_tree(token: str, sessions: set[int], since: float, wait: float) -> list[int]:
    """Kill what is left of a tree, looking again until one look finds nothing of it running,
    within ``wait`` seconds; return the pids of members still running at the end.

    A descendant can fork between one look and its own death (a shell loop such as pyenv's
    rehash spawning ``sleep``, run by Codex's login-shell snapshot): its child is found by the
    next look. A killed process cannot fork again, so this ends; ``wait`` bounds it all the same.
    """
    deadline = time.monotonic() + wait
    doomed: dict[int, psutil.Process] = {}
    first_seen: dict[int, float] = {}
    own_group = os.getpgid(0)

    def kill(process: psutil.Process) -> None:
        _kill_member(process, own_group)
        doomed[process.pid] = process

    while True:
        members, unknown = _tree_members(token, sessions, since, kill)
        now = time.monotonic()
        # Mid-exec lasts moments; a process unreadable for longer simply has no environment.
        unknown = [p for p in unknown if now - first_seen.setdefault(p.pid, now) < UNKNOWN_PATIENCE]
        if (not members and not unknown) or time.monotonic() >= deadline:
            break
        if not members:
            time.sleep(SCAN_PAUSE)  # a process mid-exec: its environment is readable in a moment
    while any(running(p) for p in doomed.values()) and time.monotonic() < deadline:
        time.sleep(SCAN_PAUSE)
    left = [pid for pid, p in doomed.items() if running(p)]
    _report_left(left, wait)
    _reap_orphans(sessions)
    return left


def _kill_member(process: psutil.Process, own_group: int) -> None:
    """SIGKILL a member of a tree the moment a look places it, and its whole process group when it
    leads one.

    A look reads every candidate's environment, which takes a while on a loaded machine (over a
    second was measured with a fork loop running): killing the members only once the look was
    over let a fork loop (the shell snapshot's ``while ...; do sleep 0.5 & done``) fork on for that
    long, and the next look had hundreds more children to read, until :data:`KILL_WAIT` ran out
    with some still running. Killed when placed, the loop forks no more; killed as a group,
    every child it forked is killed with it, atomically, including one forked since the look
    listed the processes (the kernel undoes a fork the group kill interrupts). A group led by a
    member lies inside the tree's sessions (a group never spans sessions, and no tree process can
    join the daemon's), and its id cannot be reused while the leader's pid is unreaped, so the
    group kill never reaches a process outside the tree (the leader is checked to be the member
    the look saw just before).
    """
    with contextlib.suppress(psutil.Error, OSError):
        # (is_running checks the creation time: a reused pid is never taken for the member)
        if process.is_running() and os.getpgid(process.pid) == process.pid != own_group:
            os.killpg(process.pid, signal.SIGKILL)
            return
    with contextlib.suppress(psutil.Error):
        process.kill()  # psutil checks the creation time: a reused pid is never signalled


def _report_left(left: Sequence[int], wait: float) -> None:
    """Log the processes not gone after SIGKILL, each once however often a sweep finds it."""
    new = [pid for pid in left if pid not in _trees.reported]
    if new:
        _trees.reported.update(new)
        log.warning(
            "Codex process(es) %s still not gone %.0fs after SIGKILL (uninterruptible sleep?)",
            _describe_pids(new),
            wait,
        )


def _reap_orphans(sessions: set[int]) -> None:
    """Reap the zombies among this process's children that were reparented to us as their
    subreaper: those in the tree's ``sessions``, and any outside our own session that does not
    lead a session of its own. Never a process started here: :func:`spawn`'s (asyncio collects
    their status) are skipped by pid; one started by ``subprocess`` is in our session, or leads
    its own when started with ``start_new_session``."""
    own = _sid(0)
    with contextlib.suppress(psutil.Error):
        for process in psutil.Process().children():
            pid = process.pid
            with contextlib.suppress(psutil.Error, OSError):
                if pid in _trees.live or process.status() != psutil.STATUS_ZOMBIE:
                    continue
                sid = _sid(pid)
                if sid in sessions or sid not in (own, pid, None):
                    os.waitpid(pid, os.WNOHANG)


def _describe_pids(pids: Sequence[int]) -> str:
    shown = ", ".join(str(pid) for pid in pids[:5])
    return shown + (f" and {len(pids) - 5} more" if len(pids) > 5 else "")


def sweep(processes: Sequence[psutil.Process], wait: float = KILL_WAIT) -> list[int]:
    """Kill every process in ``processes`` that is still running and wait (up to ``wait``
    seconds) until none of them runs any more; return the pids this call killed."""
    killed: list[int] = []
    for process in processes:
        if running(process):
            with contextlib.suppress(psutil.Error):
                process.kill()
                killed.append(process.pid)
    deadline = time.monotonic() + wait
    while any(running(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(SCAN_PAUSE)
    # Reap zombies that are our own children (reparented to us) so they do not linger.
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


def pid_running(pid: int) -> bool:
    """Whether process ``pid`` is :func:`running`."""
    try:
        return running(psutil.Process(pid))
    except psutil.Error:  # (no such process)
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
