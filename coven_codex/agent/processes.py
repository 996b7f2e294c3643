"""Which Codex processes this daemon runs, recorded so a restarted daemon can end strays.

Codex processes lead their own process groups, so ``kill -9`` of the daemon does not take
them down. An app-server notices its stdin closing and exits by itself (verified on 0.169:
it records ``turn_aborted`` and exits within milliseconds); an exec process may go on with its
turn. Two Codex processes must never write one thread, so every process-group leader is
recorded in ``<state_dir>/processes.json`` (pid and psutil ``create_time``, which rules out a
reused pid) and :func:`end_stale_processes` ends what the previous run left before any session
starts, but only processes whose own environment proves them ours (coven's tree marker and this
``CODEX_HOME``; the file is only a hint, since whoever can write it could name any process). It
first gives each leader a moment to exit on its own, then TERM, then KILL to the group, then
kills any recorded descendant that escaped the group.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from collections.abc import Mapping
from pathlib import Path

import psutil

from coven_codex.agent.state import STORAGE_ERRNOS, StateStorageError, atomic_write
from coven_codex.codex.process import TREE_MARKER, processes_with_environ, running, signal_group

log = logging.getLogger(__name__)

FILE_NAME = "processes.json"
SETTLE = 1.0
LATECOMER_ROUNDS = 5
REFUSED_SHOWN = 5


Identity = dict[str, float | int]
"""A process as recorded: its ``pid`` and psutil ``create_time``."""


def _identity(pid: int) -> Identity | None:
    try:
        return {"pid": pid, "create_time": psutil.Process(pid).create_time()}
    except psutil.Error:
        return None


class ProcessRegistry:
    """The Codex process-group leaders of this run, kept in ``processes.json``.

    Conversations share their leaders (every thread on one app-server, or a few): the file names
    each leader once, and is rewritten only when a leader comes or goes, not when a conversation
    records or forgets one that others hold too. A conversation's record and forget cost the same
    however many conversations there are (1,000 on one app-server: docs/performance.md).
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        self._records: dict[str, list[Identity]] = {}
        self._holders: dict[tuple[int, float], int] = {}
        """Each recorded leader: how many conversations hold it."""

    def record(self, conversation: str, pids: list[int]) -> None:
        """Record ``conversation``'s process-group leaders (pid and start time); rewrites the file when a
        leader is new."""
        identities = [ident for pid in pids if (ident := _identity(pid)) is not None]
        before = self._records.get(conversation)
        if identities == before:
            return
        self._records[conversation] = identities
        changed = self._hold(identities, 1)
        if before is not None:
            changed = self._hold(before, -1) or changed
        if changed:
            self._flush()

    def forget(self, conversation: str) -> None:
        """Drop ``conversation``'s record (its processes have ended, or it let them go); rewrites the file
        when no conversation holds a leader any more."""
        identities = self._records.pop(conversation, None)
        if identities is not None and self._hold(identities, -1):
            self._flush()

    def _hold(self, identities: list[Identity], delta: int) -> bool:
        """Count ``delta`` more holders of each of ``identities``; whether a leader came or went."""
        changed = False
        for identity in identities:
            key = (int(identity["pid"]), float(identity["create_time"]))
            held = self._holders.get(key, 0)
            count = held + delta
            changed = changed or (held > 0) != (count > 0)
            if count > 0:
                self._holders[key] = count
            else:
                self._holders.pop(key, None)
        return changed

    def _flush(self) -> None:
        leaders = [{"pid": pid, "create_time": created} for pid, created in sorted(self._holders)]
        data = json.dumps({"leaders": leaders}).encode("utf-8")
        try:
            atomic_write(self.path, data, durable=False)
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            raise StateStorageError(
                f"cannot save the state directory's record of Codex processes ({self.path}):"
                f" {exc.strerror or exc}; free space on that filesystem (or fix its permissions)"
            ) from None


def is_ours(environ: Mapping[str, str], codex_home: Path) -> bool:
    """Whether an environment is that of a Codex tree a coven daemon started for ``codex_home``."""
    return environ.get(TREE_MARKER) is not None and environ.get("CODEX_HOME") == str(codex_home)


