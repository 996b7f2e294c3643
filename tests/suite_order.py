"""The order the suite runs in on pytest-xdist workers (``tests/conftest.py``, ``scripts/test.sh``).

pytest-xdist's ``worksteal`` hands each worker one contiguous chunk of the collection at the start and
later moves tests from the end of a busy worker's queue to an idle one. The collection is therefore
dealt (:func:`deal`): longest first, each worker's share of the long tests at the head of its chunk,
so that every worker starts on long tests at once and the run ends on short ones that fill every worker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

DURATIONS = Path(__file__).with_name("durations.txt")
"""Measured seconds (setup, call and teardown) of the suite's longer tests, one ``SECONDS NODEID`` a line,
longest first; refreshed by a run with ``COVEN_TEST_DURATIONS=tests/durations.txt`` (only the order it
gives matters: a stale or missing line costs balance, never a result)."""
UNMEASURED_SECONDS: Mapping[str, float] = {"slow": 30.0, "codex": 3.0, "other": 0.2}
"""What a test :data:`DURATIONS` does not list is expected to take, by its markers."""
RECORDED_MIN_SECONDS = 1.0
"""Tests shorter than this are left out of :data:`DURATIONS` (the guess by markers orders them well enough)."""


def read_durations(path: Path) -> dict[str, float]:
    """The seconds ``path`` (:data:`DURATIONS`' format) gives each test it lists; {} when it is missing."""
    if not path.exists():
        return {}
    measured: dict[str, float] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        seconds, _, nodeid = line.strip().partition(" ")
        if nodeid:
            measured[nodeid] = float(seconds)
    return measured


def merge_durations(path: Path, recorded: Mapping[str, float]) -> None:
    """Merge a run's durations into ``path``: the tests it ran get their new time, the others keep theirs."""
    merged = {**read_durations(path), **recorded}
    kept = sorted(((s, nodeid) for nodeid, s in merged.items() if s >= RECORDED_MIN_SECONDS), reverse=True)
    path.write_text("".join(f"{s:.1f} {nodeid}\n" for s, nodeid in kept), encoding="utf-8")


def xdist_chunk_sizes(count: int, workers: int) -> list[int]:
    """How many of ``count`` tests ``worksteal`` hands each of ``workers`` at the start, in order
    (``len(pending) // workers_left`` each: xdist/scheduler/worksteal.py, ``check_schedule``)."""
    sizes = []
    for worker in range(workers):
        size = count // (workers - worker)
        sizes.append(size)
        count -= size
    return sizes


def deal(items: list[T], seconds: Callable[[T], float], workers: int) -> list[T]:
    """``items`` reordered for ``workers`` workers: longest first (a stable sort), each dealt to the worker
    with the least expected work that still has room in the chunk ``worksteal`` will hand it
    (:func:`xdist_chunk_sizes`); the chunks one after the other. One worker (no xdist): longest first."""
    ordered = sorted(items, key=lambda item: -seconds(item))
    if workers <= 1:
        return ordered
    sizes = xdist_chunk_sizes(len(ordered), workers)
    chunks: list[list[T]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for item in ordered:
        worker = min((w for w in range(workers) if len(chunks[w]) < sizes[w]), key=lambda w: loads[w])
        chunks[worker].append(item)
        loads[worker] += seconds(item)
    return [item for chunk in chunks for item in chunk]
