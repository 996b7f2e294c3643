"""The conversation's phases: every move the transition table allows is taken, any other refused."""

from __future__ import annotations

import itertools

import pytest

from coven_codex.conversation.phases import TRANSITIONS, TRIGGERS, Phase, PhaseError, PhaseMachine


@pytest.mark.parametrize(("source", "target"), sorted(TRANSITIONS, key=lambda move: (move[0].value, move[1].value)))
def test_every_allowed_move_is_taken(source: Phase, target: Phase) -> None:
    machine = PhaseMachine("c", source)
    machine.move(target)
    assert machine.phase is target


FORBIDDEN = sorted(
    ((a, b) for a, b in itertools.product(Phase, Phase) if a is not b and (a, b) not in TRANSITIONS),
    key=lambda move: (move[0].value, move[1].value),
)


@pytest.mark.parametrize(("source", "target"), FORBIDDEN)
def test_every_other_move_is_refused_and_the_phase_kept(source: Phase, target: Phase) -> None:
    machine = PhaseMachine("c", source)
    with pytest.raises(PhaseError, match=f"no move from {source.value} to {target.value}"):
        machine.move(target)
    assert machine.phase is source


def test_a_turn_cannot_start_without_codex_and_nothing_leaves_stopped() -> None:
    machine = PhaseMachine("c")
    with pytest.raises(PhaseError, match="'c': no move from idle to in_turn"):
        machine.move(Phase.IN_TURN)
    assert not [move for move in TRANSITIONS if move[0] is Phase.STOPPED]


def test_every_phase_is_reachable_from_idle_and_can_be_stopped() -> None:
    reached = {Phase.IDLE}
    frontier = [Phase.IDLE]
    while frontier:
        phase = frontier.pop()
        for source, target in TRANSITIONS:
            if source is phase and target not in reached:
                reached.add(target)
                frontier.append(target)
    assert reached == set(Phase)
    assert all(
        (phase, Phase.STOPPING) in TRANSITIONS for phase in Phase if phase not in (Phase.STOPPING, Phase.STOPPED)
    )


def test_every_move_says_what_triggers_it() -> None:
    assert set(TRIGGERS) == TRANSITIONS
    assert all(trigger and ":" not in trigger for trigger in TRIGGERS.values())


def test_staying_in_a_phase_is_no_move() -> None:
    machine = PhaseMachine("c", Phase.READY)
    machine.move(Phase.READY)
    assert machine.is_in(Phase.READY, Phase.IN_TURN)
