"""Attacks on the file journal and the daemon's durable state: a second daemon on the same
journal, rotation and truncation of the journal, a full disk, power-cut promises."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, replies, user_prompts

from coven_codex.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def asked(server: ScriptedModelServer) -> list[str]:
    """The newest prompt of every request the model was sent."""
    return [user_prompts(r)[-1] for r in server.requests.responses_requests() if user_prompts(r)]


async def test_second_daemon_on_the_same_journal_is_refused(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory, tmp_path: Path
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    first = await h.start()
    await h.think("c", "hello")
    await h.wait_for(lambda es: "echo: hello" in replies(es, "c"), what="first reply")
    other = tmp_path / "other-workspace"
    other.mkdir()
    second = await h.start("--workspace", str(other))  # its own state and CODEX_HOME, the same journal
    assert await asyncio.wait_for(second.process.wait(), 30) == 1
    log = second.log()
    assert f"another coven-codex daemon (pid {first.pid}) is serving the journal {h.journal_path}" in log
    assert "Traceback" not in log
    assert not (other / ".codex" / "config.toml").exists()  # refused before touching anything
    await h.think("c", "still there?")
    await h.wait_for(lambda es: "echo: still there?" in replies(es, "c"), what="reply after the refusal")
    await asyncio.sleep(1.0)  # a second answerer would have been asked by now
    assert asked(model_server).count("hello") == 1
    assert asked(model_server).count("still there?") == 1
    assert replies(await h.entries(), "c") == ["echo: hello", "echo: still there?"]
    assert first.process.returncode is None
    assert await h.stop(first) == 0
