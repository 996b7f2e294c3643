"""The tailer against real writer processes: byte-by-byte writes, 100k lines, several writers."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tailing_helpers import Collector, run_writer

from coven_codex.tailing import Line

Make = Callable[..., Collector]

BYTE_WRITER = """
import os, sys, time
path, payload = sys.argv[1], bytes.fromhex(sys.argv[2])
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
for index in range(len(payload)):
    os.write(fd, payload[index:index + 1])   # every byte boundary is a write boundary
    time.sleep(0.0005)
os.close(fd)
"""

LINE_WRITER = """
import os, sys
path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
batch = []
for number in range(count):
    batch.append(f"{name} {number:07d} {'x' * (number % 50)}\\n".encode())
    if len(batch) == 100 or number == count - 1:
        for line in batch:
            os.write(fd, line)
        batch.clear()
os.close(fd)
"""


async def test_lines_written_one_byte_at_a_time(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "bytes.log"
    lines = [b'{"kind": "thought", "text": "h\xc3\xa9llo"}', b"", b"second line", b"3"]
    payload = b"".join(line + b"\n" for line in lines) + b"unterminated"
    tail = await collect(path).started()
    await run_writer(BYTE_WRITER, str(path), payload.hex())
    assert await tail.wait_lines(len(lines)) == lines
    await asyncio.sleep(0.05)
    assert len(tail.lines) == len(lines)  # the unterminated line is still waiting
    ends = [line.end for line in tail.lines]
    assert ends == [sum(len(x) + 1 for x in lines[: i + 1]) for i in range(len(lines))]


async def test_hundred_thousand_lines_without_loss_or_reordering(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "big.log"
    count = 100_000
    tail = await collect(path).started()
    await run_writer(LINE_WRITER, str(path), "w", str(count))
    await tail.wait_lines(count, within=60)
    expected = [f"w {n:07d} {'x' * (n % 50)}".encode() for n in range(count)]
    assert tail.data == expected
    assert tail.lines[-1].end == path.stat().st_size
    assert all(a.end == b.start for a, b in itertools.pairwise(tail.lines))


async def test_several_writer_processes_at_once(tmp_path: Path, collect: Make) -> None:
    path = tmp_path / "shared.log"
    tail = await collect(path).started()
    writers = [run_writer(LINE_WRITER, str(path), f"w{i}", "5000") for i in range(4)]
    await asyncio.gather(*writers)
    await tail.wait_lines(20_000, within=60)
    by_writer: dict[bytes, list[int]] = {}
    for data in tail.data:
        name, number, _pad = data.split(b" ")
        by_writer.setdefault(name, []).append(int(number))
    assert sorted(by_writer) == [b"w0", b"w1", b"w2", b"w3"]
    for numbers in by_writer.values():
        assert numbers == list(range(5000))  # each writer's order is kept


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.binary(min_size=0, max_size=30).filter(lambda b: b"\n" not in b), min_size=1, max_size=12),
    st.lists(st.integers(min_value=1, max_value=400), max_size=25),
)
def test_random_write_boundaries_on_a_real_file(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[bytes], cuts: list[int]
) -> None:
    """Writes split at random points, the tailer reading between them (inotify wakes it at once)."""

    async def scenario() -> list[Line]:
        path = tmp_path_factory.mktemp("split") / "split.log"
        data = b"".join(piece + b"\n" for piece in pieces)
        points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
        tail = await Collector(path, notifier="inotify").started()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                for a, b in itertools.pairwise(points):
                    os.write(fd, data[a:b])
                    await asyncio.sleep(0.002)  # let the tailer read the partial state
            finally:
                os.close(fd)
            await tail.wait_lines(len(pieces))
            await asyncio.sleep(0.01)
            return tail.lines
        finally:
            await tail.stop()

    lines = asyncio.run(scenario())
    assert [line.data for line in lines] == pieces
