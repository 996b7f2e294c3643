"""The watchfiles waker (the notifier where inotify is missing) on watchfiles' public ``watch()`` (issue 34)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tailing_helpers import Collector

from coven_codex.tailing import TailNoticeKind
from coven_codex.tailing.wakers import WakerFailed, WatchfilesWaker, WatchPhase


async def test_the_first_wait_returns_once_watching_and_a_later_write_wakes_it(tmp_path: Path) -> None:
    """watch() starts its watcher when first iterated: the first wait returns (with nothing changed)
    once it watches, so the caller's next read misses nothing; from then on a write wakes it."""
    path = tmp_path / "log"
    waker = WatchfilesWaker(tmp_path, "log")
    try:
        assert waker.phase is WatchPhase.NEW
        await asyncio.wait_for(waker.wait(), 10)
        assert waker.phase is WatchPhase.WATCHING
        waiting = asyncio.create_task(waker.wait())
        await asyncio.sleep(0.05)
        assert not waiting.done(), "nothing changed: a watching waker waits"
        path.write_bytes(b"one\n")
        await asyncio.wait_for(waiting, 10)
        assert not waker.dead
    finally:
        await waker.aclose()
    assert waker.phase is WatchPhase.CLOSED


async def test_a_write_to_another_file_of_the_directory_does_not_wake_it(tmp_path: Path) -> None:
    waker = WatchfilesWaker(tmp_path, "log")
    try:
        await asyncio.wait_for(waker.wait(), 10)
        waiting = asyncio.create_task(waker.wait())
        (tmp_path / "other").write_bytes(b"x\n")
        await asyncio.sleep(0.3)
        assert not waiting.done()
        (tmp_path / "log").write_bytes(b"mine\n")
        await asyncio.wait_for(waiting, 10)
    finally:
        await waker.aclose()


async def test_a_directory_gone_before_the_watcher_started_makes_it_dead(tmp_path: Path) -> None:
    waker = WatchfilesWaker(tmp_path / "gone", "log")
    try:
        await asyncio.wait_for(waker.wait(), 10)
        assert waker.dead
    finally:
        await waker.aclose()


async def test_a_waker_closed_before_its_first_wait_holds_nothing(tmp_path: Path) -> None:
    waker = WatchfilesWaker(tmp_path, "log")
    await waker.aclose()
    assert waker.phase is WatchPhase.CLOSED


def inotify_descriptors() -> int:
    """How many inotify descriptors this process holds (watchfiles' watchers and inotify wakers)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (closed meanwhile)
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
    return count


def wait_for_no_watcher(within: float = 10.0) -> None:
    """Return once this process holds no inotify descriptor: no watcher of an earlier test is left.

    A closed watchfiles watcher's own thread (notify's inotify loop) closes its descriptors
    (inotify's, epoll's, an eventfd) a moment after ``aclose()`` returns. Left by an earlier test of
    the same process, it closed them while :func:`one_free_descriptor` held the limit: more than one
    was free and the watcher started (the CI failure of
    ``test_watchfiles_failing_to_start_raises_waker_failed``). A thread's end sends no event a test
    can wait on, hence the bounded look every 10 ms."""
    deadline = time.monotonic() + within
    while held := inotify_descriptors():
        assert time.monotonic() < deadline, f"{held} inotify descriptor(s) still open after {within:g}s"
        time.sleep(0.01)


@contextlib.contextmanager
def one_free_descriptor() -> Iterator[Callable[[], None]]:
    """Lower this process's descriptor limit and fill it, leaving exactly one descriptor free: real
    exhaustion, which makes watchfiles' watcher fail to start (it needs several). Nothing else of
    this process may close descriptors meanwhile: the watchers of earlier tests are waited for, and
    the garbage of earlier tests is collected first and not collected meanwhile (a worker that ran
    many tests holds cycles with sockets and files in them, closed when a collection finds them:
    one that ran while the limit was held freed descriptors and the watcher started, the failure of
    a loaded CI run after the watcher wait above was in)."""
    wait_for_no_watcher()
    gc.collect()
    gc.disable()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(name) for name in os.listdir("/proc/self/fd"))
    fillers: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 32, hard))
    try:
        with contextlib.suppress(OSError):
            while True:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
        os.close(fillers.pop())
        yield lambda: os.close(fillers.pop())  # frees one more
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        gc.enable()


async def test_watchfiles_failing_to_start_raises_waker_failed(tmp_path: Path) -> None:
    waker = WatchfilesWaker(tmp_path, "log")
    try:
        with one_free_descriptor(), contextlib.suppress(WakerFailed):
            await asyncio.wait_for(waker.wait(), 10)
            raise AssertionError("the watcher started without descriptors")
        assert waker.phase is WatchPhase.FAILED
    finally:
        await waker.aclose()


async def test_a_tail_whose_watchfiles_cannot_start_polls_and_says_so_once(tmp_path: Path) -> None:
    """The tailer keeps working when watchfiles fails (here: no descriptor left for its watcher):
    it polls, with one notice naming watchfiles' error, and the lines keep coming."""
    path = tmp_path / "log"
    path.write_bytes(b"before\n")
    with one_free_descriptor() as free_one:  # the tailer's file takes the last one
        tail = Collector(path, notifier="watchfiles", poll_interval=0.01).start()
        try:
            assert await tail.wait_lines(1) == [b"before"]
            await tail.wait_for(lambda c: bool(c.notices))
            free_one()  # for the writer
            with path.open("ab") as file:
                file.write(b"after\n")
            assert await tail.wait_lines(2) == [b"before", b"after"]
            assert [n.kind for n in tail.notices] == [TailNoticeKind.POLLING]
            message = tail.notices[0].message
            assert "watchfiles cannot watch" in message and "Too many open files" in message
            assert "every 0.01s" in message
        finally:
            await tail.stop()
