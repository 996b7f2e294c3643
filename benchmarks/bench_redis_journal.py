"""The Redis Streams journal against the file journal, in the same run: append -> delivered by tail(), appends/s.

Starts its own ``redis-server`` (Debian's, AOF with ``appendfsync everysec``, on a free loopback
port). The file journal (durability ``batched``, its default) is the baseline; ratios are Redis
over file for latencies (> 1: Redis is slower) and Redis over file for appends/s (>= 1: Redis
keeps up). The last table is a streaming turn's deltas (one append after another, each awaited)
while 16 other appenders flood the same journal: what one delta's append and delivery take.

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

from coven_codex.entries import DeltaEntry, ThoughtEntry
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


async def deltas_under_load(journal: Journal, count: int, tasks: int = 16) -> tuple[list[float], list[float], float]:
    """A streaming turn's ``count`` deltas, each awaited, while ``tasks`` appenders append without pause:
    each delta's append() latency, its append -> delivered-by-tail latency (seconds), and the
    flood's appends/s meanwhile."""
    sent: dict[str, float] = {}
    delivered: list[float] = []
    appended: list[float] = []
    all_delivered = asyncio.Event()
    stop = asyncio.Event()
    flooded = 0

    async def reader() -> None:
        items = journal.tail(await journal.end_position())
        async with contextlib.aclosing(items):
            async for item in items:
                if isinstance(item, JournalRecord) and item.entry.id in sent:
                    delivered.append(time.perf_counter() - sent[item.entry.id])
                    if len(delivered) == count:
                        all_delivered.set()
                        return

    async def flood(number: int) -> None:
        nonlocal flooded
        while not stop.is_set():
            await journal.append(ThoughtEntry(text=TEXT, sender=f"flood-{number}"))
            flooded += 1

    reading = asyncio.create_task(reader())
    await asyncio.sleep(0.3)
    flooding = [asyncio.create_task(flood(number)) for number in range(tasks)]
    await asyncio.sleep(0.3)
    begun, flooded_before = time.perf_counter(), flooded
    for number in range(count):
        entry_id = f"delta-{number}-{begun}"
        sent[entry_id] = time.perf_counter()
        await journal.append(DeltaEntry(id=entry_id, item_id="msg-1", text="a few words "))
        appended.append(time.perf_counter() - sent[entry_id])
    rate = (flooded - flooded_before) / (time.perf_counter() - begun)
    await asyncio.wait_for(all_delivered.wait(), 60)
    stop.set()
    await asyncio.gather(*flooding)
    await reading
    return appended, delivered, rate


async def main() -> None:
    args = base_parser(__doc__ or "").parse_args()
    count = 300 if args.quick else 2000
    print(f"bench_redis_journal: {machine_line()}")
    directory = Path(tempfile.mkdtemp(prefix="coven-bench-redis-"))
    try:
        with RedisServer(directory / "redis") as server:
            results: dict[str, tuple[list[float], float, float]] = {}
            loaded: dict[str, tuple[list[float], list[float], float]] = {}
            for name in ("file", "redis"):
                journals: list[Journal] = []
                for run in range(4):
                    journals.append(
                        FileJournal(directory / f"{run}.jsonl")
                        if name == "file"
                        else RedisJournal.from_url(server.url(key=f"bench-{run}"))
                    )
                latencies = await delivered_latency(journals[0], count)
                rate = await sequential(journals[1], count)
                together = await concurrent(journals[2], count)
                loaded[name] = await deltas_under_load(journals[3], count // 4)
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
                    f"{together / results['file'][2]:.2f}x",
                ]
            )
        print_table(
            f"append() -> delivered by tail() at {RATE:.0f} entries/s (ms), and appends/s; ratios: vs the file journal",
            ["journal", "entries", "p50", "p99", "p50 ratio", "p99 ratio", "sequential/s", "16 tasks/s", "16 ratio"],
            rows,
        )
        file_append, file_delivered = summarize(loaded["file"][0]), summarize(loaded["file"][1])
        rows = []
        for name, label in (("file", "FileJournal (batched), baseline"), ("redis", "RedisJournal (AOF everysec)")):
            appended, delivered, flood_rate = loaded[name]
            append_summary, delivered_summary = summarize(appended), summarize(delivered)
            rows.append(
                [
                    label,
                    append_summary.count,
                    ms(append_summary.p50),
                    ms(append_summary.p99),
                    f"{append_summary.p50 / file_append.p50:.1f}x",
                    ms(delivered_summary.p50),
                    ms(delivered_summary.p99),
                    f"{delivered_summary.p50 / file_delivered.p50:.1f}x",
                    f"{flood_rate:,.0f}",
                ]
            )
        print_table(
            "a streaming turn's deltas (each awaited) while 16 appenders flood the journal (ms); ratios: vs the file",
            [
                "journal",
                "deltas",
                "append p50",
                "append p99",
                "append p50 ratio",
                "delivered p50",
                "delivered p99",
                "delivered p50 ratio",
                "flood appends/s",
            ],
            rows,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main())
