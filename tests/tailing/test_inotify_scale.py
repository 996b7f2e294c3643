"""The shared inotify instance at scale: an event about one file costs the same however many files
of its directory are watched (a day folder of Codex's rollouts holds every conversation's file)."""

from __future__ import annotations

import asyncio
import cProfile
from collections.abc import Callable
from pathlib import Path

import pytest

from coven_codex.tailing import inotify

EVENTS = 20
WAKE_BOUND = 10.0


async def calls_per_event(directory: Path, watched: int, match: Callable[[int], inotify.NameMatch]) -> float:
    """Python calls made (counted by cProfile: no clock involved) per event about the file of
    the first of ``watched`` subscriptions in ``directory``, from the write to its wake-up."""
    directory.mkdir()
    target = directory / "rollout-2026-11-27T00-00-00-0.jsonl"
    subscriptions = [inotify.subscribe(directory, match(index)) for index in range(watched)]
    try:
        profiler = cProfile.Profile()
        with target.open("ab") as file:
            for _ in range(EVENTS):
                profiler.enable()
                file.write(b"{}\n")
                file.flush()
                await asyncio.wait_for(subscriptions[0].wait(), WAKE_BOUND)
                profiler.disable()
        return sum(entry.callcount for entry in profiler.getstats()) / EVENTS
    finally:
        for subscription in subscriptions:
            await subscription.aclose()


def by_name(index: int) -> inotify.NameMatch:
    return f"rollout-2026-11-27T00-00-00-{index}.jsonl"


def by_suffix(index: int) -> inotify.NameMatch:
    return inotify.NameSuffix(f"-{index}.jsonl")


@pytest.mark.parametrize("match", [by_name, by_suffix], ids=["name", "suffix"])
async def test_an_event_costs_the_same_with_a_thousand_files_watched_in_its_folder(
    tmp_path: Path, match: Callable[[int], inotify.NameMatch]
) -> None:
    few = await calls_per_event(tmp_path / "few", 2, match)
    many = await calls_per_event(tmp_path / "many", 1000, match)
    # Looking the subscriptions up by name (or suffix) instead of asking each: no call per watched file.
    assert many < few + 50, (few, many)


async def test_a_suffix_subscription_hears_only_names_with_its_suffix(tmp_path: Path) -> None:
    mine = inotify.subscribe(tmp_path, inotify.NameSuffix("-a.jsonl"))
    other = inotify.subscribe(tmp_path, inotify.NameSuffix("-b.jsonl"))
    try:
        (tmp_path / "rollout-1-b.jsonl").write_bytes(b"x\n")
        await asyncio.wait_for(other.wait(), WAKE_BOUND)
        (tmp_path / "rollout-1-a.jsonl").write_bytes(b"x\n")
        await asyncio.wait_for(mine.wait(), WAKE_BOUND)
        # Only the b file's events reached `other` (they all came before a's, read in order).
        assert not other._event.is_set()
    finally:
        await mine.aclose()
        await other.aclose()
    assert asyncio.get_running_loop() not in inotify._HUBS  # the last subscription closed the instance
