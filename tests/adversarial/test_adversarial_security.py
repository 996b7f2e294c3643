"""Attacks on the daemon's trust in its surroundings: forged state, planted executables and modules."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from agent_harness import AgentHarness, replies

from coven_codex.codex.process import TREE_MARKER
from coven_codex.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _until_logged(harness: AgentHarness, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        log = harness.daemons[-1].log()
        if text in log:
            return log
        if time.monotonic() > deadline or harness.daemons[-1].process.returncode is not None:
            raise AssertionError(f"the daemon never logged {text!r}:\n{log[-3000:]}")
        await asyncio.sleep(0.05)


async def test_forged_processes_json_in_the_workspace_kills_nothing(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    """Anyone who can write the workspace (Codex's commands, a commit) forges a process record."""
    h = harness_factory(codex_bin_169, model_server)
    env = {k: v for k, v in os.environ.items() if k not in (TREE_MARKER, "CODEX_HOME")}
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env, start_new_session=True)
    try:
        forged = {"x": [{"pid": victim.pid, "create_time": psutil.Process(victim.pid).create_time()}]}
        (h.workspace / ".coven").mkdir()
        (h.workspace / ".coven" / "processes.json").write_text(json.dumps(forged))
        daemon = await h.start()
        log = await _until_logged(h, "ready (pid")
        await h.think("red", "still working?")
        await h.wait_for(lambda es: "echo: still working?" in replies(es, "red"), what="the reply")
        assert _alive(victim.pid), f"the daemon ended a process it did not start:\n{log[-3000:]}"
        assert "ending them" not in log
        assert log.count("leaving them alone") == 1
        assert await h.stop(daemon) == 0
    finally:
        victim.kill()
        victim.wait()