def load_recorded(state_dir: Path, codex_home: Path) -> list[psutil.Process]:
    """The recorded leaders of a previous run that are still alive and provably ours.

    ``processes.json`` lives where others may write (a state directory inside the workspace, in
    older set-ups), so a record alone proves nothing: a live process is trusted only if its own
    environment carries coven's tree marker for this ``codex_home`` (set by
    :func:`coven_codex.codex.process.spawn` and inherited by the whole tree); its create time must
    match the record too, which rules out a reused pid. Others are ignored, with one warning.
    """
    path = state_dir / FILE_NAME
    try:
        records = json.loads(path.read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("cannot read %s (%s); not looking for stray Codex processes", path, exc)
        return []
    alive: list[psutil.Process] = []
    refused: list[int] = []
    for entries in records.values() if isinstance(records, dict) else []:
        for item in entries if isinstance(entries, list) else []:
            with contextlib.suppress(psutil.Error, KeyError, TypeError, ValueError):
                proc = psutil.Process(int(item["pid"]))
                same = abs(proc.create_time() - float(item["create_time"])) < 0.01
                if not same or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if _environ_is_ours(proc, codex_home):
                    alive.append(proc)
                else:
                    refused.append(proc.pid)
    if refused:
        shown = ", ".join(str(pid) for pid in refused[:REFUSED_SHOWN]) + (
            ", ..." if len(refused) > REFUSED_SHOWN else ""
        )
        log.warning(
            "%s names %d live process(es) (pid %s) that are not Codex processes of this daemon (no "
            "coven tree marker for CODEX_HOME %s); leaving them alone. If you did not write that file, "
            "something else did: check who can write to %s",
            path,
            len(refused),
            shown,
            codex_home,
            state_dir,
        )
    return alive


def _environ_is_ours(proc: psutil.Process, codex_home: Path) -> bool:
    try:
        return is_ours(proc.environ(), codex_home)
    except (psutil.Error, OSError):
        return False


def stray_processes(codex_home: Path) -> dict[int, psutil.Process]:
    """Every process a coven daemon started (tree marker set) for ``codex_home``, in one process-table
    walk, e.g. shells an app-server started, which outlive it when it exits because our stdin closed.

    The daemon holds a lock on its ``CODEX_HOME``, so no other daemon's processes match.
    """
    return {process.pid: process for process in processes_with_environ(lambda env: is_ours(env, codex_home))}


def end_stale_processes(state_dir: Path, grace: float, codex_home: Path) -> list[int]:
    """End Codex process trees left by a previous run; return the leader pids that were found."""
    leaders = load_recorded(state_dir, codex_home)
    # Descendants orphaned when their parent died carry their tree's marker in the environment.
    tree = stray_processes(codex_home)
    if not leaders and not tree:
        with contextlib.suppress(FileNotFoundError):
            (state_dir / FILE_NAME).unlink()
        return []
    log.warning(
        "found Codex processes left by a previous run (%d leaders, %d marked); ending them", len(leaders), len(tree)
    )
    for leader in leaders:
        tree[leader.pid] = leader
        with contextlib.suppress(psutil.Error):
            for child in leader.children(recursive=True):
                tree[child.pid] = child
    _, alive = psutil.wait_procs(leaders, timeout=min(SETTLE, grace))
    for leader in alive:
        signal_group(leader.pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(alive, timeout=grace)
    for leader in alive:
        signal_group(leader.pid, signal.SIGKILL)
    # Group members (the native binary, MCP servers) may outlive their leader: psutil checks
    # each one's create_time, so only the very processes snapshotted above are killed.
    stragglers = []
    for proc in tree.values():
        with contextlib.suppress(psutil.Error):
            if running(proc):
                proc.kill()
                stragglers.append(proc)
    psutil.wait_procs(stragglers, timeout=grace)
    _end_latecomers(codex_home, grace)
    with contextlib.suppress(FileNotFoundError):
        (state_dir / FILE_NAME).unlink()
    return [leader.pid for leader in leaders]


def _end_latecomers(codex_home: Path, grace: float) -> None:
    """Kill, with their groups, processes the strays started while being ended; again until none.

    The snapshot above misses a child started during the settle wait (an unrecorded ``codex exec``
    wrapper starting its native binary). Such a child would go on to record its prompt after
    recovery read the rollout, and the thought would be sent twice. Killed processes cannot
    start more, so this ends.
    """
    for _ in range(LATECOMER_ROUNDS):
        alive = [proc for proc in stray_processes(codex_home).values() if running(proc)]
        if not alive:
            return
        log.warning("ending %d Codex process(es) started while strays were being ended", len(alive))
        for proc in alive:
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == proc.pid:
                    signal_group(proc.pid, signal.SIGKILL)
                proc.kill()
        psutil.wait_procs(alive, timeout=grace)
