"""What a Codex driver and the app-server layer are told of the daemon's settings (one frozen record).

The daemon builds it from its :class:`~coven_codex.settings.Settings` (``driver_settings`` in
:mod:`coven_codex.daemon.bootstrap`); the Codex layer never reads the daemon's settings itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MidTurn = Literal["queue", "steer"]
ApprovalPolicy = Literal["ask", "approve", "deny"]
ModeName = Literal["read-only", "ask", "auto"]


@dataclass(frozen=True, slots=True)
class Mode:
    """A chat's mode (``/mode``): Codex's approval policy and sandbox for the thread."""

    approval_policy: Literal["on-request", "never"]
    sandbox: Literal["read-only", "workspace-write"]


MODES: dict[str, Mode] = {
    "read-only": Mode("on-request", "read-only"),
    "ask": Mode("on-request", "workspace-write"),
    "auto": Mode("never", "workspace-write"),
}
"""The modes a chat may choose (within the operator's ``modes``): Codex's ``approvalPolicy`` and ``sandbox``."""
SANDBOX_WIDTH = {"read-only": 0, "workspace-write": 1, "danger-full-access": 2}
"""Codex's sandbox modes, narrowest first: a mode may not be wider than the daemon's own ``sandbox_mode``."""


@dataclass(frozen=True, slots=True)
class DriverSettings:
    """The settings a driver needs (the daemon's part of :class:`coven_codex.settings.Settings`)."""

    turn_timeout: float = 600.0
    stream_idle_timeout: float = 540.0
    kill_grace: float = 5.0
    mid_turn: MidTurn = "queue"
    approval_policy: ApprovalPolicy = "ask"
    approval_timeout: float = 300.0
    stream_deltas: bool = True
    model: str | None = None
    """The model of the thread (``None``: Codex's configured one)."""
    fork_from: str | None = None
    """Open a new thread as a fork of this one (its history included) instead of an empty one (app-server only)."""
    mode: str | None = None
    """The conversation's mode (a name of :data:`MODES`; ``None``: Codex's configured approval policy and sandbox)."""
