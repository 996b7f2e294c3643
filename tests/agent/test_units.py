"""Unit tests of the agent's pure parts: state files, the ingress cursor, the slot pool, recovery."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from coven_codex.agent.cursor import LowWaterCursor
from coven_codex.agent.recovery import codex_received, find_unclaimed_rollout, recorded_client_id, user_messages
from coven_codex.agent.slots import SlotPool
from coven_codex.agent.state import (
    MAX_OPEN_LOGS,
    SessionState,
    StateStore,
    ThoughtRecord,
    state_file_name,
    text_digest,
)
from coven_codex.journal import Position
from coven_codex.support.statelock import StateError, StateLock

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rollouts"
RECOVERY_FIXTURES = FIXTURES.parent / "recovery"


def test_state_round_trip_and_atomic_replace(tmp_path: Path) -> None:
    store = StateStore(tmp_path, durability="always")
    store.prepare()
    state = SessionState(conversation="chan/#1", thread_id="t", egress_offset=42)
    state.delivered["a"] = Position(0, 10)
    state.in_flight = ThoughtRecord(thought_id="b", ordinal=1, digest=text_digest("hi"), position=20)
    store.save(state)
    again = StateStore(tmp_path).load_all()
    assert again["chan/#1"] == state
    assert [p.name for p in store.sessions_dir.iterdir()] == [state_file_name("chan/#1")]
    assert oct(store.path_for("chan/#1").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("durability", ["always", "batched", "never"])
async def test_many_conversations_keep_a_bounded_number_of_state_logs_open(tmp_path: Path, durability: str) -> None:
    """An idle conversation holds no file descriptor: 300 conversations' saves leave at most
    MAX_OPEN_LOGS logs open, and every state reads back as saved."""
    store = StateStore(tmp_path, durability=durability)  # type: ignore[arg-type]
    store.prepare()

    def open_logs() -> int:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # (the listing's own descriptor is gone by now)
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(store.sessions_dir))
        return count

    try:
        for round_ in range(2):
            for n in range(300):
                store.write(
                    f"c{n}", SessionState(conversation=f"c{n}", egress_offset=round_).model_dump_json().encode()
                )
                await store.wait_durable()
        assert open_logs() <= MAX_OPEN_LOGS + 1
    finally:
        store.close()
    again = StateStore(tmp_path).load_all()
    assert len(again) == 300 and all(state.egress_offset == 1 for state in again.values())


def test_state_file_names_are_distinct_and_safe() -> None:
    names = {state_file_name(c) for c in ["a", "A", "a/b", "a_b", "../x", "ünï", ""]}
    assert len(names) == 7
    assert all("/" not in n and not n.startswith(".") for n in names)


def test_state_log_takes_the_last_complete_line_and_compacts(tmp_path: Path) -> None:
    store = StateStore(tmp_path, durability="never", compact_bytes=4096)
    store.prepare()
    for offset in range(100):
        store.save(SessionState(conversation="c", egress_offset=offset))
    store.close()
    path = store.path_for("c")
    assert path.stat().st_size < 4096
    with path.open("ab") as handle:
        handle.write(b'{"version": 1, "conversation": "c", "egress_off')  # torn by a crash
    assert StateStore(tmp_path).load("c").egress_offset == 99


def test_corrupt_state_is_set_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = StateStore(tmp_path)
    store.prepare()
    store.path_for("x").write_text("{not json")
    assert store.load_all() == {}
    assert store.load("x") == SessionState(conversation="x")
    assert store.path_for("x").with_suffix(".corrupt").exists()
    assert "unreadable" in caplog.text


def test_forget_delivered_before() -> None:
    state = SessionState(conversation="c", delivered={"a": 1, "b": 5, "c": 9})
    state.forget_delivered_before(Position(0, 5))  # integers: positions saved by an older coven-codex
    assert state.delivered == {"b": Position(0, 5), "c": Position(0, 9)}


def test_low_water_cursor_never_passes_a_pending_item() -> None:
    at = [Position(0, n) for n in (0, 10, 20, 30)]
    cursor = LowWaterCursor(at[0])
    cursor.read(at[0], at[1], pending=True)
    cursor.read(at[1], at[2], pending=False)
    cursor.read(at[2], at[3], pending=True)
    assert cursor.position == at[0]
    cursor.finish(at[2])
    assert cursor.position == at[0]
    cursor.finish(at[0])
    assert cursor.position == at[3]
    assert cursor.pending == 0


async def test_slot_pool_bounds_and_evicts_idle_holders() -> None:
    pool = SlotPool(1)
    assert pool.try_acquire("a")
    evicted: list[str] = []
    pool.mark_idle("a", lambda: (evicted.append("a"), pool.release("a")))
    waiter = asyncio.create_task(pool.acquire("b"))
    await asyncio.sleep(0)
    assert evicted == ["a"]
    await asyncio.wait_for(waiter, 1)
    assert pool.holds("b") and not pool.holds("a")
    # A busy holder is not evicted: the waiter waits until it releases.
    pool.mark_busy("b")
    waiter = asyncio.create_task(pool.acquire("c"))
    await asyncio.sleep(0.01)
    assert not waiter.done() and pool.waiting == 1
    pool.release("b")
    await asyncio.wait_for(waiter, 1)
    assert pool.holds("c")


async def test_slot_pool_cancelled_waiter_passes_the_slot_on() -> None:
    pool = SlotPool(1)
    assert pool.try_acquire("a")
    first = asyncio.create_task(pool.acquire("b"))
    second = asyncio.create_task(pool.acquire("c"))
    await asyncio.sleep(0)
    pool.release("a")
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.wait_for(second, 1)
    assert pool.holds("c") and pool.in_use == 1


def test_user_messages_of_both_versions() -> None:
    old = user_messages(FIXTURES / "0.47.0" / "multi_turn.jsonl")
    assert old.texts == ["first question", "second question"]
    new = user_messages(FIXTURES / "0.169.0" / "multi_turn.jsonl")
    assert len(new.texts) == 2


def test_codex_received_by_count_and_by_client_id(tmp_path: Path) -> None:
    rollout = FIXTURES / "0.47.0" / "multi_turn.jsonl"
    assert codex_received(
        rollout,
        ThoughtRecord(thought_id="x", ordinal=1, digest=text_digest("second question"), position=0),
        by_client_id=False,
    )
    assert not codex_received(
        rollout, ThoughtRecord(thought_id="x", ordinal=2, digest=text_digest("third"), position=0), by_client_id=False
    )
    line = {
        "timestamp": "t",
        "type": "event_msg",
        "payload": {
            "type": "item_completed",
            "item": {"type": "UserMessage", "client_id": "th-1", "content": [{"type": "text", "text": "hi"}]},
        },
    }
    path = tmp_path / "rollout.jsonl"
    path.write_text(json.dumps(line) + "\n")
    assert codex_received(
        path, ThoughtRecord(thought_id="th-1", ordinal=0, digest=text_digest("hi"), position=0), by_client_id=True
    )
    assert not codex_received(
        path, ThoughtRecord(thought_id="th-2", ordinal=0, digest=text_digest("hi"), position=0), by_client_id=True
    )


def test_a_thought_only_in_the_model_history_was_received() -> None:
    # Real Codex 0.47 output: `codex exec resume` wrote the thought into the model history
    # (response_item) and was killed before its user_message event. Resuming the thread sends
    # that history to the model, so sending the thought again would put it there twice.
    torn = RECOVERY_FIXTURES / "exec_0.47_killed_between_history_and_event.jsonl"
    messages = user_messages(torn)
    assert messages.texts == ["red thought 5"]
    assert messages.history == ["red thought 5", "red thought 18"]  # environment context left out
    assert messages.count == 2
    assert codex_received(
        torn,
        ThoughtRecord(thought_id="x", ordinal=1, digest=text_digest("red thought 18"), position=0),
        by_client_id=False,
    )
    assert not codex_received(
        torn,
        ThoughtRecord(thought_id="y", ordinal=2, digest=text_digest("red thought 19"), position=0),
        by_client_id=False,
    )


def test_a_torn_app_server_record_counts_when_the_history_ends_with_the_thought(tmp_path: Path) -> None:
    lines = (FIXTURES / "0.169.0" / "app_server_two_turns.jsonl").read_text().splitlines(keepends=True)
    torn = tmp_path / "rollout.jsonl"
    torn.write_text("".join(lines[:17]))  # the second thought is in the history, its item_completed is not
    second = ThoughtRecord(thought_id="thought-2", ordinal=1, digest=text_digest("second via app-server"), position=0)
    assert codex_received(torn, second, by_client_id=True)
    other = ThoughtRecord(thought_id="thought-3", ordinal=1, digest=text_digest("something else"), position=0)
    assert not codex_received(torn, other, by_client_id=True)
    whole = FIXTURES / "0.169.0" / "app_server_two_turns.jsonl"
    assert codex_received(whole, second, by_client_id=True)
    # Not torn: the same text sent again later is not taken for the recorded one.
    again = ThoughtRecord(thought_id="thought-3", ordinal=2, digest=text_digest("second via app-server"), position=0)
    assert not codex_received(whole, again, by_client_id=True)


def test_injected_user_messages_are_not_the_users() -> None:
    new = user_messages(FIXTURES / "0.169.0" / "multi_turn.jsonl")
    assert new.history == new.texts == ["first question", "second question"]
    aborted = user_messages(FIXTURES / "0.169.0" / "exec_sigint.jsonl")
    assert aborted.history == ["start something long"]  # not Codex's "<turn_aborted>" note


def test_find_unclaimed_rollout(tmp_path: Path) -> None:
    day = tmp_path / "sessions" / "2026" / "01" / "02"
    day.mkdir(parents=True)
    thread = "01a20260-11ee-7302-a67e-71167b52e354"
    target = day / f"rollout-2026-01-02T00-00-00-{thread}.jsonl"
    target.write_bytes((FIXTURES / "0.47.0" / "multi_turn.jsonl").read_bytes())
    assert find_unclaimed_rollout(tmp_path, text_digest("first question"), set()) == (thread, target)
    assert find_unclaimed_rollout(tmp_path, text_digest("first question"), {thread}) is None
    assert find_unclaimed_rollout(tmp_path, text_digest("second question"), set()) is None


def test_state_lock_excludes_a_second_daemon(tmp_path: Path) -> None:
    with StateLock(tmp_path), pytest.raises(StateError, match=f"pid {os.getpid()}"):
        StateLock(tmp_path).acquire()
    with StateLock(tmp_path):
        pass


@pytest.mark.parametrize("durability", ["always", "batched"])
async def test_an_awaited_state_save_is_on_disk_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """docs/operations.md promises power-cut safety with "batched": the write-ahead record a hand-over
    waits for must be fsynced before the hand-over starts, with either setting (not only "always")."""
    from coven_codex.agent.saver import StateSaver
    from coven_codex.daemon.daemon import Daemon
    from coven_codex.journal import MemoryJournal
    from coven_codex.settings import Settings

    synced: list[tuple[int, int]] = []  # (inode, size) of each fsync
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        real_fsync(fd)
        info = os.fstat(fd)
        synced.append((info.st_ino, info.st_size))

    monkeypatch.setattr(os, "fsync", recording_fsync)
    settings = Settings(
        workspace=tmp_path, journal=tmp_path / "j.jsonl", state_dir=tmp_path / "state", durability=durability
    )  # type: ignore[arg-type]
    daemon = Daemon(
        settings,
        MemoryJournal(),
        None,  # type: ignore[arg-type]
        locate_rollout=None,  # type: ignore[arg-type]
        codex_home=tmp_path,
        conversations=tmp_path / "state",
    )
    store = daemon.store
    store.prepare()
    state = SessionState(conversation="c")
    saver = StateSaver(state, store)
    for offset in range(3):
        state.in_flight = ThoughtRecord(thought_id=f"t{offset}", ordinal=0, digest=text_digest("hi"), position=offset)
        await saver.save_now()
        log = store.path_for("c")
        inode, size = log.stat().st_ino, log.stat().st_size
        assert any(ino == inode and synced_size >= size for ino, synced_size in synced), synced
    store.close()


def test_client_ids_on_the_user_message_event_of_0_140_and_0_147(tmp_path: Path) -> None:
    """Codex 0.147's app-server records ``clientUserMessageId`` on ``event_msg/user_message``
    (the line as the real CLI wrote it), not on an ``item_completed``."""
    history = {
        "timestamp": "2026-11-23T18:51:02.100Z",
        "type": "response_item",
        "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello one"}]},
    }
    line = (
        '{"timestamp":"2026-11-23T18:51:02.101Z","type":"event_msg","payload":{"type":"user_message",'
        '"client_id":"46d2c722f2d44fa388b25332db8d976b","message":"hello one","images":[],"local_images":[],'
        '"audio":[],"local_audio":[],"text_elements":[]}}'
    )
    assert recorded_client_id(line.encode()) == "46d2c722f2d44fa388b25332db8d976b"
    path = tmp_path / "rollout.jsonl"
    path.write_text(json.dumps(history) + "\n" + line + "\n")
    assert user_messages(path).client_ids == ["46d2c722f2d44fa388b25332db8d976b"]
    received = ThoughtRecord(
        thought_id="46d2c722f2d44fa388b25332db8d976b", ordinal=0, digest=text_digest("hello one"), position=0
    )
    assert codex_received(path, received, by_client_id=True)
    # Another thought with the same text, handed over after it, was not received.
    later = ThoughtRecord(thought_id="other", ordinal=1, digest=text_digest("hello one"), position=0)
    assert not codex_received(path, later, by_client_id=True)


async def test_new_conversations_batched_saves_fsync_their_folder_once_in_the_group_commit_not_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: the first save of each new conversation fsynced the state folder in ``write`` itself,
    on the event loop (about 10 ms each on a loaded disk: 1,000 conversations in a minute blocked the
    loop for seconds). With "batched" the group commit that makes those saves durable fsyncs the
    folder, once for all of them, in its thread."""
    loop_thread = threading.get_ident()
    synced: list[tuple[int, bool]] = []  # (inode, on the loop's thread) of each fsync
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append((os.fstat(fd).st_ino, threading.get_ident() == loop_thread))

    monkeypatch.setattr(os, "fsync", recording_fsync)
    store = StateStore(tmp_path, durability="batched")
    store.prepare()
    folder = store.sessions_dir.stat().st_ino
    try:
        for index in range(20):
            store.write(f"c{index}", SessionState(conversation=f"c{index}").model_dump_json().encode())
        assert synced == []
        await store.wait_durable()
        assert not [inode for inode, on_loop in synced if on_loop]
        assert [inode for inode, _ in synced].count(folder) == 1
        assert len(synced) == 21  # the folder and each log
    finally:
        store.close()


