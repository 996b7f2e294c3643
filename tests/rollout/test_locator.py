"""Locator: by thread id (waiting for the lazily created file), or by the session's cwd."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from rollout_helpers import fixture_path

from coven_codex.rollout.locator import (
    RolloutNotFoundError,
    find_rollout,
    locate_rollout,
    newest_rollout_for_cwd,
    read_session_meta,
    thread_id_from_path,
)

THREAD = "01a2025f-5ff7-72d3-9b37-5415d7d79180"
OTHER = "01a2025f-6267-74b2-a504-c7e22a398f74"


def write_rollout(home: Path, day: str, thread: str, cwd: str, *, mtime: float | None = None) -> Path:
    path = home / "sessions" / day / f"rollout-{day.replace('/', '-')}T10-00-00-{thread}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"timestamp": "t", "type": "session_meta", "payload": {"id": thread, "cwd": cwd, "cli_version": "0.169.0"}}
    path.write_text(json.dumps(meta) + "\n")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_thread_id_from_file_name() -> None:
    assert thread_id_from_path(Path(f"rollout-2026-11-22T08-24-51-{THREAD}.jsonl")) == THREAD
    assert thread_id_from_path(Path("rollout-x.jsonl")) is None


async def test_an_existing_file_is_found_at_once(tmp_path: Path) -> None:
    path = write_rollout(tmp_path, "2026/11/22", THREAD, "/w")
    write_rollout(tmp_path, "2026/11/22", OTHER, "/w")
    assert await locate_rollout(tmp_path, thread_id=THREAD, cwd=None, timeout=1) == path
    assert find_rollout(tmp_path, "no-such-thread") is None


async def test_waits_for_the_file_codex_creates_at_the_first_turn(tmp_path: Path) -> None:
    async def create_later() -> Path:
        await asyncio.sleep(0.3)
        return write_rollout(tmp_path, "2026/11/23", THREAD, "/w")  # sessions/ does not exist before

    writer = asyncio.create_task(create_later())
    found = await locate_rollout(tmp_path, thread_id=THREAD, cwd=None, timeout=10)
    assert found == await writer


async def test_times_out_with_a_message_saying_what_to_check(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(RolloutNotFoundError, match=f"thread {THREAD}.*within 0.5 s.*first turn"):
        await locate_rollout(tmp_path, thread_id=THREAD, cwd=None, timeout=0.5)
    assert time.monotonic() - started < 5
    with pytest.raises(RolloutNotFoundError, match="does not exist"):
        await locate_rollout(tmp_path / "missing", thread_id=THREAD, cwd=None, timeout=0.5)
    with pytest.raises(ValueError, match="thread_id or a cwd"):
        await locate_rollout(tmp_path, thread_id=None, cwd=None, timeout=0.5)


async def test_falls_back_to_the_newest_file_of_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    now = time.time()
    write_rollout(tmp_path, "2026/11/21", "01a2025f-0000-7000-8000-000000000001", str(workspace), mtime=now - 100)
    newest = write_rollout(
        tmp_path, "2026/11/22", "01a2025f-0000-7000-8000-000000000002", str(workspace), mtime=now - 10
    )
    write_rollout(tmp_path, "2026/11/22", "01a2025f-0000-7000-8000-000000000003", "/elsewhere", mtime=now)
    assert await locate_rollout(tmp_path, thread_id=None, cwd=workspace, timeout=1) == newest
    assert newest_rollout_for_cwd(tmp_path, workspace, since=now - 5) is None
    with pytest.raises(RolloutNotFoundError, match="cwd is"):
        await locate_rollout(tmp_path, thread_id=None, cwd=workspace, timeout=0.3, since=now + 100)


def test_session_meta_is_read_from_the_first_line(tmp_path: Path, fixture_version: str) -> None:
    meta = read_session_meta(fixture_path(fixture_version, "single_reply"))
    assert meta is not None and meta.cwd == "/workspace" and meta.cli_version == fixture_version
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b'{"timestamp":"t","type":"session_meta","payload":{"id":"x"')
    assert read_session_meta(torn) is None
    assert read_session_meta(tmp_path / "missing.jsonl") is None


def inotify_instances() -> int:
    """Inotify instances this process holds (its ``anon_inode:inotify`` descriptors)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            continue
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors through /proc (Linux)")
async def test_many_waiting_conversations_share_one_inotify_instance(tmp_path: Path) -> None:
    """300 conversations waiting for their first rollout at once hold one inotify instance in
    all (the kernel allows 128 per user by default, and each costs a descriptor), and each finds
    its file when Codex creates it, in a day folder that did not exist while they waited."""
    write_rollout(tmp_path, "2026/11/22", OTHER, "/w")
    threads = [f"01a2025f-0000-7000-8000-{index:012d}" for index in range(300)]
    before = inotify_instances()
    waiters = [
        asyncio.create_task(locate_rollout(tmp_path, thread_id=thread, cwd=None, timeout=120)) for thread in threads
    ]
    while not all(waiter.done() for waiter in waiters) and inotify_instances() == before:
        await asyncio.sleep(0.01)  # until the waiters watch (a failed waiter ends the loop too)
    for _ in range(20):  # let every waiter reach its watch
        await asyncio.sleep(0.01)
    assert not any(waiter.done() for waiter in waiters), [w.exception() for w in waiters if w.done()][:1]
    assert inotify_instances() - before == 1
    created = [write_rollout(tmp_path, "2026/11/23", thread, "/w") for thread in threads]
    assert await asyncio.gather(*waiters) == created
    assert inotify_instances() == before
