"""Shared helpers for the benchmark scripts: percentiles, CPU accounting, table printing.

Generic on purpose: any benchmark may import it (``from _common import ...``; the
scripts run as ``.venv/bin/python benchmarks/bench_X.py``, which puts this directory
on ``sys.path``).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import resource
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` (0..1) percentile by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = fraction * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class Summary:
    count: int
    p50: float
    p99: float
    max: float
    mean: float


def summarize(values: Sequence[float]) -> Summary:
    if not values:
        return Summary(0, math.nan, math.nan, math.nan, math.nan)
    return Summary(
        len(values), percentile(values, 0.5), percentile(values, 0.99), max(values), sum(values) / len(values)
    )


@dataclass(slots=True)
class CpuSample:
    """CPU seconds (user + system, all threads of this process) and context switches."""

    cpu: float = 0.0
    voluntary_switches: int = 0
    wall: float = 0.0


@dataclass(slots=True)
class CpuMeter:
    result: CpuSample = field(default_factory=CpuSample)


@contextmanager
def cpu_meter() -> Iterator[CpuMeter]:
    """Measures this process's CPU time and voluntary context switches inside the block."""
    meter = CpuMeter()
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    try:
        yield meter
    finally:
        after = resource.getrusage(resource.RUSAGE_SELF)
        meter.result = CpuSample(
            cpu=(after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            voluntary_switches=after.ru_nvcsw - before.ru_nvcsw,
            wall=time.perf_counter() - start,
        )


def ms(seconds: float) -> str:
    """Seconds as milliseconds with a sensible precision."""
    if math.isnan(seconds):
        return "-"
    value = seconds * 1000
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def ratio(value: float, baseline: float) -> str:
    if math.isnan(value) or math.isnan(baseline) or value == 0:
        return "-"
    return f"{baseline / value:.1f}x"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A plain Markdown table (pastes straight into docs)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    print(f"\n### {title}\n")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(cells[0], widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")


def machine_line() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{platform.system()} {platform.release()}, Python {platform.python_version()},"
        f" {os.cpu_count()} CPUs, load average {load}"
    )


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test, noisier figures)")
    return parser
