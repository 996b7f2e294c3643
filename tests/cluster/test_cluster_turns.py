"""A turn lost with its daemon: the new owner finds it in the rollout copy (a real 0.169.0 rollout)."""

from __future__ import annotations

from pathlib import Path

from coven_codex.cluster.turns import abandoned_turn_end, unfinished_turn
from coven_codex.rollout import TURN_ABORTED, turn_entry_id

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "rollouts" / "0.169.0" / "multi_turn.jsonl"


def test_a_copy_cut_during_the_second_turn_has_that_turn_unfinished(tmp_path: Path) -> None:
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(b"".join(lines))
    assert unfinished_turn(whole, "red", "thread") is None  # both turns ended
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:20]))  # the second turn started (line 16), its end (26) never copied
    turn = unfinished_turn(cut, "red", "thread")
    assert turn is not None and turn.startswith("01a2025f-f9")
    assert unfinished_turn(tmp_path / "missing.jsonl", "red", "thread") is None
    end = abandoned_turn_end("thread", turn, "thought-7")
    assert end.state == TURN_ABORTED and end.in_reply_to == "thought-7"
    assert end.id == turn_entry_id("thread", turn, "end")  # the id egress would give its real end
