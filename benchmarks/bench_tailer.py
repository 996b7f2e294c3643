"""Tailer latency and idle cost: ours (inotify, and watchfiles) against a 150 ms polling tailer.

For each tailer and each rate, a separate writer process appends lines carrying their
CLOCK_MONOTONIC write time; the tailer in this process measures write->delivered latency.
Then each tailer sits idle on a file and we measure the CPU this process uses.

    .venv/bin/python benchmarks/bench_tailer.py [--quick]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from _common import Summary, base_parser, cpu_meter, machine_line, ms, print_table, ratio, summarize

from coven_codex.tailing import tail_lines

WRITER = textwrap.dedent(
    """
    import os, sys, time
    path, rate, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    padding = "x" * 100
    interval = 1e9 / rate
    start = time.monotonic_ns()
    for number in range(count):
        due = start + number * interval
        wait = due - time.monotonic_ns()
        if wait > 0:
            time.sleep(wait / 1e9)
        os.write(fd, f"{time.monotonic_ns()} {number} {padding}\\n".encode())
    elapsed = (time.monotonic_ns() - start) / 1e9
    os.close(fd)
    print(count / elapsed if elapsed else 0.0)
    """
)

TAILERS: dict[str, dict[str, Any]] = {
    "coven, inotify": {"notifier": "inotify"},
    "coven, watchfiles (step 5 ms)": {"notifier": "watchfiles"},
    "polling 150 ms (reference)": {"force_polling": True, "poll_interval": 0.15},
}
BASELINE = "polling 150 ms (reference)"


async def measure_latency(
    directory: Path, options: dict[str, Any], rate: float, seconds: float
) -> tuple[Summary, float]:
    path = directory / f"latency-{time.monotonic_ns()}.log"
    count = max(int(rate * seconds), 20)
    latencies: list[float] = []

    async def consume() -> None:
        lines = tail_lines(path, on_notice=lambda notice: None, **options)
        async with contextlib.aclosing(lines):
            async for line in lines:
                now = time.monotonic_ns()
                latencies.append((now - int(line.data.split(b" ", 1)[0])) / 1e9)
                if len(latencies) == count:
                    return

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0.3)  # the watch is set up
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, str(path), str(rate), str(count), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await writer.communicate()
    await asyncio.wait_for(consumer, timeout=30)
    path.unlink()
    return summarize(latencies), float(out or 0)


async def measure_idle(directory: Path, options: dict[str, Any] | None, seconds: float) -> tuple[float, int, float]:
    """CPU seconds, voluntary context switches and wall seconds while a tailer waits on a quiet file."""
    path = directory / f"idle-{time.monotonic_ns()}.log"
    path.write_bytes(b"one line\n")
    seen = asyncio.Event()

    async def consume() -> None:
        assert options is not None
        lines = tail_lines(path, on_notice=lambda notice: None, **options)
        async with contextlib.aclosing(lines):
            async for _line in lines:
                seen.set()

    task = asyncio.create_task(consume()) if options is not None else None
    if task is not None:
        await asyncio.wait_for(seen.wait(), 5)
    await asyncio.sleep(0.5)
    with cpu_meter() as meter:
        await asyncio.sleep(seconds)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return meter.result.cpu, meter.result.voluntary_switches, meter.result.wall


async def main() -> None:
    args = base_parser(__doc__ or "").parse_args()
    rates = {10.0: 3.0 if args.quick else 6.0, 1000.0: 2.0 if args.quick else 5.0, 10000.0: 1.0 if args.quick else 3.0}
    idle_seconds = 2.0 if args.quick else 10.0
    print(f"bench_tailer: {machine_line()}")
    directory = Path(tempfile.mkdtemp(prefix="coven-bench-tailer-"))
    try:
        results: dict[tuple[str, float], tuple[Summary, float]] = {}
        for rate, seconds in rates.items():
            for name, options in TAILERS.items():
                results[(name, rate)] = await measure_latency(directory, options, rate, seconds)
        rows = []
        for rate in rates:
            base = results[(BASELINE, rate)][0]
            for name in TAILERS:
                summary, achieved = results[(name, rate)]
                target = ""
                if rate == 1000.0:
                    target = "met" if summary.p50 <= 0.005 and summary.p99 <= 0.020 else "MISSED"
                rows.append(
                    [
                        f"{rate:,.0f}",
                        f"{achieved:,.0f}",
                        name,
                        summary.count,
                        ms(summary.p50),
                        ms(summary.p99),
                        ms(summary.max),
                        ratio(summary.p50, base.p50),
                        ratio(summary.p99, base.p99),
                        target,
                    ]
                )
        print_table(
            "append -> delivered latency (ms), writer in another process",
            [
                "lines/s",
                "achieved",
                "tailer",
                "lines",
                "p50",
                "p99",
                "max",
                "p50 vs ref",
                "p99 vs ref",
                "target p50<=5, p99<=20",
            ],
            rows,
        )
        idle_rows = []
        idle_configs: dict[str, dict[str, Any] | None] = {
            "no tailer (event loop only)": None,
            **TAILERS,
            "polling 100 ms (our fallback)": {"force_polling": True},
        }
        base_cpu = None
        for name, idle_options in idle_configs.items():
            cpu, switches, wall = await measure_idle(directory, idle_options, idle_seconds)
            if base_cpu is None:
                base_cpu = cpu
            idle_rows.append(
                [
                    name,
                    f"{wall:.1f}",
                    f"{cpu * 1000:.1f}",
                    f"{100 * cpu / wall:.3f}",
                    f"{switches / wall:.1f}",
                    f"{(cpu - base_cpu) * 1000:+.1f}",
                ]
            )
        print_table(
            f"idle tailer over {idle_seconds:g} s",
            ["tailer", "seconds", "CPU ms", "CPU %", "wake-ups/s (voluntary switches)", "CPU ms vs no tailer"],
            idle_rows,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)  # the polling notices are expected here
    asyncio.run(main())
