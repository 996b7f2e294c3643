"""File-journal append throughput under each durability, against raw writes, and append->tail latency.

The "segments" rows roll the journal over every ``ROLL_BYTES`` (a roll-over every few hundred
entries, far more often than any real setting), to show what roll-overs cost appenders and tails.

Baselines measured in the same run: a bare ``os.write`` of the same bytes (no lock, no JSON,
no fsync) and a bare ``os.write`` + ``fdatasync`` per line.

    .venv/bin/python benchmarks/bench_journal.py [--quick]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _common import base_parser, machine_line, ms, print_table, summarize

from coven_codex.entries import ThoughtEntry
from coven_codex.journal import Durability, FileJournal, JournalRecord

DURABILITIES: tuple[Durability, ...] = ("always", "batched", "never")
TEXT = "a chat message of typical length, " * 3
CONCURRENCY = 16
PROCESSES = 4
ROLL_BYTES = 64 * 1024
SEGMENTED: tuple[Durability, ...] = ("batched", "never")

PROCESS_WRITER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from coven_codex.entries import ThoughtEntry
    from coven_codex.journal import FileJournal

    async def main() -> None:
        segment_bytes = int(sys.argv[5]) or None
        journal = FileJournal(Path(sys.argv[1]), durability=sys.argv[2], segment_bytes=segment_bytes)
        await journal.append(ThoughtEntry(text="warm-up"))
        start = time.monotonic_ns()
        for number in range(int(sys.argv[3])):
            await journal.append(ThoughtEntry(text=sys.argv[4], sender=str(number)))
        print(start, time.monotonic_ns())
        await journal.aclose()

    asyncio.run(main())
    """
)


def raw_writes(path: Path, count: int, sync: bool) -> float:
    line = ThoughtEntry(id="0" * 32, text=TEXT).to_json().encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    start = time.perf_counter()
    for _ in range(count):
        os.write(fd, line)
        if sync:
            os.fdatasync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return count / elapsed


async def sequential(
    path: Path, durability: Durability, count: int, segment_bytes: int | None
) -> tuple[float, list[float]]:
    journal = FileJournal(path, durability=durability, segment_bytes=segment_bytes)
    latencies = []
    start = time.perf_counter()
    for _ in range(count):
        began = time.perf_counter()
        await journal.append(ThoughtEntry(text=TEXT))
        latencies.append(time.perf_counter() - began)
    elapsed = time.perf_counter() - start
    await journal.aclose()
    return count / elapsed, latencies


async def concurrent(path: Path, durability: Durability, count: int, segment_bytes: int | None) -> float:
    journal = FileJournal(path, durability=durability, segment_bytes=segment_bytes)

    async def appender(share: int) -> None:
        for _ in range(share):
            await journal.append(ThoughtEntry(text=TEXT))

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(CONCURRENCY):
            group.create_task(appender(count // CONCURRENCY))
    elapsed = time.perf_counter() - start
    await journal.aclose()
    return (count // CONCURRENCY * CONCURRENCY) / elapsed


async def processes(path: Path, durability: Durability, count: int, segment_bytes: int | None) -> float:
    """Aggregate rate from the first append of any writer to the last append of any."""
    share = count // PROCESSES
    writers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            PROCESS_WRITER,
            str(path),
            durability,
            str(share),
            TEXT,
            str(segment_bytes or 0),
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(PROCESSES)
    ]
    spans = []
    for writer in writers:
        out, _ = await writer.communicate()
        first, last = out.split()
        spans.append((int(first), int(last)))
    elapsed = (max(last for _, last in spans) - min(first for first, _ in spans)) / 1e9
    return share * PROCESSES / elapsed


async def delivered_latency(
    path: Path, durability: Durability, rate: float, count: int, segment_bytes: int | None
) -> list[float]:
    """append() called -> the entry comes out of tail() in the same process."""
    journal = FileJournal(path, durability=durability, segment_bytes=segment_bytes)
    sent: dict[str, float] = {}
    latencies: list[float] = []
    done = asyncio.Event()

    async def reader() -> None:
        items = journal.tail(await journal.end_position())
        async with contextlib.aclosing(items):
            async for item in items:
                if isinstance(item, JournalRecord) and item.entry.id in sent:
                    latencies.append(time.perf_counter() - sent[item.entry.id])
                    if len(latencies) == count:
                        done.set()
                        return

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.2)
    start = time.perf_counter()
    for number in range(count):
        delay = start + number / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        entry = ThoughtEntry(id=f"e{number}", text=TEXT)
        sent[f"e{number}"] = time.perf_counter()
        asyncio.get_running_loop().create_task(journal.append(entry))
    await asyncio.wait_for(done.wait(), 30)
    await task
    await journal.aclose()
    return latencies


async def main() -> None:
    args = base_parser(__doc__ or "").parse_args()
    count = 500 if args.quick else 3000
    print(f"bench_journal: {machine_line()}")
    directory = Path(tempfile.mkdtemp(prefix="coven-bench-journal-"))
    try:
        raw = raw_writes(directory / "raw.log", count * 4, sync=False)
        raw_sync = raw_writes(directory / "raw-sync.log", count, sync=True)
        rows = [
            ["baseline: bare os.write", f"{raw:,.0f}", "-", "-", "-", "-", "-"],
            ["baseline: bare os.write + fdatasync", f"{raw_sync:,.0f}", "-", "-", "-", "-", "-"],
        ]
        always_together = None
        cases = [(d, None) for d in DURABILITIES] + [(d, ROLL_BYTES) for d in SEGMENTED]
        for durability, segment_bytes in cases:
            name = f"{durability}-{segment_bytes or 0}"
            rate, latencies = await sequential(directory / f"seq-{name}.jsonl", durability, count, segment_bytes)
            summary = summarize(latencies)
            together = await concurrent(directory / f"conc-{name}.jsonl", durability, count, segment_bytes)
            separate = await processes(directory / f"proc-{name}.jsonl", durability, count, segment_bytes)
            if always_together is None:
                always_together = together
            rolled = f", segments of {ROLL_BYTES // 1024} KiB" if segment_bytes else ""
            rows.append(
                [
                    f"FileJournal durability={durability}{rolled}",
                    f"{rate:,.0f}",
                    ms(summary.p50),
                    ms(summary.p99),
                    f"{together:,.0f}",
                    f"{together / always_together:.1f}x",
                    f"{separate:,.0f}",
                ]
            )
        print_table(
            f"append throughput (entries/s; {count} entries of ~{len(TEXT) + 130} bytes)",
            [
                "writer",
                "sequential",
                "append p50 ms",
                "append p99 ms",
                f"{CONCURRENCY} tasks",
                f"{CONCURRENCY} tasks vs always",
                f"{PROCESSES} processes",
            ],
            rows,
        )
        latency_rows = []
        for durability, segment_bytes in cases:
            name = f"{durability}-{segment_bytes or 0}"
            latencies = await delivered_latency(
                directory / f"lat-{name}.jsonl", durability, 100.0, count // 5, segment_bytes
            )
            summary = summarize(latencies)
            label = f"{durability}, segments of {ROLL_BYTES // 1024} KiB" if segment_bytes else durability
            latency_rows.append([label, summary.count, ms(summary.p50), ms(summary.p99), ms(summary.max)])
        print_table(
            "append() -> delivered by tail(), 100 entries/s, same process (ms)",
            ["durability", "entries", "p50", "p99", "max"],
            latency_rows,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main())
