"""Which Codex processes this daemon runs, recorded so a restarted daemon can end strays.

Codex processes lead their own process groups, so ``kill -9`` of the daemon does not take
them down. An app-server notices its stdin closing and exits by itself (verified on 0.169:
it records ``turn_aborted`` and exits within milliseconds); an exec process may go on with its
turn. Two Codex processes must never write one thread, so every process-group leader is
recorded in ``<state_dir>/processes.json`` (pid and psutil ``create_time``, which rules out a
reused pid) and :func:`end_stale_processes` ends what the previous run left before any session
starts: it first gives each leader a moment to exit on its own, then TERM, then KILL to the
group, then kills any recorded descendant that escaped the group.
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

from coven_codex.agent.state import StateStorageError, atomic_write
from coven_codex.codex.process import TREE_MARKER, processes_with_environ, running, signal_group

log = logging.getLogger(__name__)

FILE_NAME = "processes.json"
SETTLE = 1.0
LATECOMER_ROUNDS = 5


def _identity(pid: int, token: str | None) -> dict[str, float | int | str] | None:
    try:
        record: dict[str, float | int | str] = {"pid": pid, "create_time": psutil.Process(pid).create_time()}
    except psutil.Error:
        return None
    if token:
        record["token"] = token
    return record


class ProcessRegistry:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        self._records: dict[str, list[dict[str, float | int | str]]] = {}

    def record(self, conversation: str, pids: list[int]) -> None:
        identities = [ident for pid in pids if (ident := _identity(pid, None)) is not None]
        if identities == self._records.get(conversation):
            return
        self._records[conversation] = identities
        self._flush()

    def forget(self, conversation: str) -> None:
        if self._records.pop(conversation, None) is not None:
            self._flush()

    def _flush(self) -> None:
        data = json.dumps(self._records).encode("utf-8")
        try:
            atomic_write(self.path, data, durable=False)
        except OSError as exc:
            raise StateStorageError(
                f"cannot save the state directory's record of Codex processes ({self.path}):"
                f" {exc.strerror or exc}; free space on that filesystem (or fix its permissions)"
            ) from None


def load_recorded(state_dir: Path) -> tuple[list[psutil.Process], list[str]]:
    """The recorded leaders of a previous run still alive (pid reuse ruled out), and all tree tokens."""
    path = state_dir / FILE_NAME
    try:
        records = json.loads(path.read_bytes())
    except FileNotFoundError:
        return [], []
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("cannot read %s (%s); not looking for stray Codex processes", path, exc)
        return [], []
    alive: list[psutil.Process] = []
    tokens: list[str] = []
    for entries in records.values() if isinstance(records, dict) else []:
        for item in entries:
            if isinstance(item, dict) and isinstance(item.get("token"), str):
                tokens.append(item["token"])
            with contextlib.suppress(psutil.Error, KeyError, TypeError, ValueError):
                proc = psutil.Process(int(item["pid"]))
                same = abs(proc.create_time() - float(item["create_time"])) < 0.01
                if same and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
    return alive, tokens


def stray_processes(tokens: list[str], codex_home: Path | None) -> dict[int, psutil.Process]:
    """Processes of a previous run, found in one process-table walk: those carrying one of its tree
    ``tokens``, and every process a coven daemon started (tree marker set) for ``codex_home``.

    The latter finds e.g. shells an app-server started, which outlive it when it exits because our
    stdin closed. The daemon holds a lock on its ``CODEX_HOME``, so no other daemon's processes match.
    """
    wanted = set(tokens)
    home = str(codex_home) if codex_home is not None else None

    def ours(environ: Mapping[str, str]) -> bool:
        marker = environ.get(TREE_MARKER)
        return marker is not None and (marker in wanted or (home is not None and environ.get("CODEX_HOME") == home))

    return {process.pid: process for process in processes_with_environ(ours)}


def end_stale_processes(state_dir: Path, grace: float, codex_home: Path | None = None) -> list[int]:
    """End Codex process trees left by a previous run; return the leader pids that were found."""
    leaders, tokens = load_recorded(state_dir)
    # Descendants orphaned when their parent died carry their tree's marker in the environment.
    tree = stray_processes(tokens, codex_home)
    if not leaders and not tree:
        with contextlib.suppress(FileNotFoundError):
            (state_dir / FILE_NAME).unlink()
        return []
    log.warning("found Codex processes left by a previous run (%d leaders, %d marked); ending them",
                len(leaders), len(tree))
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
    _end_latecomers(tokens, codex_home, grace)
    with contextlib.suppress(FileNotFoundError):
        (state_dir / FILE_NAME).unlink()
    return [leader.pid for leader in leaders]


def _end_latecomers(tokens: list[str], codex_home: Path | None, grace: float) -> None:
    """Kill, with their groups, processes the strays started while being ended; again until none.

    The snapshot above misses a child started during the settle wait (an unrecorded ``codex exec``
    wrapper starting its native binary). Such a child would go on to record its prompt after
    recovery read the rollout, and the thought would be sent twice. Killed processes cannot
    start more, so this ends.
    """
    for _ in range(LATECOMER_ROUNDS):
        alive = [proc for proc in stray_processes(tokens, codex_home).values() if running(proc)]
        if not alive:
            return
        log.warning("ending %d Codex process(es) started while strays were being ended", len(alive))
        for proc in alive:
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == proc.pid:
                    signal_group(proc.pid, signal.SIGKILL)
                proc.kill()
        psutil.wait_procs(alive, timeout=grace)
