"""Helpers for the tailer tests: a line collector running the real tailer, writer processes."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coven_codex.tailing import Line, TailNotice, tail_lines

FAST_POLL = 0.01


class Collector:
    """Runs ``tail_lines`` in a task and keeps every line and notice it produced."""

    def __init__(self, path: Path, **options: Any) -> None:
        self.path = path
        self.options = options
        self.lines: list[Line] = []
        self.notices: list[TailNotice] = []
        self._changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def _on_notice(self, notice: TailNotice) -> None:
        self.notices.append(notice)
        self._changed.set()

    async def _run(self) -> None:
        lines = tail_lines(self.path, on_notice=self._on_notice, **self.options)
        async with contextlib.aclosing(lines):
            async for line in lines:
                self.lines.append(line)
                self._changed.set()

    def start(self) -> Collector:
        self.task = asyncio.create_task(self._run())
        return self

    async def started(self) -> Collector:
        """Start, and give the tailer time to set its watch up."""
        self.start()
        await asyncio.sleep(0.05)
        return self

    @property
    def data(self) -> list[bytes]:
        return [line.data for line in self.lines]

    async def wait_for(self, predicate: Callable[[Collector], bool], within: float = 20.0) -> None:
        async with asyncio.timeout(within):
            while not predicate(self):
                if self.task is not None and self.task.done():
                    self.task.result()
                    raise AssertionError("the tail ended by itself")
                self._changed.clear()
                await self._changed.wait()

    async def wait_lines(self, count: int, within: float = 20.0) -> list[bytes]:
        await self.wait_for(lambda c: len(c.lines) >= count, within)
        return self.data

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def run_writer(script: str, *args: str) -> None:
    """Run a Python writer process (real, separate) and require it to succeed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        textwrap.dedent(script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _out, err = await asyncio.wait_for(process.communicate(), 120)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()
