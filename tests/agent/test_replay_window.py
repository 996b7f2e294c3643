"""The replay window's rules (``coven_codex/agent/replay.py``) on a real state store and a memory journal."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_session_units import FakeCodex

from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.state import OWN_IDS_KEPT, SessionState, StateStore
from coven_codex.daemon.daemon import Daemon
from coven_codex.entries import ResponseEntry
from coven_codex.journal import START, MemoryJournal
from coven_codex.settings import Settings


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


async def test_start_up_reads_the_journal_only_from_the_cursor_and_the_open_windows(tmp_path: Path) -> None:
    journal = MemoryJournal()
    old = await journal.append(ResponseEntry(id="idle-thread:0:0", conversation="idle", text="months ago"))
    window = await journal.end_position()
    await journal.append(ResponseEntry(id="busy-thread:9:0", conversation="busy", text="cut short"))
    cursor = await journal.end_position()
    await journal.append(ResponseEntry(id="later:1:0", conversation="other", text="after the cursor"))
    states = {
        "idle": SessionState(conversation="idle", thread_id="idle-thread", egress_offset=10),
        "busy": SessionState(
            conversation="busy", thread_id="busy-thread", replay_from=window, own_ids=["busy:turn-1:end"]
        ),
    }
    codex = FakeCodex(tmp_path / "rollouts")
    daemon = Daemon(
        Settings(workspace=tmp_path),
        journal,
        codex,
        locate_rollout=codex.locate,
        codex_home=tmp_path,
        conversations=tmp_path / "state",
    )
    end = await journal.end_position()
    known, _backlog = await daemon.recovery.read_backlog(states, cursor, end)
    assert known == {"busy-thread:9:0", "later:1:0", "busy:turn-1:end"}
    assert old.entry.id not in known  # the idle conversation pulled nothing back
    del states["busy"]
    assert (await daemon.recovery.read_backlog(states, cursor, end))[0] == {"later:1:0"}
