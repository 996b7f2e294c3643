"""A turn its previous owner never finished: the rollout copy has its start and no end.

When a daemon is lost mid-turn, its Codex dies with it (or, stalled, goes on where nobody can
copy it), and the turn's end never reaches the copy a new owner rehydrates. Every turn that
started must end with exactly one turn-end status, so the new owner writes ``turn_aborted``
under the turn's deterministic id (:func:`~coven_codex.rollout.turn_entry_id`): should the end
reach the journal some other way, it is there once.
"""

from __future__ import annotations

from pathlib import Path

from coven_codex.entries import StatusEntry
from coven_codex.rollout import TURN_ABORTED, TURN_END_STATES, TURN_STARTED, RolloutTranslator, turn_entry_id
from coven_codex.tailing import LineSplitter


def unfinished_turn(rollout: Path, conversation: str, thread_id: str) -> str | None:
    """The id of the rollout's last turn when it started and did not end, else None."""
    try:
        data = rollout.read_bytes()
    except OSError:
        return None
    translator = RolloutTranslator(conversation, thread_id)
    running: str | None = None
    for line in LineSplitter(0).feed(data):
        for entry in translator.feed(line):
            if isinstance(entry, StatusEntry) and entry.turn_id is not None:
                if entry.state == TURN_STARTED:
                    running = entry.turn_id
                elif entry.state in TURN_END_STATES and entry.turn_id == running:
                    running = None
    return running


def abandoned_turn_end(thread_id: str, turn_id: str, reply_to: str | None) -> StatusEntry:
    """The ``turn_aborted`` a new owner writes for a turn lost with its daemon."""
    return StatusEntry(
        id=turn_entry_id(thread_id, turn_id, "end"),
        state=TURN_ABORTED,
        thread_id=thread_id,
        turn_id=turn_id,
        text="turn aborted: the daemon serving this conversation was lost during the turn",
        in_reply_to=reply_to,
    )
