"""Drivers that put thoughts into Codex; :func:`create_driver` makes the one a
:class:`~coven_codex.codex.capabilities.DriverPlan` names (chosen by capability:
:func:`coven_codex.codex.capabilities.plan_driver`).

The interface is documented in :mod:`coven_codex.codex.drivers.base`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from coven_codex.codex.appserver.pool import AppServerPool
from coven_codex.codex.capabilities import DriverPlan
from coven_codex.codex.driver_settings import DriverSettings
from coven_codex.codex.drivers.app_server import AppServerDriver, unrelayed_approvals
from coven_codex.codex.drivers.base import DRIVER_TRANSITIONS, CodexDriver, DriverPhase
from coven_codex.codex.drivers.events import (
    AgentMessageCompleted,
    ApprovalRequested,
    ApprovalResolved,
    Delta,
    DriverEvent,
    DriverFailed,
    EventSink,
    Submission,
    ThreadStarted,
    TurnExpired,
    TurnFinished,
    TurnStarted,
    queue_sink,
)
from coven_codex.codex.drivers.exec import ExecDriver
from coven_codex.codex.errors import DriverError, killed_from_outside
from coven_codex.codex.thought import ImageInput, Thought, ThreadOptions
from coven_codex.codex.version import CodexVersion

DriverChoice = Literal["auto", "app-server", "exec"]


def create_driver(
    executable: Path,
    version: CodexVersion,
    workspace: Path,
    *,
    env: Mapping[str, str],
    settings: DriverSettings,
    sink: EventSink,
    plan: DriverPlan,
    command: Sequence[str] = (),
    pool: AppServerPool | None = None,
) -> CodexDriver:
    """The driver ``plan`` names for ``executable`` (not started yet: call ``await
    driver.start(thread_id)``); ``command`` (default: ``executable`` alone) is what starts it,
    before Codex's arguments. ``pool``: the shared app-servers an app-server driver puts its
    thread on (without one it has a process of its own)."""
    if plan.driver == "app-server":
        return AppServerDriver(
            executable, version, workspace, env=env, settings=settings, sink=sink, command=command, pool=pool, plan=plan
        )
    return ExecDriver(executable, version, workspace, env=env, settings=settings, sink=sink, command=command)


__all__ = [
    "DRIVER_TRANSITIONS",
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
    "DriverPhase",
    "DriverSettings",
    "EventSink",
    "ExecDriver",
    "ImageInput",
    "Submission",
    "Thought",
    "ThreadOptions",
    "ThreadStarted",
    "TurnExpired",
    "TurnFinished",
    "TurnStarted",
    "create_driver",
    "killed_from_outside",
    "queue_sink",
    "unrelayed_approvals",
]
