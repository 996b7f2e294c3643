"""Drivers that put thoughts into Codex; :func:`create_driver` picks one by version and setting.

The interface is documented in :mod:`coven_codex.codex.drivers.base`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from coven_codex.codex.appserver.pool import AppServerPool
from coven_codex.codex.drivers.app_server import AppServerDriver
from coven_codex.codex.drivers.base import (
    AgentMessageCompleted,
    ApprovalRequested,
    ApprovalResolved,
    CodexDriver,
    Delta,
    DriverError,
    DriverEvent,
    DriverFailed,
    DriverSettings,
    EventSink,
    ImageInput,
    Submission,
    ThreadStarted,
    TurnExpired,
    TurnFinished,
    TurnStarted,
    queue_sink,
)
from coven_codex.codex.drivers.exec import ExecDriver
from coven_codex.codex.version import CodexVersion

DriverChoice = Literal["auto", "app-server", "exec"]


def choose_driver(version: CodexVersion, choice: DriverChoice = "auto") -> Literal["app-server", "exec"]:
    """``auto`` picks the app-server where it was verified (0.169+), else exec.

    Forcing ``app-server`` on a version older than the oldest verified one is allowed (it may
    work on versions in between) but not on versions known to speak the old protocol (0.47).
    """
    if choice == "exec":
        return "exec"
    if choice == "app-server":
        if version.triple <= (0, 47, 0):
            raise DriverError(
                f'Codex {version} speaks an older app-server protocol; use driver = "exec" (or "auto") or upgrade Codex'
            )
        return "app-server"
    return "app-server" if version.supports_app_server else "exec"


def create_driver(
    executable: Path,
    version: CodexVersion,
    workspace: Path,
    *,
    env: Mapping[str, str],
    settings: DriverSettings,
    sink: EventSink,
    choice: DriverChoice = "auto",
    command: Sequence[str] = (),
    pool: AppServerPool | None = None,
) -> CodexDriver:
    """A driver for ``executable`` (not started yet: call ``await driver.start(thread_id)``);
    ``command`` (default: ``executable`` alone) is what starts it, before Codex's arguments.
    ``pool``: the shared app-servers an app-server driver puts its thread on (without one it has
    a process of its own)."""
    if choose_driver(version, choice) == "app-server":
        return AppServerDriver(
            executable, version, workspace, env=env, settings=settings, sink=sink, command=command, pool=pool
        )
    return ExecDriver(executable, version, workspace, env=env, settings=settings, sink=sink, command=command)


__all__ = [
    "AgentMessageCompleted",
    "AppServerDriver",
    "ApprovalRequested",
    "ApprovalResolved",
    "CodexDriver",
    "Delta",
    "DriverChoice",
    "DriverError",
    "DriverEvent",
    "DriverFailed",
    "DriverSettings",
    "EventSink",
    "ExecDriver",
    "ImageInput",
    "Submission",
    "ThreadStarted",
    "TurnExpired",
    "TurnFinished",
    "TurnStarted",
    "choose_driver",
    "create_driver",
    "queue_sink",
]
