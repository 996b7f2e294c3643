"""Fixtures for the tailer tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from tailing_helpers import FAST_POLL, Collector

from coven_codex.tailing import NotifierKind


@pytest.fixture(params=["inotify", "watchfiles", "polling"])
def notifier(request: pytest.FixtureRequest) -> NotifierKind:
    """Every tailer behaviour is checked with each way of being woken."""
    kind: NotifierKind = request.param
    return kind


@pytest.fixture
async def collect(notifier: NotifierKind) -> AsyncIterator[Callable[..., Collector]]:
    made: list[Collector] = []

    def make(path: Path, **options: Any) -> Collector:
        options.setdefault("notifier", notifier)
        options.setdefault("poll_interval", FAST_POLL)
        collector = Collector(path, **options)
        made.append(collector)
        return collector

    yield make
    for collector in made:
        if collector.task is not None:
            await collector.stop()