STATE_V2 = Path(__file__).resolve().parent.parent / "fixtures" / "state_v2"
"""A conversation state saved by the code before a handed-over thought had one record (``ded002f``):
its in-flight thought kept its text and ``user_messages_before``, its reply targets an id and a digest."""


def test_a_state_saved_before_the_thought_records_were_one_loads_and_resolves(tmp_path: Path) -> None:
    shutil.copytree(STATE_V2, tmp_path / "sessions")
    store = StateStore(tmp_path, durability="always")
    state = store.load_all()["red"]
    texts = ["first question", "second question", "third question"]
    assert state.in_flight is not None and (state.in_flight.thought_id, state.in_flight.ordinal) == ("thought-3", 2)
    assert state.in_flight.digest == text_digest(texts[2]) and str(state.in_flight.position) == "340"
    assert {ordinal: (r.thought_id, r.ordinal, r.digest) for ordinal, r in state.reply_targets.items()} == {
        n: (f"thought-{n + 1}", n, text_digest(text)) for n, text in enumerate(texts)
    }
    assert [state.thought_of(n, None, text) for n, text in enumerate(texts)] == ["thought-1", "thought-2", "thought-3"]
    # The record resolves the in-flight thought as the text did: two user messages, it was the third.
    rollout = FIXTURES / "0.47.0" / "multi_turn.jsonl"
    assert not codex_received(rollout, state.in_flight, by_client_id=False)
    assert codex_received(rollout, state.reply_targets[1], by_client_id=False)
    store.save(state)
    again = StateStore(tmp_path).load_all()["red"]
    assert again == state and again.version == 3
