"""The daemon starts the shared Codex app-server while it recovers, not when the first thought
comes (issue 18: restart → first reply ≤ 2 s; docs/architecture.md, "The shared app-server").
``coven-codex run`` as a subprocess, the real Codex CLI 0.169, the scripted model server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from agent_harness import AgentHarness, replies

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.processes import codex_processes

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def codex_leaders(h: AgentHarness, daemon_pid: int) -> list[int]:
    """The Codex processes the daemon started itself (process-group leaders: its children)."""
    found = []
    for proc in codex_processes(h.codex_home):
        try:
            if proc.ppid() == daemon_pid:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


async def until(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait (bounded) until ``predicate`` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_the_shared_app_server_runs_before_the_first_thought_and_answers_it(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start()
    await h.until_logged("ready (pid")
    await until(lambda: bool(codex_leaders(h, daemon.pid)), "the app-server started ahead of any thought")
    (warm,) = codex_leaders(h, daemon.pid)
    assert await h.entries() == []  # nothing is said to the chat about it
    await h.think("c", "hello")
    await h.wait_for(lambda es: "echo: hello" in replies(es, "c"), what="the first reply")
    assert codex_leaders(h, daemon.pid) == [warm]  # the thought's thread is on it, no second process
    assert await h.stop(daemon) == 0
    assert not codex_processes(h.codex_home)


async def test_a_failed_prestart_writes_nothing_to_the_chat_and_the_first_thought_starts_codex(
    tmp_path: Path, codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    """The Codex here fails its first ``app-server`` start only (the probes before it work): the
    daemon logs it once, saying a thought starts it again, and the first thought is answered."""
    marker = tmp_path / "failed-once"
    wrapper = tmp_path / "codex-failing-once"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$*" = app-server ] && [ ! -e "{marker}" ]; then\n'
        f'  touch "{marker}"; echo "simulated start failure" >&2; exit 3\n'
        "fi\n"
        f'exec "{codex_bin_169}" "$@"\n'
    )
    wrapper.chmod(0o755)
    h = harness_factory(wrapper, model_server)
    daemon = await h.start()
    log = await h.until_logged("ahead of the first thought")
    assert log.count("ahead of the first thought") == 1
    assert "started again when a thought needs it" in log
    assert await h.entries() == []  # no conversation: nothing in the chat
    await h.think("c", "after the failure")
    await h.wait_for(lambda es: "echo: after the failure" in replies(es, "c"), what="the first reply")
    assert [e.kind for e in await h.entries() if e.kind == "error"] == []
    assert await h.stop(daemon) == 0
