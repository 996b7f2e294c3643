"""Backends the journal contract suite runs against. A new backend adds one class here
and one fixture parameter in conftest.py; every contract test then runs against it."""

from __future__ import annotations

import fcntl
import os
import sys
import textwrap
from pathlib import Path
from typing import Protocol

from coven_codex.journal import Durability, FileJournal, Journal, MemoryJournal
from coven_codex.journal.redis import RedisJournal

LINE_LIMIT = 64 * 1024
"""A small max_line_bytes, so huge-line tests stay fast."""


class Backend(Protocol):
    name: str

    async def open(self) -> Journal:
        """Another handle on the same journal (a restart, or a second reader)."""
        ...

    async def inject_raw(self, data: bytes) -> None:
        """Store one line exactly as given (without newline), as a foreign writer could."""
        ...


class SharedBackend(Backend, Protocol):
    def writer_command(self, writer: str, count: int) -> list[str]:
        """A command running a separate process that appends ``count`` entries."""
        ...


class FileBackend:
    name = "file"

    def __init__(self, path: Path, durability: Durability = "batched") -> None:
        self.path = path
        self.durability = durability

    async def open(self) -> Journal:
        return FileJournal(self.path, durability=self.durability, max_line_bytes=LINE_LIMIT)

    async def inject_raw(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, data + b"\n")
        finally:
            os.close(fd)

    def writer_command(self, writer: str, count: int) -> list[str]:
        script = f"""
            import asyncio, sys
            from pathlib import Path
            from coven_codex.entries import ThoughtEntry
            from coven_codex.journal import FileJournal

            async def main() -> None:
                journal = FileJournal(Path({str(self.path)!r}), durability={self.durability!r},
                                      max_line_bytes={LINE_LIMIT})
                for number in range({count}):
                    await journal.append(ThoughtEntry(text="{writer} " + str(number), sender="{writer}"))
                await journal.aclose()

            asyncio.run(main())
        """
        return [sys.executable, "-c", textwrap.dedent(script)]


class MemoryBackend:
    name = "memory"

    def __init__(self) -> None:
        self.journal = MemoryJournal(max_line_bytes=LINE_LIMIT)

    async def open(self) -> Journal:
        return self.journal.reopen()

    async def inject_raw(self, data: bytes) -> None:
        await self.journal.append_raw(data)


class RedisBackend:
    """A Redis Streams journal under its own key on a real ``redis-server`` (shared by the session)."""

    name = "redis"

    def __init__(self, url: str) -> None:
        self.url = url
        self._writer = RedisJournal.from_url(url, max_line_bytes=LINE_LIMIT)

    async def open(self) -> Journal:
        return RedisJournal.from_url(self.url, max_line_bytes=LINE_LIMIT)

    async def inject_raw(self, data: bytes) -> None:
        await self._writer.append_raw({"entry": data})

    def writer_command(self, writer: str, count: int) -> list[str]:
        script = f"""
            import asyncio
            from coven_codex.entries import ThoughtEntry
            from coven_codex.journal.redis import RedisJournal

            async def main() -> None:
                journal = RedisJournal.from_url({self.url!r}, max_line_bytes={LINE_LIMIT})
                for number in range({count}):
                    await journal.append(ThoughtEntry(text="{writer} " + str(number), sender="{writer}"))
                await journal.aclose()

            asyncio.run(main())
        """
        return [sys.executable, "-c", textwrap.dedent(script)]

    async def aclose(self) -> None:
        await self._writer.aclose()
