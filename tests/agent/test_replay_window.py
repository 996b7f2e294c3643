"""The replay window's rules (``coven_codex/agent/replay.py``) on a real state store and a memory journal."""

from __future__ import annotations

from pathlib import Path

import pytest

from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.state import OWN_IDS_KEPT, SessionState, StateStore
from coven_codex.entries import ResponseEntry
from coven_codex.journal import START, MemoryJournal


def rig(tmp_path: Path, state: SessionState) -> tuple[ReplayWindow, StateStore, MemoryJournal]:
    store = StateStore(tmp_path / "state", durability="always")
    store.prepare()
    journal = MemoryJournal()
    return ReplayWindow(state, StateSaver(state, store), journal), store, journal


async def test_the_window_is_opened_durably_before_the_first_write(tmp_path: Path) -> None:
    state = SessionState(conversation="c", thread_id="t")
    window, store, journal = rig(tmp_path, state)
    await journal.append(ResponseEntry(id="before", conversation="other", text="x"))
    end = await journal.end_position()
    async with window.writing():
        # On disk before anything is appended: a kill -9 from here on replays from ``end``.
        assert store.load("c").replay_from == end
        record = await journal.append(ResponseEntry(id="t:0:0", conversation="c", text="y"))
        assert record.start >= end
    assert state.replay_from == end  # the session is not idle: it stays open


async def test_an_idle_window_closes_only_between_writes(tmp_path: Path) -> None:
    state = SessionState(conversation="c", thread_id="t")
    window, _store, _journal = rig(tmp_path, state)
    window.idle()
    async with window.writing():
        window.idle()
        assert state.replay_from is not None  # an entry of an unfinished line may be in the journal
    assert state.replay_from is None
    async with window.writing():  # egress brings the turn's last line while the session is idle
        assert state.replay_from is not None
    assert state.replay_from is None
    window.busy()
    async with window.writing():
        pass
    assert state.replay_from is not None


async def test_a_write_cut_short_keeps_the_window_open(tmp_path: Path) -> None:
    state = SessionState(conversation="c", thread_id="t")
    window, _store, _journal = rig(tmp_path, state)
    with pytest.raises(RuntimeError):
        async with window.writing():
            raise RuntimeError("cancelled between two entries of a line")
    window.idle()
    assert state.replay_from is not None


async def test_a_window_a_killed_run_left_open_closes_once_egress_passed_the_rollout(tmp_path: Path) -> None:
    state = SessionState(conversation="c", thread_id="t", replay_from=START, egress_offset=10)
    window, _store, _journal = rig(tmp_path, state)
    window.idle()
    assert state.replay_from == START  # egress has not even started
    window.egress_started(100)
    assert state.replay_from == START  # lines 10-100 may have been written by the killed run
    state.egress_offset = 100
    window.progress()
    assert state.replay_from is None


async def test_a_window_a_killed_run_left_open_closes_when_its_thread_ends(tmp_path: Path) -> None:
    state = SessionState(conversation="c", thread_id="t", replay_from=START)
    window, _store, _journal = rig(tmp_path, state)
    window.idle()
    assert state.replay_from == START
    window.thread_ended()
    assert state.replay_from is None


def test_a_version_1_state_replays_from_where_version_1_read() -> None:
    old = {"version": 1, "conversation": "c", "thread_id": "t", "egress_journal_position": 42}
    assert SessionState.model_validate(old).replay_from == SessionState(conversation="c", replay_from=42).replay_from
    unknown = {"version": 1, "conversation": "c", "thread_id": "t", "egress_journal_position": None}
    assert SessionState.model_validate(unknown).replay_from == START
    threadless = {"version": 1, "conversation": "c"}
    assert SessionState.model_validate(threadless).replay_from is None


def test_own_ids_keep_the_newest() -> None:
    state = SessionState(conversation="c")
    for index in range(OWN_IDS_KEPT + 5):
        state.wrote(f"id-{index}")
    assert state.own_ids == [f"id-{index}" for index in range(5, OWN_IDS_KEPT + 5)]
