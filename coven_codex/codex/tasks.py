"""One task group run by a task of its own: how a driver and an app-server connection keep their tasks.

:meth:`TaskRunner.start` starts the group with its first jobs and returns once it takes more;
:meth:`TaskRunner.spawn` adds one while it runs. A job that raises ends the group, and the owner's
``on_failure`` hears the exceptions once (it fails the driver or loses the connection, so a bug never
vanishes with its task). A job the group never started is closed, never left unawaited.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

Job = tuple[str, Coroutine[Any, Any, None]]
"""A task's name and its coroutine."""


class TaskRunner:
    """A task group in a runner task; ``name`` names the runner task."""

    def __init__(self, name: str, on_failure: Callable[[BaseExceptionGroup[Exception]], Awaitable[None]]) -> None:
        self._name = name
        self._on_failure = on_failure
        self._task: asyncio.Task[None] | None = None
        self._group: asyncio.TaskGroup | None = None
        self._ready = asyncio.Event()

    @property
    def started(self) -> bool:
        """:meth:`start` was called (the group may have ended since)."""
        return self._task is not None

    @property
    def running(self) -> bool:
        """The group takes tasks."""
        return self._group is not None

    async def start(self, *jobs: Job) -> None:
        """Start the runner task with ``jobs``; returns once the group takes more (or has already ended)."""
        self._task = asyncio.create_task(self._run(jobs), name=self._name)
        await self._ready.wait()

    def spawn(self, coro: Coroutine[Any, Any, None], name: str | None = None) -> asyncio.Task[None] | None:
        """Run ``coro`` in the group; ``None`` (and ``coro`` closed) when the group does not run."""
        if self._group is None:
            coro.close()
            return None
        return self._group.create_task(coro, name=name)

    async def stop(self) -> None:
        """Cancel the group's tasks and wait for the runner task to end."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self, jobs: tuple[Job, ...]) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                self._ready.set()
                for name, job in jobs:
                    group.create_task(job, name=name)
        except* Exception as failures:
            await self._on_failure(failures)
        finally:
            self._group = None  # a finished group takes no more tasks
            self._ready.set()
            for _, coro in jobs:  # unstarted if the group failed at once
                coro.close()
