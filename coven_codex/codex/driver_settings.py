"""What a Codex driver and the app-server layer are told of the daemon's settings (one frozen record).

The daemon builds it from its :class:`~coven_codex.settings.Settings` (``driver_settings`` in
:mod:`coven_codex.daemon.bootstrap`); the Codex layer never reads the daemon's settings itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MidTurn = Literal["queue", "steer"]
ApprovalPolicy = Literal["ask", "approve", "deny"]


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
