"""The tailer on real files, with each notifier: partial lines, resume, creation, truncation, replacement."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from tailing_helpers import Collector

from coven_codex.tailing import Line, TailNoticeKind

Make = Callable[..., Collector]


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


async def test_yields_complete_lines_only(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"")
    tail = await collect(path).started()
    append(path, b"first\nsec")
    assert await tail.wait_lines(1) == [b"first"]
    await asyncio.sleep(0.1)
    assert tail.data == [b"first"]  # the partial line waits for its newline
    append(path, b"ond\n")
    assert await tail.wait_lines(2) == [b"first", b"second"]
    assert tail.lines[1] == Line(b"second", 6, 13)


async def test_reads_what_was_there_before_it_started(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a\nb\nc\n")
    tail = collect(path).start()
    assert await tail.wait_lines(3) == [b"a", b"b", b"c"]


async def test_resumes_from_an_offset(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"one\ntwo\nthree\n")
    tail = collect(path, start=4).start()
    assert await tail.wait_lines(2) == [b"two", b"three"]
    assert [line.start for line in tail.lines] == [4, 8]
    assert tail.lines[-1].end == path.stat().st_size


async def test_offset_past_the_end_restarts_from_zero_and_reports(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"short\n")
    tail = collect(path, start=1000).start()
    assert await tail.wait_lines(1) == [b"short"]
    assert [n.kind for n in tail.notices if n.kind != TailNoticeKind.POLLING] == [TailNoticeKind.TRUNCATED]


async def test_waits_for_a_file_created_later(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "later.jsonl"
    tail = await collect(path).started()
    await asyncio.sleep(0.05)
    assert tail.lines == []
    append(path, b"hello\n")
    assert await tail.wait_lines(1) == [b"hello"]


async def test_waits_for_missing_directories_too(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "sessions" / "2026" / "11" / "rollout.jsonl"
    tail = await collect(path).started()
    (tmp_path / "sessions" / "2026").mkdir(parents=True)
    await asyncio.sleep(0.05)
    (tmp_path / "sessions" / "2026" / "11").mkdir()
    await asyncio.sleep(0.05)
    append(path, b"deep\n")
    assert await tail.wait_lines(1) == [b"deep"]
    append(path, b"more\n")
    assert await tail.wait_lines(2) == [b"deep", b"more"]


async def test_truncation_restarts_from_zero_and_reports(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"old line one\nold line two\n")
    tail = collect(path).start()
    await tail.wait_lines(2)
    with path.open("r+b") as handle:
        handle.truncate(0)
    await tail.wait_for(lambda c: any(n.kind == TailNoticeKind.TRUNCATED for n in c.notices))
    append(path, b"new\n")
    assert await tail.wait_lines(3) == [b"old line one", b"old line two", b"new"]
    assert tail.lines[-1].start == 0


async def test_replacement_finishes_the_old_file_then_follows_the_new(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"old 1\n")
    tail = collect(path).start()
    await tail.wait_lines(1)
    replacement = tmp_path / "log.new"
    replacement.write_bytes(b"new 1\nnew 2\n")
    append(path, b"old 2\n")  # written just before the rename: must not be lost
    os.rename(replacement, path)
    assert await tail.wait_lines(4) == [b"old 1", b"old 2", b"new 1", b"new 2"]
    assert [line.start for line in tail.lines] == [0, 6, 0, 6]
    assert TailNoticeKind.REPLACED in [n.kind for n in tail.notices]
    append(path, b"new 3\n")
    assert (await tail.wait_lines(5))[-1] == b"new 3"


async def test_replacement_reports_an_abandoned_partial_line(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"done\nhalf a li")
    tail = collect(path).start()
    await tail.wait_lines(1)
    replacement = tmp_path / "next"
    replacement.write_bytes(b"fresh\n")
    os.rename(replacement, path)
    assert await tail.wait_lines(2) == [b"done", b"fresh"]
    dropped = [n for n in tail.notices if n.kind == TailNoticeKind.DROPPED_PARTIAL]
    assert len(dropped) == 1
    assert dropped[0].offset == 5


async def test_deleted_then_recreated_file_is_followed(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a\n")
    tail = collect(path).start()
    await tail.wait_lines(1)
    path.unlink()
    await asyncio.sleep(0.05)
    path.write_bytes(b"b\n")
    assert await tail.wait_lines(2) == [b"a", b"b"]


async def test_too_long_lines_come_out_flagged_and_empty(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"")
    tail = await collect(path, max_line_bytes=8).started()
    append(path, b"tiny\n" + b"x" * 5000)
    await tail.wait_lines(1)
    append(path, b"y" * 5000 + b"\nafter\n")
    await tail.wait_lines(3)
    assert tail.lines[1] == Line(b"", 5, 10_006, too_long=True)
    assert tail.lines[2] == Line(b"after", 10_006, 10_012)


async def test_directory_removed_and_recreated(tmp_path: Path, collect: Make) -> None:
    directory = tmp_path / "sessions"
    directory.mkdir()
    path = directory / "log"
    path.write_bytes(b"first\n")
    tail = collect(path).start()
    await tail.wait_lines(1)
    path.unlink()
    directory.rmdir()
    await asyncio.sleep(0.1)
    directory.mkdir()
    await asyncio.sleep(0.05)
    path.write_bytes(b"second\n")
    assert await tail.wait_lines(2) == [b"first", b"second"]
    append(path, b"third\n")
    assert await tail.wait_lines(3) == [b"first", b"second", b"third"]


async def test_a_symlinked_file_is_followed_where_it_is_written(tmp_path: Path, collect: Make) -> None:
    real_dir = tmp_path / "data"
    real_dir.mkdir()
    target = real_dir / "journal.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)  # dangling until the target is created
    tail = await collect(link).started()
    append(target, b"through the link\n")
    assert await tail.wait_lines(1) == [b"through the link"]
    append(target, b"again\n")
    assert await tail.wait_lines(2) == [b"through the link", b"again"]


def open_fds_on(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                count += 1
        except OSError:
            continue
    return count


async def test_a_released_tail_holds_no_descriptor_while_idle_and_goes_on_where_it_was(
    tmp_path: Path, collect: Make
) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(b"one\npart")
    tail = collect(path, hold_open=False).start()
    assert await tail.wait_lines(1) == [b"one"]
    await asyncio.sleep(0.1)
    assert open_fds_on(path) == 0  # idle: the file is closed
    append(path, b"ial\ntwo\n")
    assert await tail.wait_lines(3) == [b"one", b"partial", b"two"]
    assert tail.lines[1] == Line(b"partial", 4, 12)
    await asyncio.sleep(0.1)
    assert open_fds_on(path) == 0


async def test_a_held_tail_keeps_its_descriptor(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"one\n")
    tail = collect(path).start()
    assert await tail.wait_lines(1) == [b"one"]
    assert open_fds_on(path) == 1


async def test_a_released_tail_notices_a_replaced_file(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(b"old\n")
    tail = collect(path, hold_open=False).start()
    assert await tail.wait_lines(1) == [b"old"]
    other = tmp_path / "new"
    other.write_bytes(b"new\n")
    os.replace(other, path)
    assert await tail.wait_lines(2) == [b"old", b"new"]
    assert TailNoticeKind.REPLACED in [notice.kind for notice in tail.notices]
