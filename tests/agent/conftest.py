"""Fixtures for the agent's end-to-end tests (the harness itself is in agent_harness.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psutil
import pytest
from agent_harness import AgentHarness

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.responders import echo_responder


@pytest.fixture
async def model_server() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer(responder=echo_responder) as server:
        yield server


@pytest.fixture
async def harness_factory(tmp_path: Path) -> AsyncIterator[Callable[..., AgentHarness]]:
    made: list[AgentHarness] = []

    def make(codex_bin: Path, server: ScriptedModelServer, journal_name: str | None = None) -> AgentHarness:
        harness = AgentHarness(tmp_path, codex_bin, server, journal_name=journal_name)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        await harness.cleanup()
        deadline = time.monotonic() + 10
        left = codex_processes(harness.codex_home)
        while left and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            left = codex_processes(harness.codex_home)
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        left = codex_processes(harness.codex_home)
        assert not left, f"Codex processes left behind: {[_describe(p) for p in left]}"


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} ppid={proc.ppid()} {' '.join(proc.cmdline())[:200]}"
    except psutil.Error:
        return str(proc.pid)
