"""How the tailer is woken: fallback to polling (reported), shared inotify, idleness, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from tailing_helpers import Collector

from coven_codex.tailing import TailNoticeKind, inotify, tail_lines, tailer
from coven_codex.tailing.filesystems import remote_filesystem

Make = Callable[..., Collector]


async def test_forced_polling_is_reported_and_works(tmp_path: Path) -> None:
    path = tmp_path / "log"
    tail = await Collector(path, force_polling=True, poll_interval=0.01).started()
    try:
        path.write_bytes(b"polled\n")
        assert await tail.wait_lines(1) == [b"polled"]
        assert [n.kind for n in tail.notices] == [TailNoticeKind.POLLING]
        assert "requested" in tail.notices[0].message
    finally:
        await tail.stop()


async def test_network_filesystem_falls_back_to_polling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tailer, "remote_filesystem", lambda directory: "nfs")
    path = tmp_path / "log"
    tail = await Collector(path, poll_interval=0.01).started()
    try:
        path.write_bytes(b"over nfs\n")
        assert await tail.wait_lines(1) == [b"over nfs"]
        assert [n.kind for n in tail.notices] == [TailNoticeKind.POLLING]
        assert "nfs filesystem" in tail.notices[0].message
        assert "force_polling=False" in tail.notices[0].message
    finally:
        await tail.stop()


async def test_force_polling_false_trusts_notifications(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tailer, "remote_filesystem", lambda directory: "nfs")
    path = tmp_path / "log"
    tail = await Collector(path, force_polling=False).started()
    try:
        path.write_bytes(b"notified\n")
        assert await tail.wait_lines(1) == [b"notified"]
        assert tail.notices == []
    finally:
        await tail.stop()


async def test_inotify_failure_falls_back_to_polling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(directory: Path, name: str) -> inotify.InotifySubscription:
        raise inotify.InotifyUnavailable(errno.ENOSPC, "no more watches (raise fs.inotify.max_user_watches)")

    monkeypatch.setattr(inotify, "subscribe", refuse)
    path = tmp_path / "log"
    tail = await Collector(path, notifier="inotify", poll_interval=0.01).started()
    try:
        path.write_bytes(b"still read\n")
        assert await tail.wait_lines(1) == [b"still read"]
        assert [n.kind for n in tail.notices] == [TailNoticeKind.POLLING]
        assert "max_user_watches" in tail.notices[0].message
    finally:
        await tail.stop()


def test_local_filesystem_is_not_remote(tmp_path: Path) -> None:
    assert remote_filesystem(tmp_path) is None


async def test_one_inotify_instance_serves_every_tail(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    tails = [await Collector(tmp_path / f"log{i}", notifier="inotify").started() for i in range(5)]
    try:
        assert loop in inotify._HUBS
        hub = inotify._HUBS[loop]
        for i in range(5):
            (tmp_path / f"log{i}").write_bytes(f"line {i}\n".encode())
        for i, tail in enumerate(tails):
            assert await tail.wait_lines(1) == [f"line {i}".encode()]
        assert inotify._HUBS[loop] is hub
    finally:
        for tail in tails:
            await tail.stop()
    assert loop not in inotify._HUBS  # the last tail closed the shared instance


async def test_idle_tail_does_no_work(tmp_path: Path, collect: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle means no wake-up reaches the tailer: no read, no stat, nothing."""
    calls = 0
    original = tailer._Follower.catch_up

    def counting(self: tailer._Follower) -> object:
        nonlocal calls
        calls += 1
        return original(self)

    monkeypatch.setattr(tailer._Follower, "catch_up", counting)
    path = tmp_path / "log"
    path.write_bytes(b"x\n")
    tail = collect(path).start()
    await tail.wait_lines(1)
    await asyncio.sleep(0.1)
    before = calls
    await asyncio.sleep(0.5)
    assert calls == before
    path.write_bytes(b"x\ny\n")
    await tail.wait_lines(2)
    assert calls > before


async def test_a_tail_never_ends_and_cancels_promptly(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"only\n")
    lines = tail_lines(path)
    async with contextlib.aclosing(lines):
        assert (await anext(lines)).data == b"only"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(lines), 0.3)  # nothing more: it waits, it does not end
    tail = collect(path).start()
    await tail.wait_lines(1)
    assert tail.task is not None
    tail.task.cancel()
    done, _pending = await asyncio.wait({tail.task}, timeout=2)
    assert done == {tail.task}
    assert tail.task.cancelled()


def test_watch_target_is_the_nearest_existing_directory(tmp_path: Path) -> None:
    assert tailer.watch_target(tmp_path / "f.log") == (tmp_path, "f.log")
    assert tailer.watch_target(tmp_path / "a" / "b" / "f.log") == (tmp_path, "a")
    (tmp_path / "a").mkdir()
    assert tailer.watch_target(tmp_path / "a" / "b" / "f.log") == (tmp_path / "a", "b")


async def test_idle_watchfiles_tails_leave_the_default_executor_free(tmp_path: Path) -> None:
    default_workers = min(32, (os.cpu_count() or 1) + 4)
    tails = [await Collector(tmp_path / f"log{i}", notifier="watchfiles").started() for i in range(default_workers + 2)]
    try:
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 5) == "free"
    finally:
        for tail in tails:
            await tail.stop()
