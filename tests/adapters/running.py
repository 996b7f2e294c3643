"""What the adapter tests share: an adapter under test running for a block, entries appended to its journal.

``running(adapter)`` starts it and, whatever happens in the block, stops it and the platform it
runs against when the test owns one (the fake Slack: ``close()``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Protocol, TypeVar

from coven_codex.entries import BaseEntry
from coven_codex.journal import FileJournal


class Runs(Protocol):
    """An adapter under test as far as starting and stopping it goes."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


A = TypeVar("A", bound=Runs)


async def close(adapter: Runs) -> None:
    """Stop ``adapter``, and the platform it runs against when the test owns one (its ``close()``)."""
    await adapter.stop()
    closing: Callable[[], Awaitable[None]] | None = getattr(adapter, "close", None)
    if closing is not None:
        await closing()


@contextlib.asynccontextmanager
async def running(adapter: A) -> AsyncIterator[A]:
    """``adapter`` started for the block, then closed (:func:`close`)."""
    try:
        await adapter.start()
        yield adapter
    finally:
        await close(adapter)


async def append(path: Path, *entries: BaseEntry) -> None:
    """Append ``entries`` to the journal at ``path``, as the daemon would."""
    journal = FileJournal(path, durability="never")
    try:
        for entry in entries:
            await journal.append(entry)
    finally:
        await journal.aclose()
