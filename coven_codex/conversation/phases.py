"""The phases of a conversation and the moves allowed between them (docs/architecture.md, "The
conversation's phases", holds the diagram drawn from :data:`TRANSITIONS`).

A conversation is in exactly one :class:`Phase`; only its own task moves it, through
:meth:`PhaseMachine.move`, which refuses a move the table does not hold with a
:class:`PhaseError` (a bug: the session fails, is reported and restarted, never goes on in a
phase nobody drew).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from coven_codex.support.lifecycle import Lifecycle, LifecycleError


class Phase(enum.Enum):
    """Where a conversation is in its life with Codex."""

    IDLE = "idle"
    """No Codex open for it (none yet, or let go); thoughts may wait to be taken."""
    WAITING_FOR_SLOT = "waiting_for_slot"
    """A thought waits for a turn slot (``max_sessions`` / ``max_jobs`` all in use)."""
    STARTING = "starting"
    """Its Codex driver is starting (a child task that reports back)."""
    READY = "ready"
    """Its Codex driver is open and no turn runs."""
    IN_TURN = "in_turn"
    """A turn runs in Codex."""
    INTERRUPTING = "interrupting"
    """The running turn was asked to stop (a cancel, a reset); Codex is closed if it does not."""
    BACKING_OFF = "backing_off"
    """Codex failed (a start, an exit, a hand-over): nothing is started before the backoff is over."""
    RESETTING = "resetting"
    """A ``reset`` ends the thread, or another conversation takes it over (its last rollout lines first)."""
    STOPPING = "stopping"
    """Shutdown: no new turn; the running one is interrupted and given until the deadline."""
    STOPPED = "stopped"
    """Codex closed for good (shutdown, another daemon serves the conversation)."""


_LIVE = (
    Phase.IDLE,
    Phase.WAITING_FOR_SLOT,
    Phase.STARTING,
    Phase.READY,
    Phase.IN_TURN,
    Phase.INTERRUPTING,
    Phase.BACKING_OFF,
    Phase.RESETTING,
)


def _edges(pairs: Iterable[tuple[Phase, Phase, str]]) -> dict[tuple[Phase, Phase], str]:
    return {(source, target): trigger for source, target, trigger in pairs}


TRIGGERS: dict[tuple[Phase, Phase], str] = _edges(
    [
        (Phase.IDLE, Phase.WAITING_FOR_SLOT, "thought waits, no free slot"),
        (Phase.IDLE, Phase.STARTING, "thought waits or resume, slot taken"),
        (Phase.IDLE, Phase.RESETTING, "reset or release is next"),
        (Phase.WAITING_FOR_SLOT, Phase.STARTING, "slot granted"),
        (Phase.WAITING_FOR_SLOT, Phase.IDLE, "its thoughts cancelled"),
        (Phase.STARTING, Phase.READY, "Codex opened"),
        (Phase.STARTING, Phase.BACKING_OFF, "Codex failed to start"),
        (Phase.READY, Phase.IN_TURN, "thought handed over / turn started"),
        (Phase.READY, Phase.IDLE, "idle release, eviction, exec turn over"),
        (Phase.READY, Phase.BACKING_OFF, "Codex died / hand-over failed"),
        (Phase.READY, Phase.RESETTING, "reset or release is next"),
        (Phase.IN_TURN, Phase.READY, "turn finished"),
        (Phase.IN_TURN, Phase.INTERRUPTING, "cancel / reset / release"),
        (Phase.IN_TURN, Phase.IDLE, "Codex closed mid-turn"),
        (Phase.IN_TURN, Phase.BACKING_OFF, "Codex died / hand-over failed"),
        (Phase.INTERRUPTING, Phase.READY, "turn finished"),
        (Phase.INTERRUPTING, Phase.IDLE, "turn did not stop, Codex closed"),
        (Phase.INTERRUPTING, Phase.BACKING_OFF, "Codex died"),
        (Phase.BACKING_OFF, Phase.IDLE, "backoff over"),
        (Phase.RESETTING, Phase.IDLE, "thread ended, moved or taken over"),
        *((phase, Phase.STOPPING, "stop") for phase in _LIVE),
        (Phase.STOPPING, Phase.STOPPED, "turn over or deadline, Codex closed"),
    ]
)
"""Every allowed move, with what triggers it (the labels of the diagram)."""

TRANSITIONS: frozenset[tuple[Phase, Phase]] = frozenset(TRIGGERS)
"""The allowed moves ``(from, to)``."""


class PhaseError(LifecycleError):
    """A move the transition table does not allow: a bug in the conversation's code."""


class PhaseMachine(Lifecycle[Phase]):
    """A conversation's current phase; every move is checked against :data:`TRANSITIONS`."""

    __slots__ = ()

    def __init__(self, name: str, phase: Phase = Phase.IDLE) -> None:
        super().__init__(
            f"conversation {name!r}", TRANSITIONS, phase, where="coven_codex/conversation/phases.py, TRANSITIONS"
        )

    def _refused(self, to: Phase) -> LifecycleError:
        return PhaseError(*super()._refused(to).args)

    def start_over(self, *, stopped: bool) -> None:
        """After the conversation's task crashed: ``IDLE`` again (``STOPPED`` if it was stopping), as a
        new conversation would be. Not a move of the table: the run that was in the old phase is gone."""
        self._phase = Phase.STOPPED if stopped else Phase.IDLE


def state_diagram() -> str:
    """The conversation's phases as a mermaid ``stateDiagram-v2``, drawn from :data:`TRIGGERS`."""
    lines = ["stateDiagram-v2", f"    [*] --> {Phase.IDLE.value}"]
    for source in Phase:
        for target in Phase:
            trigger = TRIGGERS.get((source, target))
            if trigger is not None:
                lines.append(f"    {source.value} --> {target.value}: {trigger}")
    lines.append(f"    {Phase.STOPPED.value} --> [*]")
    return "\n".join(lines) + "\n"
