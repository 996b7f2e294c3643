"""The Redis Streams journal against the file journal, in the same run: append -> delivered by tail(), appends/s.

Starts its own ``redis-server`` (Debian's, AOF with ``appendfsync everysec``, on a free loopback
port). The file journal (durability ``batched``, its default) is the baseline; ratios are Redis
over file (> 1: Redis is slower).

    .venv/bin/python benchmarks/bench_redis_journal.py [--quick]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from pathlib import Path

from _common import base_parser, machine_line, ms, print_table, summarize

from coven_codex.entries import ThoughtEntry
from coven_codex.journal import FileJournal, Journal, JournalRecord
from coven_codex.journal.redis import RedisJournal
from coven_codex.testing.redis_server import RedisServer

TEXT = "a chat message of typical length, " * 3
RATE = 100.0
"""Entries per second in the latency runs (a busy chat, not a flood)."""


async def delivered_latency(journal: Journal, count: int) -> list[float]:
    """append() called -> the entry comes out of a tail() of the same journal, same process (seconds)."""
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
    await asyncio.sleep(0.3)
    appends: set[asyncio.Task[JournalRecord]] = set()
    start = time.perf_counter()
    for number in range(count):
        delay = start + number / RATE - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        entry_id = f"e{number}-{start}"
        sent[entry_id] = time.perf_counter()
        appends.add(asyncio.create_task(journal.append(ThoughtEntry(id=entry_id, text=TEXT))))
    await asyncio.wait_for(done.wait(), 60)
    await asyncio.gather(*appends)
    await task
    return latencies


async def sequential(journal: Journal, count: int) -> float:
    """Appends per second, one after another."""
    await journal.append(ThoughtEntry(text="warm-up"))
    start = time.perf_counter()
    for number in range(count):
        await journal.append(ThoughtEntry(text=TEXT, sender=str(number)))
    return count / (time.perf_counter() - start)


async def concurrent(journal: Journal, count: int, tasks: int = 16) -> float:
    """Appends per second from ``tasks`` coroutines at once."""
    share = count // tasks

    async def appender() -> None:
        for number in range(share):
            await journal.append(ThoughtEntry(text=TEXT, sender=str(number)))

    start = time.perf_counter()
    await asyncio.gather(*(appender() for _ in range(tasks)))
    return share * tasks / (time.perf_counter() - start)


async def main() -> None:
    args = base_parser(__doc__ or "").parse_args()
    count = 300 if args.quick else 2000
    print(f"bench_redis_journal: {machine_line()}")
    directory = Path(tempfile.mkdtemp(prefix="coven-bench-redis-"))
    try:
        with RedisServer(directory / "redis") as server:
            results: dict[str, tuple[list[float], float, float]] = {}
            for name in ("file", "redis"):
                journals: list[Journal] = []
                for run in range(3):
                    journals.append(
                        FileJournal(directory / f"{run}.jsonl")
                        if name == "file"
                        else RedisJournal.from_url(server.url(key=f"bench-{run}"))
                    )
                latencies = await delivered_latency(journals[0], count)
                rate = await sequential(journals[1], count)
                together = await concurrent(journals[2], count)
                for journal in journals:
                    await journal.aclose()
                results[name] = (latencies, rate, together)
        file_lat = summarize(results["file"][0])
        rows = []
        for name, label in (("file", "FileJournal (batched), baseline"), ("redis", "RedisJournal (AOF everysec)")):
            latencies, rate, together = results[name]
            summary = summarize(latencies)
            rows.append(
                [
                    label,
                    summary.count,
                    ms(summary.p50),
                    ms(summary.p99),
                    f"{summary.p50 / file_lat.p50:.1f}x",
                    f"{summary.p99 / file_lat.p99:.1f}x",
                    f"{rate:,.0f}",
                    f"{together:,.0f}",
                ]
            )
        print_table(
            f"append() -> delivered by tail() at {RATE:.0f} entries/s (ms), and appends/s; ratios: vs the file journal",
            ["journal", "entries", "p50", "p99", "p50 ratio", "p99 ratio", "sequential/s", "16 tasks/s"],
            rows,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main())
